"""chronos-git benchmark harness.

Run from the repository root in the project's environment::

    python -m bench [--quick] [--corpus NAME] [--json PATH]

Importing this package has no side effects; everything happens in
`bench.cli.main()`.  See bench/README.md for what is measured and how.
"""

import sys
from pathlib import Path

__all__ = ["CORPORA", "use_test_support"]

CORPORA = ("synthetic-1k", "synthetic-1k-git", "synthetic-20k", "synthetic-100k", "linux-6.1", "linux-6.1-git")


def use_test_support() -> None:
    """Make the tests' `support` package importable: the Hermes harness and the tree
    fingerprint have one copy each, there."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
