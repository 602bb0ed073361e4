"""The operator CLI (`chronos-git`, and `hermes chronos-git` inside Hermes).

Importing the package is free of dependencies: `cli.deps` (the `setup`
command) must work where pygit2 is not installed yet.
"""
