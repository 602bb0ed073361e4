"""One push to one remote: the anchor chain and the manifest, and with `--snapshots` each
workspace's checkpoints, with explicit refspecs.

A push runs under `push-<remote>.lock` (so `remote remove` waits for it), only reads the
store, and sends exactly the commits it checked (through OUTBOX refs).  Checkpoints that
hold a file matching remote_exclude, or whose chain retention cut below what the remote
has, stay home, and the push says so.  Every failure is recorded (health shows it, and it
counts for require_anchor); a divergence is recorded as such (service/remote_anchor.py).
"""
from __future__ import annotations

import fnmatch
import os
import time
from typing import TYPE_CHECKING

import pygit2

from ..engine import locking, metadir, retention
from ..engine.codec import display
from ..journal_refs import IntegrityError, anchor
from .core import Core
from .remote_anchor import descends, extend
from .remote_record import HOSTS, OUTBOX
from .results import PushResult

if TYPE_CHECKING:
    from .remotes import Remotes


def push(remotes: Remotes, name: str | None = None, *, allow_excluded: bool = False) -> PushResult:
    record = remotes.record
    name, url, snapshots = record.pick(name)
    t0 = time.monotonic()
    remotes.start()
    core = remotes.core
    store, journal, host = core.store, core.journal, remotes.host
    with locking.exclusive(metadir.lock_path(store.meta_dir, "push", name)):
        journal.refresh()
        if journal.integrity != "ok":
            try:                # planted transport settings are named as such, and recorded
                record.untampered(f"pushing to remote {name!r}")
            except Exception as exc:
                record.failed(name, exc)
                raise
            raise IntegrityError(f"not pushed: the local journal's integrity is in doubt ({journal.integrity})")
        journal.settle()             # its newest events published: the push reads them by their ids
        head, seq = journal.head, journal.state.seq
        remotes.last_attempt = time.time()
        try:
            record.untampered(f"pushing to remote {name!r}")
            tip = extend(remotes, name, head)
            man = anchor.manifest(store, host, journal.state.journal_id)
            repo = pygit2.Repository(str(store.root))       # our own handle: this may run on a thread
            link = remotes.link(name, url)
            base = f"{HOSTS}/{host}"
            theirs = link.list_refs(base + "/")
            descends(remotes, repo, name, link, theirs.get(base + "/journal"), tip)
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
                    why = _unsendable(core, repo, mine, theirs.get(dst), allow_excluded=allow_excluded)
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
            raise                              # recorded as a divergence by extend / descends
        except Exception as exc:               # every failure shows in health and counts for require_anchor
            record.failed(name, exc)
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
        record.update(name, last_push=time.time(), last_attempt=time.time(), last_error=res.error,
                      failing_since=None, diverged=None, journal_head=head, seq=seq,
                      merge=lambda e: {"snapshots": {**(e.get("snapshots") or {}), **sent}})
    return res


def _unsendable(core: Core, repo, tip: str, theirs: str | None, *, allow_excluded: bool) -> tuple[str, str] | None:
    """Why the checkpoints a push would send (those after `theirs`) cannot go, or None: one
    holds a file matching remote_exclude, or retention cut the chain below them (git refuses
    a commit whose parent it lacks)."""
    patterns = [] if allow_excluded else list(core.settings.remote_exclude)
    shallow = retention.read_shallow(core.store)
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


def _files(repo, tree, prefix: str):
    for entry in tree:
        path = prefix + entry.name
        if entry.type_str == "tree":
            yield from _files(repo, repo[entry.id], path + "/")
        elif entry.type_str == "blob":
            yield path, entry.id
