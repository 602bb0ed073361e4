"""Off the machine: the journal's anchor chain (and, opt-in, checkpoints) on git remotes.

Remote layout, one namespace per host so that many machines share one remote:

    refs/chronos/hosts/<host>/journal                the anchor chain (journal_refs.anchor):
                                                     event metadata and hashes, no file contents
    refs/chronos/hosts/<host>/manifest               host.json: workspace ids -> original paths
    refs/chronos/hosts/<host>/snapshots/<ws id>      a workspace's checkpoints (`--snapshots` only)

A remote's URL and whether it takes checkpoints are chronos-git's own record, in
`<store>/chronos/remotes.json` (with what each attempt did; `remote add` is also
journaled with its URL), never the store's git config: the remotes are mirrored
there (`git remote -v` in the store lists them; `remote.<name>.chronosSnapshots`
marks ours), but a `remote.*` or `url.*` setting that differs from the record is
tampering (engine/store_audit.py) and pushes and fetches refuse to run while the
config holds any setting chronos-git did not write.  Pushed with explicit refspecs.  The journal is
never force-pushed: a remote journal the local one does not descend from is a
divergence, recorded there, and the gate stays closed until a later check matches
(or the operator removes the remote).  The gate reads that file and, with
`require_anchor`, how long every remote has been failing.

In Hermes pushes run on a background thread after a turn, at most every
`push_interval_s`; nothing here runs on a tool call's path.  Every exchange with a
remote is bounded (service/remote_link.py): its transport calls run in child
processes killed past `remote_deadline_s`, or below `remote_min_rate_bps`, and a push cut off is recorded as
failing like any other, so it counts towards `require_anchor` and frees the pusher.

The parts, one module each: the record (remote_record), one bounded exchange
(remote_link), the push (remote_push), the fetch (remote_fetch), the anchor and the
gate's reasoning about it (remote_anchor).  `Remotes` holds them together: the host's
identity, the commands, and the background pusher.
"""
from __future__ import annotations

import builtins
import os
import threading
import time
from pathlib import Path

from ..engine import locking, metadir, remote as transport
from ..engine.fsutil import atomic_write, realpath
from ..journal_refs import JournalError, events
from ..settings import HOST_ID, default_host_id
from . import remote_anchor, remote_fetch, remote_push
from .core import Core
from .remote_link import Link
from .remote_record import HOSTS, MARK, OUTBOX, SENDS, TRACKING, RemoteRecord
from .results import AnchorCheck, FetchResult, PushResult, RemoteAdded, RemoteInfo, RemoteRemoved, RemotesResult

PUSHER = "push"         # the background pusher's key and kind in service/jobs.py


