"""One error hierarchy, one mapping: exception -> envelope, exit status, HTTP status.

Every surface (CLI, /chronos, model tools, HTTP) turns an exception into an
answer through `envelope()`, so a closed gate is exit 3 / HTTP 409 everywhere
and an unknown checkpoint exit 1 / HTTP 404, and nobody sees a traceback.
"""
from __future__ import annotations

import pygit2

from ..engine.errors import (
    CheckpointNotFound,
    ChronosError,
    PathError,
    PlanTokenError,
    StoreUnwritable,
    UnknownWorkspace,
    WorkspaceRefused,
    explain,
)
from ..engine.store import StoreMissing
from ..journal_refs import IntegrityError, JournalError
from .results import ErrorResult, Refusal

EXIT_OK, EXIT_ERROR, EXIT_BLOCKED, EXIT_NOT_RECORDED = 0, 1, 3, 4


class Blocked(ChronosError):
    """The recovery gate is closed; `refusal` says why and what an operator can do."""
    code = "chronos_blocked"

    def __init__(self, refusal: Refusal):
        super().__init__(refusal.message)
        self.refusal = refusal


class PlanRequired(PlanTokenError):
    """A real restore over HTTP without the plan token of its dry run."""
    code = "plan_required"


class PlanChanged(PlanTokenError):
    """A confirmed restore whose plan is no longer the one its dry run showed (the workspace
    changed since): refused with nothing changed; `result` is the new plan, with a new token."""
    code = "plan_changed"

    def __init__(self, message: str, result):
        super().__init__(message)
        self.result = result                # a dry run's RestoreResult, status "error"


class StaleReplay(ChronosError):
    """A not-applied call whose paths later calls changed: replaying it would overwrite their work."""
    code = "replay_stale"


class ProtectedPath(ChronosError):
    """A call whose target is chronos-git's own (its store, its witness, the plugin's files):
    refused before dispatch and journaled as a `refused` event (service/protected.py)."""
    code = "protected_path"

    def __init__(self, message: str, *, operation_id: str, paths: list[dict], recorded: bool = True):
        super().__init__(message)
        self.operation_id = operation_id
        self.paths = paths                  # [{"path", "resolved", "what"}]
        self.recorded = recorded            # False: the refusal could not be journaled (still refused)


# most specific first: (exception types, HTTP status)
_HTTP = (
    ((CheckpointNotFound, UnknownWorkspace, StoreMissing), 404),
    ((WorkspaceRefused, ProtectedPath), 403),
    ((PlanRequired,), 428),
    ((PlanTokenError, IntegrityError, StaleReplay), 409),
    ((StoreUnwritable,), 507),
    ((ChronosError, JournalError, PathError, ValueError), 400),
)


MAX_ERROR_CHARS = 4096        # an error names what it was given; a 10 MB name is not sent back whole


def _bounded(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    keep = MAX_ERROR_CHARS // 2
    return f"{text[:keep]} [... {len(text) - keep - 200:,} characters left out ...] {text[-200:]}"


def envelope(exc: BaseException, *stores) -> tuple[ErrorResult, int, int]:
    """(answer, exit status, HTTP status) for any exception; `stores` name where a failed
    write went (for a message that says which disk is full)."""
    if isinstance(exc, Blocked):
        return exc.refusal, EXIT_BLOCKED, 409
    for kinds, http in _HTTP:
        if isinstance(exc, kinds):
            code = getattr(exc, "code", None) or ("bad_input" if isinstance(exc, ValueError) else "error")
            return ErrorResult(error=_bounded(str(exc)), code=code), EXIT_ERROR, http
    if isinstance(exc, (OSError, pygit2.GitError)):
        return ErrorResult(error=_bounded(explain(exc, *stores)), code="os_error"), EXIT_ERROR, 500
    return ErrorResult(error=_bounded(f"{type(exc).__name__}: {exc}"), code="internal"), EXIT_ERROR, 500
