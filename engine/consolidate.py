"""Consolidating a first import: from "fast to write" to "compact and self-owned", in the background.

A first snapshot is written for speed: its pack stores blobs uncompressed
(bulk.LEVEL 0), and packs linked in from the user's repository (usergit) may
hold their whole history.  Both are listed as *pending* when the import
finishes.  Consolidation copies every object our refs reach out of the pending
packs into zlib-compressed packs of our own (compression on every core, at low
CPU priority), then deletes the pending packs.  Objects they hold that
nothing of ours reaches (the user's history) are simply not copied; a linked
pack we reach most of (a fresh clone) is adopted instead of copied.

Phases, as in compaction (and under its lock, so the two never interleave):

  B (no lock)    walk what the refs reach; copy the pending packs' objects among it
  C (exclusive)  copy what became reachable meanwhile, then delete the packs

Progress survives: the copy is written as 16 MiB packs, and a run that finds
objects already in another pack (an earlier run's, cut off when its process
exited, as a one-shot `hermes chat -q` does) does not copy them again.

In a host's background (`Quiet`), phase B waits for a pause in the agent's
calls before it starts and between batches: its reads, writes and fsyncs slow
the agent's own file work on a shared disk (on the kernel tree ~+50 ms per
call of a first session).  It never waits while it holds a lock a call needs
(phase C), and never past DEFER_MAX_S after the import listed its packs.

Crash points: before C nothing was deleted (the new pack only duplicates);
inside C the new pack is durable before the first deletion, and each pack
goes `.idx` first, so libgit2 never sees a pack without its data.  The list
of pending packs is only shortened after their deletion: a crash at any
point leaves extra objects, never missing ones, and the next start resumes.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pygit2

from . import faults
from .compaction import compaction_lock
from .fsutil import fsync_dir
from .pack_list import note_compacted_packs
from .pack_writer import PackWriter, pack_entry
from .reachability import roots, walk
from .state_file import REMOVE, StateFile
from .usergit import Unusable, read_idx

LEVEL = 6                     # git's own pack level (core.compression): a store no larger than `git gc`
PACK_BYTES = 16 << 20         # a run cut off (the process exits) keeps every pack it finished
BATCH_BYTES = 4 << 20
WINDOW = 8


ADOPT = 0.5                   # a linked pack our refs reach this much of is kept as it is
QUIET_S = 1.0                 # background work waits until no call has begun or ended for this long
DEFER_MAX_S = 300.0           # ... but not once the packs have been pending this long: a busy
                              # agent leaves the store uncompressed for minutes, never for good


def _list_file(store) -> StateFile:
    return StateFile(store.meta_dir, "unconsolidated.json")


def _list_path(store) -> Path:
    return _list_file(store).path


def _read_list(store) -> dict[str, list[str]]:
    """The pending packs that still exist; a missing, unreadable or damaged list: none."""
    return _existing(store, _list_file(store).read({}, expect=dict))


def _existing(store, data: dict) -> dict[str, list[str]]:
    pack_dir = store.root / "objects" / "pack"
    out = {}
    for kind in ("fast", "linked"):
        names = data.get(kind, [])
        out[kind] = [n for n in names if isinstance(n, str) and n.startswith("pack-") and "/" not in n
                     and (pack_dir / f"{n}.idx").exists()]
    return out


def pending(store) -> list[str]:
    """Pack stems still to be consolidated (that still exist)."""
    lists = _read_list(store)
    return sorted(set(lists["fast"]) | set(lists["linked"]))


def mark(store, *, fast: Sequence[str] = (), linked: Sequence[str] = ()) -> None:
    """Add packs to the pending list (durably: they must not be forgotten).  `fast`: our
    own uncompressed packs; `linked`: packs linked in from a user's repository."""
    if not fast and not linked:
        return
    def add(data: dict) -> dict:
        lists = _existing(store, data)
        return {"fast": sorted(set(lists["fast"]) | set(fast)),
                "linked": sorted(set(lists["linked"]) | set(linked))}
    _list_file(store).update(add, {}, expect=dict)


def _forget(store, done: set[str]) -> None:
    def drop(data: dict):
        left = {k: [n for n in v if n not in done] for k, v in _existing(store, data).items()}
        return left if left["fast"] or left["linked"] else REMOVE
    _list_file(store).update(drop, {}, expect=dict)


BACKGROUND_NICE = 10


