"""The Hermes adapter: registration, hooks and middleware (plugin), the model's
tools, `/chronos`, what tool calls mean to the journal (semantics), and the
stdlib-only shell registered when protection cannot run.

Importing the package is free of dependencies (the shell must load where
pygit2 is missing): each module imports what it needs.
"""
