"""The snapshot engine: a pygit2 shadow repository per Hermes profile.

Knows nothing about Hermes, HTTP or the journal.  Public entry points:
`Store.open()` and `Store.workspace()`.
"""
from .errors import ChronosError
from .store import Store
from .workspace import Workspace

__all__ = ["ChronosError", "Store", "Workspace"]