class Remotes:
    def __init__(self, core: Core, start):
        self.core = core
        self.start = start                  # the service's start: the journal opened
        self.record = RemoteRecord(core)
        self._kick = threading.Event()     # a push is wanted (after a turn)
        self.last_attempt = 0.0

    # ------------------------------------------------------------ identity
    @property
    def host(self) -> str:
        """The setting, else the id this store chose at its first use (so a symlinked or
        differently spelt store path never makes a second namespace on the remotes)."""
        if self.core.settings.host_id:
            return self.core.settings.host_id
        path = self.core.store.meta_dir / "host-id"
        try:
            saved = path.read_text().strip()
            if HOST_ID.match(saved):
                return saved
        except OSError:
            pass
        chosen = default_host_id(Path(realpath(self.core.store_dir)))
        try:
            atomic_write(path, chosen.encode() + b"\n", durable=True)
        except OSError:
            pass                          # a read-only store: the same derivation next time
        return chosen

    def link(self, name: str, url: str) -> Link:
        """One bounded exchange with remote `name`, with this host's credentials."""
        return Link(self.core, name, url, transport.Auth.from_env(self.core.settings.remote_ssh_key))

    def recorded_config(self) -> dict[str, dict[str, str]]:
        """What the store's git config may hold for each remote (service/remote_record.py)."""
        return self.record.recorded_config()

    def _journal_note(self, action: str, **fields) -> None:
        """Adding or removing a remote is journaled (best effort: a journal in doubt refuses)."""
        try:
            self.start()
            self.core.journal.append(events.Maintenance, {"operation_id": None, "action": action, **fields})
        except (JournalError, OSError):
            pass

    # ------------------------------------------------------------- commands
    def add(self, name: str, url: str, *, snapshots: bool = False, authorize=None) -> RemoteAdded:
        """`authorize(claim)`: the operator's signature for the act, asked once the URL is known
        and before anything changes (service/operators.py)."""
        transport.check_name(name)
        url = transport.normalize_url(url)
        local = transport.local_path(url)
        store = self.core.store
        if local is not None:
            here = realpath(store.root)
            there = realpath(local)
            if there == here or there.startswith(here + os.sep) or here.startswith(there + os.sep):
                raise ValueError(f"{local} is the store or inside it: a remote must be somewhere else")
        repo = store.repo()
        known = self.record.configured()
        if name in known or name in [r.name for r in repo.remotes]:
            shown_url = known[name][0] if name in known else repo.remotes[name].url or ""
            raise ValueError(f"remote {name!r} exists already ({transport.display_url(shown_url)});"
                             " remove it first")
        signed = authorize({"kind": events.Maintenance.kind, "action": "remote_added", "remote": name,
                            "url": transport.display_url(url)}) if authorize else {}
        created = transport.ensure_local(url)
        repo.remotes.create(name, url, f"+{HOSTS}/*:{TRACKING}/{name}/hosts/*")
        repo.config[f"remote.{name}.{MARK}"] = bool(snapshots)
        self.record.update(name, create=True, added=time.time(), last_error=None, failing_since=None,
                           diverged=None, url=url, **{SENDS: bool(snapshots)})
        shown = transport.display_url(url)
        self._journal_note("remote_added", remote=name, url=shown, snapshots=bool(snapshots), **signed)
        warning = None
        if snapshots:
            warning = (f"file contents leave this machine: every checkpoint of every workspace is pushed to "
                       f"{shown}, except that a push refuses checkpoints holding files that match "
                       f"remote_exclude ({', '.join(self.core.settings.remote_exclude) or 'none'})")
        return RemoteAdded(remote=name, url=shown, snapshots=bool(snapshots), host=self.host, created=created,
                           warning=warning)

    def remove(self, name: str, *, authorize=None) -> RemoteRemoved:
        if name not in self.record.configured() and name in self.record.read():
            self.record.update(name, drop=True)   # its git config went (git remote remove): forget its state
            return RemoteRemoved(remote=name)
        name, url, _ = self.record.pick(name)
        signed = authorize({"kind": events.Maintenance.kind, "action": "remote_removed", "remote": name}) \
            if authorize else {}
        with locking.exclusive(metadir.lock_path(self.core.store.meta_dir, "push", name)):   # after a push under way
            repo = self.core.store.repo()
            if name in [r.name for r in repo.remotes]:
                repo.remotes.delete(name)       # its mirror in the git config, and its tracking refs
            self.record.update(name, drop=True)
            for ref in [r for r in repo.references
                        if r.startswith((f"{OUTBOX}/{name}/", f"{TRACKING}/{name}/"))]:
                repo.references.delete(ref)
        self._journal_note("remote_removed", remote=name, url=transport.display_url(url), **signed)
        return RemoteRemoved(remote=name)

    def list(self) -> RemotesResult:
        state = self.record.read() if self.core.store_exists() else {}
        seq = self._local_seq()
        out = []
        for name, (url, snapshots) in sorted(self.record.configured().items()):
            st = state.get(name) or {}
            info = RemoteInfo(name=name, url=transport.display_url(url), snapshots=snapshots,
                              last_push=st.get("last_push"), last_error=st.get("last_error"),
                              journal_head=st.get("journal_head"), failing_since=st.get("failing_since"),
                              diverged=st.get("diverged"))
            if seq is not None:
                info.behind = max(seq - st["seq"], 0) if isinstance(st.get("seq"), int) else seq + 1
            out.append(info)
        return RemotesResult(host=self.host, remotes=out)

    def _local_seq(self) -> int | None:
        if not self.core.store_exists():
            return None
        self.start()
        j = self.core.journal
        j.refresh()
        return j.state.seq if j.head is not None else None

    def push(self, name: str | None = None, *, allow_excluded: bool = False) -> PushResult:
        """service/remote_push.py"""
        return remote_push.push(self, name, allow_excluded=allow_excluded)

    def fetch(self, name: str) -> FetchResult:
        """service/remote_fetch.py"""
        return remote_fetch.fetch(self, name)

    def verify(self, name: str) -> AnchorCheck:
        """This host's journal on the remote is the local head or an ancestor of it
        (service/remote_anchor.py)."""
        return remote_anchor.verify(self, name)

    # ------------------------------------------------------------ background
    def kick(self) -> None:
        """Push soon (after a turn): never on the caller's path, at most every push_interval_s,
        on this process's pusher (a worker of service/jobs.py: `health` shows it)."""
        if not self.core.store_exists() or not self.record.configured():
            return
        self._kick.set()
        self.core.jobs.worker(PUSHER, PUSHER, self._next_push, lambda _: self._push_kicked())

    def _next_push(self) -> None:
        """The pusher's wait: a kick, then the rest of push_interval_s since the last attempt."""
        self._kick.wait()
        wait = self.last_attempt + self.core.settings.push_interval_s - time.time()
        if wait > 0:
            time.sleep(wait)

    def _push_kicked(self) -> None:
        self._kick.clear()          # once the pusher is busy: a drain sees the one or the other
        self.push_all()

    def drain(self, timeout: float) -> None:
        """At exit: let a push that is under way finish (bounded); one not started waits for the
        next session."""
        deadline = time.monotonic() + timeout
        pusher = self.core.jobs.get(PUSHER)

        def due() -> bool:
            return self._kick.is_set() and self.last_attempt + self.core.settings.push_interval_s <= time.time()
        while pusher is not None and (pusher.busy or due()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def push_all(self) -> builtins.list:             # (`list` here is the method above)
        """One attempt per remote; failures are recorded (health shows them), never raised."""
        out: list[PushResult | Exception] = []
        for name in sorted(self.record.configured()):
            try:
                out.append(self.push(name))
            except Exception as exc:         # recorded in remotes.json by push itself when it can
                out.append(exc)
        self.last_attempt = time.time()
        return out