def lower_priority() -> None:
    """This thread at nice 10 (Linux: threads are tasks; those it starts inherit it):
    background work yields the CPU."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (OSError, AttributeError):
        pass


WAITING = "waiting for a pause in the agent's calls"


class Quiet:
    """Waits until the agent pauses: `activity` is a file every protected call rewrites
    as it begins and as it ends (the journal's witness), so the time since its last change
    is the time since the agent last did anything.  A missing file is a quiet agent.  No
    waiting once the pending list (`since`: its file) is DEFER_MAX_S old, nor for longer
    than that in one run, nor once someone asks for the compaction lock it holds (`wanted`
    changes: compaction.compaction_lock).  Changes are timed on this process's monotonic
    clock: a file stamped in the future, or a clock stepped back, makes no agent busy for
    longer than QUIET_S and hides no one's asking."""

    def __init__(self, activity: Path, since: Path, wanted: Path | None = None, *,
                 quiet_s: float = QUIET_S, max_s: float = DEFER_MAX_S, now=time.time,
                 monotonic=time.monotonic, sleep=time.sleep):
        self.activity, self.since = Path(activity), Path(since)
        self.wanted = Path(wanted) if wanted else None
        self.quiet_s, self.max_s = quiet_s, max_s
        self.now, self.monotonic, self.sleep = now, monotonic, sleep
        self.waited = 0.0
        self._asked0 = self._stamp(self.wanted)
        self._seen = self._stamp(self.activity)
        # the last change before we looked: its age by the file's own stamp, at most QUIET_S
        age = self.now() - self._seen[0] / 1e9 if self._seen else quiet_s
        self._changed = self.monotonic() - min(max(age, 0.0), quiet_s)

    @staticmethod
    def _stamp(path: Path | None) -> tuple[int, int] | None:
        if path is None:
            return None
        try:
            st = path.stat()
            return st.st_mtime_ns, st.st_ino
        except (OSError, AttributeError):
            return None

    def _busy_for(self) -> float | None:
        """Seconds since the agent last began or ended a call (None: no journal)."""
        seen = self._stamp(self.activity)
        if seen is None:
            return None
        if seen != self._seen:
            self._seen, self._changed = seen, self.monotonic()
        return self.monotonic() - self._changed

    def _pending_for(self) -> float | None:
        try:
            return self.now() - self.since.stat().st_mtime
        except OSError:
            return None

    def __call__(self, say, done: int, total: int) -> None:
        told = False
        while self.waited < self.max_s:
            busy = self._busy_for()
            pending = self._pending_for()
            if (busy is None or busy >= self.quiet_s or (pending is not None and pending >= self.max_s)
                    or (self.wanted is not None and self._stamp(self.wanted) != self._asked0)):
                break
            if not told:
                say(WAITING, done, total)
                told = True
            step = min(max(self.quiet_s - busy, 0.05), 0.25, self.max_s - self.waited)
            self.sleep(step)
            self.waited += step
        if told:
            say("compressing", done, total)


def quiet_for(store, activity: Path) -> Quiet:
    """Background consolidation of `store`, waiting for pauses in the calls that rewrite `activity`."""
    return Quiet(activity, _list_path(store), store.meta_dir / "compact.wanted")


def _copy(repo, oids: list[pygit2.Oid], writer: PackWriter, say, done: list[int], total: int,
          quiet=None) -> None:
    """Read each object (libgit2 resolves deltas) and compress on the pool into `writer`;
    `quiet(say, done, total)`, when given, is asked before each batch is read."""
    def compress(batch):
        out = []
        for oid, kind, data in batch:
            out.append((oid.raw, pack_entry(kind, data, LEVEL)))
        return out

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), initializer=lower_priority,
                            thread_name_prefix="chronos-git-consolidate") as pool:
        inflight: deque = deque()
        batch: list = []
        size = 0

        def drain(limit: int) -> None:
            while len(inflight) > limit:
                for sha, packed in inflight.popleft().result():
                    writer.add(sha, packed)
                    done[0] += 1
                say("compressing", done[0], total)

        for oid in oids:
            if quiet is not None and not batch:
                quiet(say, done[0], total)
            kind, data = repo.odb.read(oid)
            batch.append((oid, int(kind), data))
            size += len(data)
            if size >= BATCH_BYTES or len(batch) >= 512:
                inflight.append(pool.submit(compress, batch))
                batch, size = [], 0
                drain(WINDOW)
        if batch:
            inflight.append(pool.submit(compress, batch))
        drain(0)


@dataclass
class _Plan:
    """Phase B's walk: what to copy out of which packs."""
    repo: pygit2.Repository
    seen: set                   # every object walked
    wanted: list                # reached objects to copy
    target: set[bytes]          # every object to copy (what phase C catches up on)
    adopted: set[str]           # linked packs kept as they are
    drop: list[str]             # pending packs copied out of and deleted


