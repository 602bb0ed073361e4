"""The inotify watch limit reached (engine/watcher.py's degraded mode), on every surface.

A watcher runs only in a long-lived host (Hermes), but `health` and `status` are often another
process (the CLI).  So the host publishes each degraded watcher's state in
`<store>/chronos/watch/<pid>.json` (one writer per file: no lock; rewritten when the mode or
the count of unwatched directories changes, removed when none is degraded and at exit).
Readers take this process's own watchers live and the files of other live processes, and make
protection DEGRADED with the one command that ends it (`sudo sysctl fs.inotify.max_user_watches=N`).
Nothing is missed meanwhile: snapshots walk what is not watched, which is slower.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..engine.fsutil import atomic_write
from .core import Core
from .results import Protection, WatcherState, WorkspaceInfo

DIR = "watch"
MODE = "degraded: watch limit"


class WatchLimit:
    def __init__(self, core: Core):
        self.core = core
        self._published: dict[str, tuple] = {}      # root -> (mode, unwatched dirs) last written

    def _file(self) -> Path:
        return self.core.store.meta_dir / DIR / f"{os.getpid()}.json"

    def publish(self, ws) -> None:
        """After a watcher started or a snapshot: write this process's degraded watchers when
        what they say changed.  Never raises (a host's call must not fail for a notice)."""
        try:
            st = ws.watcher_state()
            root = os.fsdecode(ws.root_bytes)
            key = (st.get("mode"), st.get("unwatched_dirs")) if st.get("mode") == MODE else None
            if self._published.get(root) == key:
                return
            if key is None:
                self._published.pop(root, None)
            else:
                self._published[root] = key
            self._write()
        except Exception:                                 # noqa: BLE001
            pass

    def _write(self) -> None:
        states = {os.fsdecode(ws.root_bytes): ws.watcher_state() for ws in self.core.store.open_workspaces()}
        doc = {root: st for root, st in states.items() if st.get("mode") == MODE}
        path = self._file()
        if not doc:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(mode=0o700, exist_ok=True)
        atomic_write(path, json.dumps({"pid": os.getpid(), "workspaces": doc}).encode(), durable=False)

    def close(self) -> None:
        """At exit: this process's watchers end with it."""
        if self._published and self.core.store_exists():
            self._file().unlink(missing_ok=True)
            self._published.clear()

    def found(self) -> dict[str, dict]:
        """Workspace root -> the state of a degraded watcher: published by live processes (this one's
        too: an in-process CLI has another store object), this process's own watchers live."""
        if not self.core.store_exists():
            return {}
        out: dict[str, dict] = {}
        folder = self.core.store.meta_dir / DIR
        for f in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            try:
                doc = json.loads(f.read_text())
                pid = int(doc["pid"])
                if pid != os.getpid() and not _alive(pid):
                    continue                              # its watchers ended with it
                for root, st in doc["workspaces"].items():
                    out.setdefault(root, {**st, "process": pid})
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
        for ws in self.core.store.open_workspaces():
            st = ws.watcher_state()
            if st.get("mode") == MODE:
                out[os.fsdecode(ws.root_bytes)] = {**st, "process": os.getpid()}
        return out


def shown(info: WorkspaceInfo | None, found: dict[str, dict]) -> dict[str, dict]:
    """`found`, after giving `info` (health's workspace) another process's degraded watcher
    when this process has none there (the CLI's health of a workspace Hermes watches)."""
    if info is not None and info.root in found and not (info.watcher and info.watcher.enabled):
        info.watcher = WatcherState(**{**found[info.root], "enabled": True})
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reason(found: dict[str, dict]) -> str:
    parts = []
    for root, st in sorted(found.items()):
        parts.append(f"{st.get('unwatched_dirs')} directories of {root} are not watched: the inotify watch "
                     f"limit (fs.inotify.max_user_watches={st.get('max_user_watches')}) is reached, so every "
                     "snapshot there walks them (slower; nothing is missed)")
    return "; ".join(parts)


def fix(found: dict[str, dict]) -> str:
    worst = max(found.values(), key=lambda st: st.get("suggested") or 0)
    return f"`{worst['fix']}` (to keep it after a reboot: `{worst['fix_permanent']}`)"


def degraded(p: Protection, found: dict[str, dict]) -> Protection:
    """A degraded watcher makes protection DEGRADED (as a large narrowing of capture does)."""
    if not found or p.state not in ("on", "degraded"):
        return p
    return p.degraded(reason(found), fix(found))
