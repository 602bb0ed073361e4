"""Who owns an operation: the process identity lives in the engine (it also owns temp files)."""
from ..engine.owner import ProcessIdentity

__all__ = ["ProcessIdentity"]
