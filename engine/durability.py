"""fsync of git writes is a process-global libgit2 switch; share it by reference count."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import pygit2

_guard = threading.Lock()
_users = 0


@contextmanager
def fsync_scope(enabled: bool = True):
    """While any scope is open, libgit2 fsyncs objects, refs and their directories."""
    global _users
    if not enabled:
        yield
        return
    with _guard:
        _users += 1
        if _users == 1:
            pygit2.settings.enable_fsync_gitdir(True)
    try:
        yield
    finally:
        with _guard:
            _users -= 1
            if _users == 0:
                pygit2.settings.enable_fsync_gitdir(False)
