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
remote is bounded (`_Link`): its transport calls run in child processes killed past
`remote_deadline_s`, or below `remote_min_rate_bps`, and a push cut off is recorded as
failing like any other, so it counts towards `require_anchor` and frees the pusher.
"""
from __future__ import annotations

import builtins
import fnmatch
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pygit2

from ..engine import locking, offload, remote as transport, retention, store_audit
from ..engine.codec import display
from ..engine.fsutil import atomic_write
from ..journal_refs import IntegrityError, JournalError, anchor, events
from ..settings import HOST_ID, default_host_id
from .core import Core
from .results import (
    AnchorCheck,
    FetchedHost,
    FetchedWorkspace,
    FetchResult,
    PushResult,
    RemoteAdded,
    RemoteInfo,
    RemoteRemoved,
    RemotesResult,
)

HOSTS = "refs/chronos/hosts"
TRACKING = "refs/chronos/remotes"
OUTBOX = "refs/chronos/outbox"     # the exact commits a push checked (a ref may move meanwhile)
MARK = "chronosSnapshots"          # remote.<name>.chronosSnapshots: a remote chronos-git manages
SENDS = "send_snapshots"           # remotes.json: the record of --snapshots (its "snapshots" is the pushed tips)


def _state_path(core: Core):
    return core.store.meta_dir / "remotes.json"


def _read_state(path) -> dict:
    try:
        doc = json.loads(path.read_bytes())
        return doc if isinstance(doc, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


def gate_reason(core: Core) -> str | None:
    """Why the off-machine anchor keeps protected calls waiting, or None (one small read)."""
    if not core.store_exists():
        return None
    state = _read_state(_state_path(core))
    for name, st in sorted(state.items()):
        if isinstance(st, dict) and st.get("diverged"):
            return (f"off-machine anchor: {st['diverged']}. Investigate, then `chronos-git journal verify "
                    f"--remote {name}` (the gate opens when it matches) or `chronos-git remote remove {name}`")
    s = core.settings
    if not s.require_anchor:
        return None
    entries = [st for st in state.values() if isinstance(st, dict)]
    if not entries:
        return ("require_anchor is on but no remote is configured: add one with "
                "`chronos-git remote add NAME URL`")
    now = time.time()
    if any(not st.get("failing_since") or now - st["failing_since"] <= s.anchor_timeout_s for st in entries):
        return None
    since = min(st["failing_since"] for st in entries)
    errors = "; ".join(f"{n}: {st.get('last_error')}" for n, st in sorted(state.items()) if isinstance(st, dict))
    return (f"require_anchor: no remote has taken the journal for {int(now - since)} s (more than "
            f"anchor_timeout_s = {int(s.anchor_timeout_s)}): {errors}. Fix the remote, then "
            "`chronos-git push`")


class _Link:
    """One exchange with remote `name` (a push, a fetch, a check).  Each transport call runs in
    a child process (engine/offload.py) killed when the exchange passes remote_deadline_s in
    all, or moves fewer than remote_min_rate_bps bytes a second over transport.RATE_WINDOW_S:
    libgit2 stops only at its per-read timeout, which a server trickling a byte every few
    seconds never trips.  When no child can start, the call runs on a thread left behind at
    the deadline.  Either way the caller (the background pusher too) is free by the deadline,
    and nothing of the store changed: a push only reads it, a fetch writes into a scratch
    repository, removed here, until every object has arrived."""

    def __init__(self, core: Core, name: str, url: str, auth: transport.Auth):
        self.core, self.name, self.url, self.auth = core, name, url, auth
        self.deadline_s = core.settings.remote_deadline_s
        self.min_rate_bps = core.settings.remote_min_rate_bps
        self.until = time.monotonic() + self.deadline_s

    def list_refs(self, prefix: str) -> dict[str, str]:
        return self._run("list_refs", prefix=prefix)["refs"]

    def push(self, refspecs: list[str]) -> None:
        if refspecs:
            self._run("push", refspecs=refspecs)

    def fetch_refs(self, src: str, haves: dict[str, str]) -> dict[str, str]:
        scratch = transport.scratch_for(self.core.store.meta_dir / "tmp")
        try:
            return self._run("fetch_refs", scratch=os.fsdecode(scratch), src=src, haves=haves)["refs"]
        finally:
            shutil.rmtree(scratch, ignore_errors=True)      # what a fetch cut off had received

    def _run(self, call: str, **params) -> dict:
        left = self.until - time.monotonic()
        if left <= 0:
            raise self._cut("deadline")
        params.update(call=call, url=self.url, ssh_key=self.auth.ssh_key)
        limits = offload.Limits(left, self.min_rate_bps, transport.RATE_WINDOW_S)
        try:
            res = offload.run("remote", self.core.store_dir, self.core.store.config, params, limits=limits)
        except offload.CutOff as exc:
            raise self._cut(exc.limit, str(exc)) from None
        except offload.Unavailable:                     # in what is left of the deadline
            res = self._on_thread(params, self.until - time.monotonic())
        except offload.Failed as exc:
            raise self._error(str(exc)) from None
        if "remote_error" in res:
            raise transport.RemoteError(res["remote_error"])
        return res

    def _on_thread(self, params: dict, left: float) -> dict:
        box: dict = {}

        def call() -> None:
            try:
                box["res"] = transport.job(self.core.store.root, params, None)
            except Exception as exc:
                box["err"] = f"{type(exc).__name__}: {exc}"
        t = threading.Thread(target=call, name="chronos-git-remote", daemon=True)
        t.start()
        t.join(max(left, 0))
        if t.is_alive():
            raise self._cut("deadline")
        if "err" in box:
            raise self._error(box["err"])
        return box["res"]

    def _error(self, text: str) -> transport.RemoteError:
        for secret in self.auth.secrets:
            text = text.replace(secret, "***")
        return transport.RemoteError(f"{transport.display_url(self.url)}: {text}")

    def _cut(self, limit: str, detail: str = "") -> transport.RemoteError:
        """The error of an exchange cut off: the remote, the limit hit and its setting."""
        if limit == "deadline":
            detail, setting = f"not finished within {self.deadline_s:g} s", f"remote_deadline_s = {self.deadline_s:g}"
        else:
            setting = f"remote_min_rate_bps = {self.min_rate_bps}"
        return transport.RemoteError(f"remote {self.name!r} ({transport.display_url(self.url)}) was cut off: "
                                     f"{detail} (setting {setting})")


class Remotes:
    def __init__(self, core: Core, start):
        self.core = core
        self._start = start
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._busy = threading.Event()
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
        chosen = default_host_id(Path(os.path.realpath(self.core.store_dir)))
        try:
            atomic_write(path, chosen.encode() + b"\n", durable=True)
        except OSError:
            pass                          # a read-only store: the same derivation next time
        return chosen

    def _auth(self) -> transport.Auth:
        return transport.Auth.from_env(self.core.settings.remote_ssh_key)

    def _link(self, name: str, url: str) -> _Link:
        return _Link(self.core, name, url, self._auth())

    def _configured(self) -> dict[str, tuple[str, bool]]:
        """{name: (url, snapshots)} of the remotes chronos-git manages: its own record
        (remotes.json), never the store's git config, which git and libgit2 would honour and
        anyone who can write the store can edit (engine/store_audit.py)."""
        if not self.core.store_exists():
            return {}
        state = _read_state(_state_path(self.core))
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
                self._update(name, url=url, **{SENDS: bool(mark)})
            except OSError:
                pass                      # a read-only store: taken from the config again next time
            st.update({"url": url, SENDS: bool(mark)})
        return state

    def recorded_config(self) -> dict[str, dict[str, str]]:
        """What the store's git config may hold for each remote: exactly what `remote add`
        writes there from the record (the store audit allows that and nothing else)."""
        return {name: {"url": url, "fetch": f"+{HOSTS}/*:{TRACKING}/{name}/hosts/*",
                       MARK.lower(): "true" if snapshots else "false"}
                for name, (url, snapshots) in self._configured().items()}

    def _untampered(self, doing: str) -> None:
        """Refuse to reach a remote while the store's config holds a setting chronos-git did
        not write: libgit2 would honour a `url.*.insteadOf` (the anchor pushed to a fake), an
        `include`, an `http.*` proxy ... (engine/store_audit.py)."""
        found = store_audit.transport_findings(store_audit.audit(self.core.store.root, self.recorded_config()))
        if found:
            raise store_audit.StoreTampered(doing, found)

    def _pick(self, name: str | None) -> tuple[str, str, bool]:
        remotes = self._configured()
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

    # --------------------------------------------------------------- state
    def _update(self, name: str, *, drop: bool = False, create: bool = False, merge=None, **fields) -> None:
        """Read-modify-write of one remote's entry under the lock; an entry that `remote remove`
        dropped is never brought back by a push that was still under way."""
        path = _state_path(self.core)
        with locking.exclusive(self.core.store.meta_dir / "remotes.lock"):
            state = _read_state(path)
            if drop:
                state.pop(name, None)
            elif name in state or create:
                entry = state.setdefault(name, {})
                entry.update(merge(entry) if merge else {})
                entry.update(fields)
            atomic_write(path, json.dumps(state, sort_keys=True).encode(), durable=True)

    def _failed(self, name: str, exc: BaseException) -> None:
        self._update(name, last_error=str(exc) or type(exc).__name__, last_attempt=time.time(),
                     merge=lambda e: {"failing_since": e.get("failing_since") or time.time()})

    def _journal_note(self, action: str, **fields) -> None:
        """Adding or removing a remote is journaled (best effort: a journal in doubt refuses)."""
        try:
            self._start()
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
            here = os.path.realpath(store.root)
            there = os.path.realpath(local)
            if there == here or there.startswith(here + os.sep) or here.startswith(there + os.sep):
                raise ValueError(f"{local} is the store or inside it: a remote must be somewhere else")
        repo = store.repo()
        known = self._configured()
        if name in known or name in [r.name for r in repo.remotes]:
            shown_url = known[name][0] if name in known else repo.remotes[name].url or ""
            raise ValueError(f"remote {name!r} exists already ({transport.display_url(shown_url)});"
                             " remove it first")
        signed = authorize({"kind": events.Maintenance.kind, "action": "remote_added", "remote": name,
                            "url": transport.display_url(url)}) if authorize else {}
        created = transport.ensure_local(url)
        repo.remotes.create(name, url, f"+{HOSTS}/*:{TRACKING}/{name}/hosts/*")
        repo.config[f"remote.{name}.{MARK}"] = bool(snapshots)
        self._update(name, create=True, added=time.time(), last_error=None, failing_since=None, diverged=None,
                     url=url, **{SENDS: bool(snapshots)})
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
        if name not in self._configured() and name in _read_state(_state_path(self.core)):
            self._update(name, drop=True)       # its git config went (git remote remove): forget its state
            return RemoteRemoved(remote=name)
        name, url, _ = self._pick(name)
        signed = authorize({"kind": events.Maintenance.kind, "action": "remote_removed", "remote": name}) \
            if authorize else {}
        with locking.exclusive(self.core.store.meta_dir / f"push-{name}.lock"):   # after a push under way
            repo = self.core.store.repo()
            if name in [r.name for r in repo.remotes]:
                repo.remotes.delete(name)       # its mirror in the git config, and its tracking refs
            self._update(name, drop=True)
            for ref in [r for r in repo.references
                        if r.startswith((f"{OUTBOX}/{name}/", f"{TRACKING}/{name}/"))]:
                repo.references.delete(ref)
        self._journal_note("remote_removed", remote=name, url=transport.display_url(url), **signed)
        return RemoteRemoved(remote=name)

    def list(self) -> RemotesResult:
        state = _read_state(_state_path(self.core)) if self.core.store_exists() else {}
        seq = self._local_seq()
        out = []
        for name, (url, snapshots) in sorted(self._configured().items()):
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
        self._start()
        j = self.core.journal
        j.refresh()
        return j.state.seq if j.head is not None else None

    # ----------------------------------------------------------------- push
    def push(self, name: str | None = None, *, allow_excluded: bool = False) -> PushResult:
        name, url, snapshots = self._pick(name)
        t0 = time.monotonic()
        self._start()
        store, journal, host = self.core.store, self.core.journal, self.host
        with locking.exclusive(store.meta_dir / f"push-{name}.lock"):
            journal.refresh()
            if journal.integrity != "ok":
                try:                # planted transport settings are named as such, and recorded
                    self._untampered(f"pushing to remote {name!r}")
                except Exception as exc:
                    self._failed(name, exc)
                    raise
                raise IntegrityError(f"not pushed: the local journal's integrity is in doubt ({journal.integrity})")
            head, seq = journal.head, journal.state.seq
            self.last_attempt = time.time()
            try:
                self._untampered(f"pushing to remote {name!r}")
                tip = self._anchor(name, head)
                man = anchor.manifest(store, host, journal.state.journal_id)
                repo = pygit2.Repository(str(store.root))       # our own handle: this may run on a thread
                link = self._link(name, url)
                base = f"{HOSTS}/{host}"
                theirs = link.list_refs(base + "/")
                self._descends(repo, name, link, theirs.get(base + "/journal"), tip)
                specs, refs, excluded, sent = [], [base + "/journal", base + "/manifest"], [], {}
                secret = False
                if tip and theirs.get(base + "/journal") != tip:
                    specs.append(f"{anchor.ANCHOR_REF}:{base}/journal")
                if theirs.get(base + "/manifest") != man:
                    specs.append(f"+{anchor.MANIFEST_REF}:{base}/manifest")    # informational: replaced
                if snapshots:
                    for ws in store.workspaces():
                        ref = repo.references.get(ws.ref)
                        if ref is None:
                            continue
                        dst, mine = f"{base}/snapshots/{ws.id}", str(ref.target)
                        refs.append(dst)
                        if theirs.get(dst) == mine:
                            sent[ws.id] = mine
                            continue
                        why = self._unsendable(repo, mine, theirs.get(dst), allow_excluded=allow_excluded)
                        if why:
                            secret = secret or why[0] == "secret"
                            excluded.append(f"{display(os.fsdecode(ws.root_bytes))}: {why[1]}")
                            refs.remove(dst)
                            continue
                        # push the commit that was checked, not the ref (a call may move it meanwhile)
                        out = f"{OUTBOX}/{name}/{ws.id}"
                        repo.references.create(out, pygit2.Oid(hex=mine), force=True)
                        specs.append(f"{out}:{dst}")
                        sent[ws.id] = mine
                link.push(specs)
            except IntegrityError:
                raise                              # recorded as a divergence by _anchor / _descends
            except Exception as exc:               # every failure shows in health and counts for require_anchor
                self._failed(name, exc)
                raise
            res = PushResult(remote=name, host=host, journal_head=head, refs=refs,
                             updated=[sp.split(":", 1)[1] for sp in specs], excluded=excluded,
                             seconds=round(time.monotonic() - t0, 3))
            if excluded:
                res.status = "error"
                res.error = "the journal was pushed, but not the checkpoints of " + "; ".join(excluded) + "."
                if secret:
                    res.error += (" Keep such files out of checkpoints (.gitignore or ignored_patterns), change "
                                  "remote_exclude, or push once with --allow-excluded")
            self._update(name, last_push=time.time(), last_attempt=time.time(), last_error=res.error,
                         failing_since=None, diverged=None, journal_head=head, seq=seq,
                         merge=lambda e: {"snapshots": {**(e.get("snapshots") or {}), **sent}})
        return res

    def _anchor(self, name: str, head: str | None) -> str | None:
        """The anchor chain brought up to `head`; a journal that no longer contains what was
        mirrored (rewritten or rolled back with its witness) is a divergence: the gate closes."""
        try:
            return anchor.extend(self.core.store, head)[0]
        except IntegrityError as exc:
            why = (f"the local journal has diverged from what was anchored for remote {name!r}: {exc}")
            self._update(name, diverged=why, last_attempt=time.time())
            raise IntegrityError(why) from None

    def _descends(self, repo, name: str, link: _Link, theirs: str | None, mine: str | None) -> None:
        """This host's journal on the remote must be ours or an ancestor of ours."""
        if theirs is None or theirs == mine:
            return
        host = self.host
        if pygit2.Oid(hex=theirs) not in repo.odb:
            self._fetch(link, f"{HOSTS}/{host}/journal")
            repo = pygit2.Repository(str(self.core.store.root))
            if pygit2.Oid(hex=theirs) not in repo.odb:
                raise transport.RemoteError(f"remote {name!r}: this host's journal head there ({theirs[:12]}) "
                                            "could not be fetched (it is not a commit, or it moved meanwhile)")
        remote_event = self._event(repo, theirs)
        if mine is not None and repo.descendant_of(mine, theirs):
            return
        if mine is not None and repo.descendant_of(theirs, mine):
            why = (f"this host's journal on remote {name!r} is ahead of the local journal (diverged): the "
                   f"remote ends at {remote_event}, the local journal at an earlier event, so the local "
                   "journal was rolled back or replaced by an older copy")
        else:
            why = (f"this host's journal on remote {name!r} has diverged from the local journal: the remote "
                   f"ends at {remote_event}, which the local journal does not contain, so the local "
                   f"history was rewritten or replaced (or another machine pushes as host {host!r})")
        self._update(name, diverged=why, last_attempt=time.time())
        raise IntegrityError(why)

    @staticmethod
    def _event(repo, mirror_id: str) -> str:
        try:
            commit = repo[mirror_id]
            seq = anchor.payload_of(commit).get("seq")
            return f"event #{seq} {(anchor.event_of(commit) or '?')[:12]}"
        except (KeyError, ValueError, pygit2.GitError):
            return f"anchor {mirror_id[:12]} (unreadable)"

    def _unsendable(self, repo, tip: str, theirs: str | None, *, allow_excluded: bool) -> tuple[str, str] | None:
        """Why the checkpoints a push would send (those after `theirs`) cannot go, or None: one
        holds a file matching remote_exclude, or retention cut the chain below them (git refuses
        a commit whose parent it lacks)."""
        patterns = [] if allow_excluded else list(self.core.settings.remote_exclude)
        shallow = retention.read_shallow(self.core.store)
        if theirs and (pygit2.Oid(hex=theirs) not in repo.odb or not repo.descendant_of(tip, theirs)):
            return "gap", (f"the remote's newest checkpoint {theirs[:12]} is no longer in this store's chain "
                    "(retention cut it before the next push), so the chain cannot continue there")
        walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL)
        if theirs:
            walker.hide(theirs)
        for commit in walker:
            if str(commit.id) in shallow:
                return "gap", (f"retention cut this workspace's history below checkpoint {str(commit.id)[:12]} "
                        "before the remote had it, and a git remote refuses a commit whose parent it lacks; "
                        "checkpoints of workspaces created after the remote was added push normally")
            if not patterns:
                continue
            if commit.parents:
                diff = repo.diff(commit.parents[0].tree, commit.tree)
                paths = [d.new_file.path for d in diff.deltas if d.status != pygit2.enums.DeltaStatus.DELETED]
            else:
                paths = [p for p, _ in _files(repo, commit.tree, "")]
            for path in paths:
                base = path.rsplit("/", 1)[-1]
                hit = next((p for p in patterns if fnmatch.fnmatchcase(base, p) or fnmatch.fnmatchcase(path, p)),
                           None)
                if hit:
                    return "secret", (f"checkpoint {str(commit.id)[:12]} holds {display(path)} (remote_exclude "
                            f"pattern {hit!r}): those bytes would leave the machine")
        return None

    # ---------------------------------------------------------------- fetch
    def fetch(self, name: str) -> FetchResult:
        name, url, _ = self._pick(name)
        self._untampered(f"fetching from remote {name!r}")
        store, host = self.core.store, self.host
        link = self._link(name, url)
        prefix = f"{TRACKING}/{name}/hosts/"
        theirs = link.list_refs(HOSTS + "/")
        got = self._fetch(link, HOSTS + "/*") if theirs else {}
        with store.writing():                           # only the ref updates: the transfer is done
            repo = pygit2.Repository(str(store.root))
            for remote_name, oid in got.items():
                # never our own checkpoints: a tracking ref would pin what retention cut
                if not remote_name.startswith(f"{HOSTS}/{host}/snapshots/"):
                    repo.references.create(prefix + remote_name[len(HOSTS) + 1:], pygit2.Oid(hex=oid), force=True)
            for ref in [r for r in repo.references if r.startswith(prefix)]:
                if HOSTS + "/" + ref[len(prefix):] not in got:
                    repo.references.delete(ref)          # gone from the remote (or not a commit)
        hosts: dict[str, dict] = {}
        for ref in repo.references:
            if not ref.startswith(prefix):
                continue
            h, _, rest = ref[len(prefix):].partition("/")
            hosts.setdefault(h, {})[rest] = str(repo.references[ref].target)
        return FetchResult(remote=name, hosts=[self._host(repo, h, refs) for h, refs in sorted(hosts.items())])

    def _fetch(self, link: _Link, src: str) -> dict[str, str]:
        store = self.core.store
        repo = pygit2.Repository(str(store.root))
        haves = {}
        for ref in repo.references:
            if ref.startswith((TRACKING + "/", "refs/chronos/anchor/")):
                try:
                    haves[ref] = str(repo.references[ref].target)
                except (pygit2.GitError, KeyError):
                    pass
        return link.fetch_refs(src, haves)

    def _host(self, repo, host: str, refs: dict[str, str]) -> FetchedHost:
        head, events_n, journal_id = None, 0, None
        if "journal" in refs:
            try:
                commit = repo[refs["journal"]]
                head = anchor.event_of(commit)
                payload = anchor.payload_of(commit)
                events_n = int(payload.get("seq", -1)) + 1
            except (KeyError, ValueError, TypeError, pygit2.GitError):
                pass
        man = anchor.read_manifest(repo, refs["manifest"]) if "manifest" in refs else {}
        journal_id = man.get("journal_id") if isinstance(man.get("journal_id"), str) else None
        paths = man.get("workspaces")
        paths = paths if isinstance(paths, dict) else {}
        wss = []
        for rest, tip in sorted(refs.items()):
            if not rest.startswith("snapshots/"):
                continue
            wid = rest[len("snapshots/"):]
            entry = paths.get(wid)
            entry = entry if isinstance(entry, dict) else {}
            path = entry.get("path") if isinstance(entry.get("path"), str) else None
            walker = repo.walk(tip, pygit2.enums.SortMode.NONE)
            walker.simplify_first_parent()
            wss.append(FetchedWorkspace(id=wid, path=path, path_b64=entry.get("path_b64") if isinstance(
                entry.get("path_b64"), str) else None, checkpoints=sum(1 for _ in walker), latest=tip))
        return FetchedHost(host=host, journal_head=head, events=events_n, journal_id=journal_id, workspaces=wss)

    # ---------------------------------------------------------------- verify
    def verify(self, name: str) -> AnchorCheck:
        """This host's journal on the remote is the local head or an ancestor of it; divergence
        closes the gate (IntegrityError), a match lifts an earlier divergence."""
        name, url, _ = self._pick(name)
        self._untampered(f"checking the journal on remote {name!r}")
        self._start()
        store, journal, host = self.core.store, self.core.journal, self.host
        journal.refresh()
        head = journal.head
        tip = self._anchor(name, head)
        repo = pygit2.Repository(str(store.root))
        link = self._link(name, url)
        base = f"{HOSTS}/{host}"
        theirs = link.list_refs(base + "/journal").get(base + "/journal")
        if theirs is None:
            raise transport.RemoteError(f"remote {name!r} holds no journal of host {host!r} yet: "
                                        f"run `chronos-git push {name}` first")
        self._descends(repo, name, link, theirs, tip)
        remote_commit: pygit2.Commit = repo[theirs]   # type: ignore[assignment]  # a journal event
        remote_seq = int(anchor.payload_of(remote_commit).get("seq", -1))
        self._update(name, diverged=None)
        return AnchorCheck(remote=name, host=host, remote_head=anchor.event_of(remote_commit) or theirs,
                           local_head=head, behind=max(journal.state.seq - remote_seq, 0))

    # ------------------------------------------------------------ background
    def kick(self) -> None:
        """Push soon (after a turn): never on the caller's path, at most every push_interval_s."""
        if not self.core.store_exists() or not self._configured():
            return
        self._kick.set()
        with self._guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="chronos-git-push", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            self._kick.wait()
            wait = self.last_attempt + self.core.settings.push_interval_s - time.time()
            if wait > 0:
                time.sleep(wait)
            self._kick.clear()
            self._busy.set()
            try:
                self.push_all()
            finally:
                self._busy.clear()

    def drain(self, timeout: float) -> None:
        """At exit: let a push that is under way finish (bounded); one not started waits for the
        next session."""
        deadline = time.monotonic() + timeout

        def due() -> bool:
            return self._kick.is_set() and self.last_attempt + self.core.settings.push_interval_s <= time.time()
        while (self._busy.is_set() or due()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def push_all(self) -> builtins.list:             # (`list` here is the method above)
        """One attempt per remote; failures are recorded (health shows them), never raised."""
        out: list[PushResult | Exception] = []
        for name in sorted(self._configured()):
            try:
                out.append(self.push(name))
            except Exception as exc:         # recorded in remotes.json by push itself when it can
                out.append(exc)
        self.last_attempt = time.time()
        return out


def pinned_tips(core: Core) -> set[str]:
    """The newest checkpoint each --snapshots remote holds, per workspace: retention keeps it (and
    so everything newer), so the next push continues the remote's chain."""
    if not core.store_exists():
        return set()
    out: set[str] = set()
    for st in _read_state(_state_path(core)).values():
        if isinstance(st, dict) and isinstance(st.get("snapshots"), dict):
            out.update(v for v in st["snapshots"].values() if isinstance(v, str))
    return out


def _files(repo, tree, prefix: str):
    for entry in tree:
        path = prefix + entry.name
        if entry.type_str == "tree":
            yield from _files(repo, repo[entry.id], path + "/")
        elif entry.type_str == "blob":
            yield path, entry.id