def consolidate(store, progress=None, quiet: Quiet | None = None) -> dict:
    """Consolidate every pending pack; returns what was done (safe to call at any time).

    A linked pack that our refs reach at least half of is adopted as it is (a fresh
    clone's pack is smaller than any copy we would make); the others are copied out of.
    `quiet` (a host's background run): phase B waits for pauses in the agent's calls."""
    say = progress or (lambda phase, done, total: None)
    t0 = time.monotonic()
    out = {"packs": 0, "adopted": 0, "objects": 0, "bytes_before": 0, "bytes_after": 0, "seconds": 0.0}
    with compaction_lock(store, ask=quiet is None):
        lists = _read_list(store)
        stems = sorted(set(lists["fast"]) | set(lists["linked"]))
        if not stems:
            _list_file(store).remove()
            return out
        pack_dir = store.root / "objects" / "pack"
        ids: dict[str, set[bytes]] = {}
        for s in stems:
            try:
                ids[s] = read_idx(os.fsencode(pack_dir / f"{s}.idx"))
            except (OSError, Unusable):
                ids[s] = set()
        if quiet is not None:
            quiet(say, 0, 0)
        say("walking", 0, 0)
        plan = _plan(store, pack_dir, lists["linked"], stems, ids)
        out["bytes_before"] = _pack_bytes(pack_dir, plan.drop)
        ours, done = _copy_and_delete(store, plan, pack_dir, say, quiet)
        if plan.adopted:
            note_compacted_packs(store, plan.adopted)    # delta packs: later compactions keep them
        _forget(store, set(stems))
        out["bytes_after"] = _pack_bytes(pack_dir, ours)
    out.update(packs=len(plan.drop), adopted=len(plan.adopted), objects=done,
               seconds=round(time.monotonic() - t0, 3))
    return out


def _plan(store, pack_dir: Path, linked: list[str], stems: list[str], ids: dict[str, set[bytes]]) -> _Plan:
    """Walk what the refs reach: the linked packs to adopt, the objects to copy out of the others."""
    every = set().union(*ids.values())
    with store.maintenance.exclusive():
        store.forget_repos()
        commits, trees = roots(store)
    repo = pygit2.Repository(str(store.root))
    seen: set = set()
    reached = [o for o in walk(repo, commits, trees, seen) if o.raw in every]
    reach = {o.raw for o in reached}
    adopted = {s for s in linked if ids[s] and len(ids[s] & reach) >= ADOPT * len(ids[s])}
    kept = set().union(*(ids[s] for s in adopted)) if adopted else set()
    drop = [s for s in stems if s not in adopted]
    target = set().union(*(ids[s] for s in drop)) - kept if drop else set()
    # what an earlier run, cut off by its process's exit, already copied stays copied
    for idx in pack_dir.glob("pack-*.idx"):
        if idx.stem not in ids and target:
            try:
                target -= read_idx(os.fsencode(idx))
            except (OSError, Unusable):
                pass
    wanted = [o for o in reached if o.raw in target]
    return _Plan(repo, seen, wanted, target, adopted, drop)


def _pack_bytes(pack_dir: Path, stems) -> int:
    """The size of the .pack files of `stems` (those that exist)."""
    total = 0
    for s in stems:
        try:
            total += (pack_dir / f"{s}.pack").stat().st_size
        except OSError:
            pass
    return total


def _copy_and_delete(store, plan: _Plan, pack_dir: Path, say, quiet) -> tuple[set[str], int]:
    """Phase B's copy (no lock, `quiet` asked between batches), then phase C (exclusive):
    copy what became reachable meanwhile, delete the packs copied out of; (the packs
    written, the objects copied)."""
    writer = PackWriter(str(pack_dir), durable=True, pack_bytes=PACK_BYTES)
    done = [0]
    try:
        _copy(plan.repo, plan.wanted, writer, say, done, len(plan.wanted), quiet)
        faults.hit("consolidate_mid_copy")
        with store.maintenance.exclusive():
            store.forget_repos()
            commits, trees = roots(store)
            repo = pygit2.Repository(str(store.root))
            extra = [o for o in walk(repo, commits, trees, plan.seen) if o.raw in plan.target]
            _copy(repo, extra, writer, say, done, len(plan.wanted) + len(extra))
            ours = set(writer.finish())
            fsync_dir(pack_dir)
            faults.hit("consolidate_before_delete")
            gone = 0
            for s in plan.drop:
                if s in ours:
                    continue            # the same content under the same name: keep it
                for suffix in (".idx", ".pack", ".rev", ".bitmap"):
                    (pack_dir / f"{s}{suffix}").unlink(missing_ok=True)
                gone += 1
                if gone == 1:
                    faults.hit("consolidate_mid_delete")
            fsync_dir(pack_dir)
            if gone:
                store.note_compacted()      # handles opened before this are reopened
            store.forget_repos()
    except BaseException:
        writer.abort()
        raise
    return ours, done[0]
