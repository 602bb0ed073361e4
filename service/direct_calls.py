"""Protected calls chronos-git runs itself, for a person: `chronos-git run -- CMD` (a shell
call) and `chronos-git write` (a file call), each through the one transaction
(service/transaction.py)."""
from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from ..engine.confine import split
from ..engine.errors import ChronosError, UnknownWorkspace, explain
from ..journal_refs.events import sha256_hex
from ..journal_refs.evidence import content_id
from .calls import Call, Declared, Outcome, Ticket
from .results import RunResult, WriteResult

if TYPE_CHECKING:
    from .transaction import ProtectedCalls


def run_command(calls: ProtectedCalls, workspace: str, argv: list[str], *, tool: str = "terminal",
                stdout=None, stderr=None) -> RunResult:
    """A protected shell call: `chronos-git run -- CMD`."""
    _exists(workspace, "nothing was run")
    call = Call(tool=tool, args={"argv": argv, "cwd": workspace}, workspace=workspace,
                session_id=os.environ.get("CHRONOS_GIT_SESSION"), actor="cli")
    rc: int | None
    if calls.core.settings.is_read_only(tool):
        rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
        return _exited(RunResult(journaled=False, read_only=True, exit_code=rc))
    failure = None
    with calls.protect(call) as t:
        try:
            rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            # exec failed: the command never ran, a known outcome (the gate stays open)
            rc, failure = None, f"could not run {argv[0]}: {exc.strerror or exc}"
            t.outcome = Outcome(status="error", result_hash=sha256_hex(failure))
        except (OSError, subprocess.SubprocessError) as exc:    # it may have started: unknown
            rc, failure = None, f"could not run {argv[0]}: {exc}"
            t.outcome = Outcome(status="error", uncertain_reason=f"exception: {type(exc).__name__}")
        else:
            t.outcome = Outcome(status="ok" if rc == 0 else "error", result_hash=sha256_hex(str(rc)),
                                exit_code=rc)
    if failure:
        return RunResult(**t.record.model_dump(exclude={"status", "error"}), status="error",
                         exit_code=None, error=failure)
    return _exited(RunResult(**t.record.model_dump(), exit_code=rc))


def write_file(calls: ProtectedCalls, workspace: str, path: str, content: bytes, *,
               tool: str = "write_file", session_id: str | None = None, actor: str | None = "cli") -> WriteResult:
    """A protected write with write_file semantics (parents created, replaced whole),
    confined to the workspace: never through a symlink, never into a `.git`."""
    _exists(workspace, "nothing was written")
    ws = calls.core.store.workspace(workspace)
    abspath = os.path.normpath(path if os.path.isabs(path) else os.path.join(workspace, path))
    if os.fsencode(abspath) == ws.root_bytes:
        raise ValueError(f"{path!r} names the workspace folder itself: write needs the path of a file "
                         "(nothing was written)")
    call = Call(tool=tool, args={"path": abspath, "content": content.decode("utf-8", "replace")},
                workspace=workspace, session_id=session_id, declared=[Declared(abspath, content)],
                actor=actor)
    calls.check_protected(call)           # chronos-git's own files: refused and journaled, wherever
    split(ws.rel(abspath))                # outside the workspace or into a .git: refused now
    if path.endswith(("/", os.sep)) or os.path.isdir(abspath):
        raise ValueError(f"{path} names a folder: write needs the path of a file (nothing was written)")
    failure = None
    with calls.protect(call) as t:
        try:
            ws.write_files([(abspath, content)])
        except (OSError, ChronosError) as exc:
            failure = exc
            t.outcome = failed_write(t.ticket, exc)
        else:
            t.outcome = Outcome(status="ok", result_hash=sha256_hex(str(len(content))))
    if failure is not None:
        raise ChronosError(f"could not write {abspath}: {explain(failure, ws.root)}")
    return WriteResult(**t.record.model_dump(), path=abspath, bytes_written=len(content))


def _exited(res: RunResult) -> RunResult:
    """A command that did not exit 0 has the error shape every surface shows."""
    rc = res.exit_code
    if rc:
        res.status = "error"
        res.error = res.error or (f"the command was killed by signal {-rc}" if rc < 0
                                  else f"the command exited with status {rc}")
    return res


def failed_write(ticket: Ticket, exc: BaseException) -> Outcome:
    """A write that raised: a known error when every path is still at its pre-image
    (temp + rename never half-replaces a file), else an unknown outcome."""
    untouched = all(content_id(d["path"]) == d["pre"] for d in ticket.declared)
    return Outcome(status="error", result_hash=sha256_hex(str(exc)),
                   uncertain_reason=None if untouched else f"exception: {type(exc).__name__}")


def _exists(workspace: str, what: str) -> None:
    """A workspace that is not a folder is refused before anything is journaled."""
    if not os.path.isdir(workspace):
        raise UnknownWorkspace(f"workspace {os.fsdecode(workspace)} does not exist or is not a folder: {what}")
