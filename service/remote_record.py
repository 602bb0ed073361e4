"""chronos-git's own record of its remotes: `<store>/chronos/remotes.json`.

Each remote's URL, whether it takes checkpoints, and what each attempt did (the last
push, the last error, since when it fails, a divergence).  The record, never the
store's git config, says where a remote is: git and libgit2 would honour the config,
and anyone who can write the store can edit it (engine/store_audit.py).  The gate,
`remote list`, health and retention all read this file; every change to it is one
read-modify-write under `remotes.lock`.
"""
from __future__ import annotations

import time

import pygit2

from ..engine import store_audit
from ..engine.state_file import StateFile
from .core import Core

# the remote layout (service/remotes.py): one namespace per host
HOSTS = "refs/chronos/hosts"
TRACKING = "refs/chronos/remotes"
OUTBOX = "refs/chronos/outbox"     # the exact commits a push checked (a ref may move meanwhile)
MARK = "chronosSnapshots"          # remote.<name>.chronosSnapshots: a remote chronos-git manages
SENDS = "send_snapshots"           # remotes.json: the record of --snapshots (its "snapshots" is the pushed tips)


def _record(core: Core) -> StateFile:
    return StateFile(core.store.meta_dir, "remotes.json")


def record_path(core: Core):
    return _record(core).path


def read_record(path) -> dict:
    """The whole record, {} when it is missing or damaged; an unreadable one raises (a remote
    must not look unconfigured because its record cannot be read)."""
    return StateFile(path.parent, path.name).read({}, expect=dict, raise_unreadable=True)


def pinned_tips(core: Core) -> set[str]:
    """The newest checkpoint each --snapshots remote holds, per workspace: retention keeps it (and
    so everything newer), so the next push continues the remote's chain."""
    if not core.store_exists():
        return set()
    out: set[str] = set()
    for st in read_record(record_path(core)).values():
        if isinstance(st, dict) and isinstance(st.get("snapshots"), dict):
            out.update(v for v in st["snapshots"].values() if isinstance(v, str))
    return out


class RemoteRecord:
    """The record of one store: which remotes there are, and each one's entry."""

    def __init__(self, core: Core):
        self.core = core

    def read(self) -> dict:
        return read_record(record_path(self.core))

    def configured(self) -> dict[str, tuple[str, bool]]:
        """{name: (url, snapshots)} of the remotes chronos-git manages: its own record
        (remotes.json), never the store's git config, which git and libgit2 would honour and
        anyone who can write the store can edit (engine/store_audit.py)."""
        if not self.core.store_exists():
            return {}
        state = self.read()
        if any(isinstance(st, dict) and not isinstance(st.get("url"), str) for st in state.values()):
            state = self._record_legacy(state)
        return {name: (st["url"], bool(st.get(SENDS))) for name, st in state.items()
                if isinstance(st, dict) and isinstance(st.get("url"), str)}

    def _record_legacy(self, state: dict) -> dict:
        """A remote added before the record held URLs (its remotes.json entry, written by
        `remote add`, has none): its URL and mark are taken once from the git config."""
        cfg = self.core.store.repo().config
        for name, st in state.items():
            if not isinstance(st, dict) or isinstance(st.get("url"), str):
                continue
            try:
                url, mark = cfg[f"remote.{name}.url"], cfg.get_bool(f"remote.{name}.{MARK}")
            except (KeyError, pygit2.GitError, ValueError):
                continue
            try:
                self.update(name, url=url, **{SENDS: bool(mark)})
            except OSError:
                pass                      # a read-only store: taken from the config again next time
            st.update({"url": url, SENDS: bool(mark)})
        return state

    def recorded_config(self) -> dict[str, dict[str, str]]:
        """What the store's git config may hold for each remote: exactly what `remote add`
        writes there from the record (the store audit allows that and nothing else)."""
        return {name: {"url": url, "fetch": f"+{HOSTS}/*:{TRACKING}/{name}/hosts/*",
                       MARK.lower(): "true" if snapshots else "false"}
                for name, (url, snapshots) in self.configured().items()}

    def untampered(self, doing: str) -> None:
        """Refuse to reach a remote while the store's config holds a setting chronos-git did
        not write: libgit2 would honour a `url.*.insteadOf` (the anchor pushed to a fake), an
        `include`, an `http.*` proxy ... (engine/store_audit.py)."""
        found = store_audit.transport_findings(store_audit.audit(self.core.store.root, self.recorded_config()))
        if found:
            raise store_audit.StoreTampered(doing, found)

    def pick(self, name: str | None) -> tuple[str, str, bool]:
        """(name, url, snapshots) of the remote named, or of the only one when none is."""
        remotes = self.configured()
        if name is None:
            if len(remotes) != 1:
                raise ValueError("no remote is configured: add one with `chronos-git remote add NAME URL`"
                                 if not remotes else f"{len(remotes)} remotes are configured "
                                 f"({', '.join(sorted(remotes))}): name one")
            name = next(iter(remotes))
        if name not in remotes:
            raise ValueError(f"no remote {name!r}" + (f" (remotes: {', '.join(sorted(remotes))})"
                                                     if remotes else ": add it with `chronos-git remote add`"))
        url, snapshots = remotes[name]
        return name, url, snapshots

    def update(self, name: str, *, drop: bool = False, create: bool = False, merge=None, **fields) -> None:
        """Read-modify-write of one remote's entry under the lock; an entry that `remote remove`
        dropped is never brought back by a push that was still under way."""
        def change(state: dict) -> dict:
            if drop:
                state.pop(name, None)
            elif name in state or create:
                entry = state.setdefault(name, {})
                entry.update(merge(entry) if merge else {})
                entry.update(fields)
            return state
        _record(self.core).update(change, {}, expect=dict, raise_unreadable=True)   # fsynced, sorted keys

    def failed(self, name: str, exc: BaseException) -> None:
        """An attempt that failed: shown by health, and counted for require_anchor."""
        self.update(name, last_error=str(exc) or type(exc).__name__, last_attempt=time.time(),
                    merge=lambda e: {"failing_since": e.get("failing_since") or time.time()})
