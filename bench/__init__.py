"""chronos-git benchmark harness.

Run from the repository root in the project's environment::

    python -m bench [--quick] [--corpus NAME] [--json PATH]

Importing this package has no side effects; everything happens in
`bench.cli.main()`.  See bench/README.md for what is measured and how.
"""

__all__ = ["CORPORA"]

CORPORA = ("synthetic-1k", "synthetic-1k-git", "synthetic-20k", "synthetic-100k", "linux-6.1", "linux-6.1-git")
