"""Errors with messages meant for people: every surface prints `str(err)`."""


class ChronosError(Exception):
    """Base class; `code` is a stable machine-readable label."""

    code = "error"

    def __init__(self, message: str, **details):
        super().__init__(message)
        self.details = details


class WorkspaceRefused(ChronosError):
    code = "workspace_refused"


class CheckpointNotFound(ChronosError):
    code = "checkpoint_not_found"


class StoreError(ChronosError):
    code = "store_error"


class PathError(ChronosError):
    code = "bad_path"
