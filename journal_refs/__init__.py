"""The tool-call journal: a chain of git commits on `refs/chronos/journal`.

Knows the shadow repository (it lives in the same object graph) but nothing
about Hermes, HTTP or how tools are run.
"""
from . import events
from .journal import IntegrityError, Journal, JournalError, TransitionError
from .operation import OpenOperation

__all__ = ["Journal", "IntegrityError", "JournalError", "TransitionError", "OpenOperation", "events"]
