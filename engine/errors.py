"""Errors with messages meant for people: every surface prints `str(err)`."""
import errno
import os


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


class CallNotFound(CheckpointNotFound):
    """No protected call (or session, subagent) of that name: a 404 like a checkpoint's."""
    code = "call_not_found"


class StoreError(ChronosError):
    code = "store_error"


class PathError(ChronosError):
    code = "bad_path"


class UnknownWorkspace(ChronosError):
    """A path the store has no checkpoints for (the HTTP API serves only known ones)."""
    code = "unknown_workspace"


class PlanTokenError(ChronosError):
    """A restore that must be confirmed with the token of a recent dry run of the same request."""
    code = "plan_token"


class UnsafePath(PathError):
    """A name a checkpoint must never write: `..`, `.git`, an empty or NUL-holding component."""
    code = "unsafe_path"


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def explain(exc: BaseException, *where) -> str:
    """A failed write in words a person can act on: which filesystem is full or read-only
    and how much space is left (libgit2 says "no error" when a write hits a full disk)."""
    code = getattr(exc, "errno", None)
    msg = str(exc).strip()
    for path in where:
        probe = os.fspath(path)
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe.rstrip("/")) or "/"
        try:
            st = os.statvfs(probe)
        except OSError:
            continue
        free = st.f_bavail * st.f_frsize
        if code == errno.ENOSPC or free < (1 << 20) or st.f_favail == 0:
            return (f"the filesystem holding {os.fspath(path)} is full ({_size(free)} free): "
                    f"free some space and retry")
        if code == errno.EROFS or st.f_flag & os.ST_RDONLY:
            return f"{os.fspath(path)} is on a read-only filesystem"
        if code in (errno.EACCES, errno.EPERM) and not os.access(probe, os.W_OK):
            return f"no permission to write {os.fspath(path)}"
    if not msg or msg.lower() == "no error":
        return f"{type(exc).__name__} (errno {code}) and no further reason from libgit2"
    return msg


class StoreUnwritable(StoreError):
    """The store cannot take a write now (full disk, read-only filesystem, permissions)."""
    code = "store_unwritable"
