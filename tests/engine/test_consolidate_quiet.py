"""A host's background consolidation waits for pauses in the agent's calls (its disk work
slows theirs), but never while it holds a lock a call needs, and never for long: the
store is compact at the latest DEFER_MAX_S after the import listed its packs."""
from __future__ import annotations

import os

from chronos_git.engine import consolidate
from chronos_git.engine.consolidate import WAITING, Quiet
from chronos_git.service import Chronos
from chronos_git.settings import Settings


class Clock:
    """A fake clock: `sleep` moves it on, and the agent (when busy) calls at every step."""

    def __init__(self, activity, t=1_000_000.0, busy_for=0.0):
        self.t, self.activity, self.busy_until = t, activity, t + busy_for
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s
        if self.t < self.busy_until:               # the agent made another call meanwhile
            os.utime(self.activity, (self.t, self.t))


def _files(tmp_path, clock, *, last_call_ago, pending_for):
    activity, since = tmp_path / "witness", tmp_path / "unconsolidated.json"
    for f, ago in ((activity, last_call_ago), (since, pending_for)):
        f.write_bytes(b"x")
        os.utime(f, (clock.t - ago, clock.t - ago))
    return activity, since


def _quiet(tmp_path, *, last_call_ago, pending_for, busy_for=0.0):
    clock = Clock(tmp_path / "witness", busy_for=busy_for)
    activity, since = _files(tmp_path, clock, last_call_ago=last_call_ago, pending_for=pending_for)
    said = []
    q = Quiet(activity, since, now=clock.now, sleep=clock.sleep)
    q(lambda *a: said.append(a), 7, 9)
    return clock, said, q


def test_it_waits_while_the_agent_calls_and_goes_on_once_it_pauses(tmp_path):
    clock, said, q = _quiet(tmp_path, last_call_ago=0.2, pending_for=5, busy_for=10)
    assert said == [(WAITING, 7, 9)]                 # said once, with the progress so far
    waited = sum(clock.slept)
    assert 10 + consolidate.QUIET_S - 0.3 <= waited <= 10 + consolidate.QUIET_S + 0.3
    assert max(clock.slept) <= 0.25                  # it looks again at least four times a second


def test_a_quiet_or_unknown_agent_is_not_waited_for(tmp_path):
    for ago in (consolidate.QUIET_S, 3600):
        clock, said, _ = _quiet(tmp_path, last_call_ago=ago, pending_for=5)
        assert clock.slept == [] and said == []
    clock = Clock(tmp_path / "gone")
    q = Quiet(tmp_path / "gone", tmp_path / "also-gone", now=clock.now, sleep=clock.sleep)
    q(lambda *a: None, 0, 0)                          # no journal (a snapshot-only store)
    assert clock.slept == []


def test_a_busy_agent_defers_it_for_minutes_never_for_good(tmp_path):
    # packs pending since longer than DEFER_MAX_S: no waiting at all
    clock, said, _ = _quiet(tmp_path, last_call_ago=0.0, pending_for=consolidate.DEFER_MAX_S + 1,
                            busy_for=10_000)
    assert clock.slept == [] and said == []
    # an agent that never pauses: waited DEFER_MAX_S in all, then on, and no more waiting in this run
    clock, said, q = _quiet(tmp_path, last_call_ago=0.0, pending_for=0, busy_for=10_000)
    assert abs(sum(clock.slept) - consolidate.DEFER_MAX_S) < 1e-6 and len(said) == 1
    clock.slept.clear()
    q(lambda *a: None, 8, 9)
    assert clock.slept == []
    # a file stamped in the future (the clock stepped back): bounded the same way
    clock, said, _ = _quiet(tmp_path, last_call_ago=-600, pending_for=-600)
    assert abs(sum(clock.slept) - consolidate.DEFER_MAX_S) < 1e-6


def test_it_is_asked_before_the_walk_and_between_batches_never_under_the_maintenance_lock(
        tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(60):
        (ws / f"f{i}.bin").write_bytes(os.urandom(20_000))
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.start()
    svc.core.background = False
    res = svc.snapshot(str(ws), "first")
    store = svc.store
    assert consolidate.pending(store)
    monkeypatch.setattr(consolidate, "BATCH_BYTES", 100_000)     # several batches of 5 blobs
    asked = []

    def quiet(say, done, total):
        asked.append((done, total, store.maintenance.held_here()))
    out = consolidate.consolidate(store, quiet=quiet)
    assert out["objects"] >= 60 and not consolidate.pending(store)
    assert asked[0] == (0, 0, False)                             # before the walk
    assert len(asked) >= 1 + 60 // 5 and not any(held for *_, held in asked)
    assert [d for d, *_ in asked] == sorted(d for d, *_ in asked)
    assert svc.log(str(ws), None).wire()["checkpoints"][-1]["id"] == res.checkpoint


def test_who_waits_for_its_lock_ends_the_wait(tmp_path):
    """An operator's compaction (another process) waits for the lock the consolidation
    holds: it asks, and the consolidation goes on instead of waiting for the agent."""
    import subprocess
    import sys
    import threading
    from types import SimpleNamespace

    from chronos_git.engine import retention
    store = SimpleNamespace(meta_dir=tmp_path)
    activity, since = tmp_path / "witness", tmp_path / "unconsolidated.json"
    activity.write_bytes(b"x")
    since.write_bytes(b"x")
    busy = threading.Event()
    busy.set()

    def agent():
        while busy.is_set():
            os.utime(activity)
            threading.Event().wait(0.05)
    threading.Thread(target=agent, daemon=True).start()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"),
        str(tmp_path / "compact.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    got = threading.Event()
    try:
        assert holder.stdout.readline().strip() == "held"     # the consolidation, as it waits
        q = Quiet(activity, since, tmp_path / "compact.wanted")
        def operator():
            with retention.compaction_lock(store):
                got.set()
        asker = threading.Thread(target=operator, daemon=True)
        asker.start()
        said = []
        q(lambda *a: said.append(a), 0, 0)
        assert said == [(WAITING, 0, 0)] and q.waited < consolidate.DEFER_MAX_S / 10
        assert not got.is_set()                             # the operator still waits for the lock
    finally:
        busy.clear()
        holder.communicate("", timeout=10)
    assert got.wait(10)                                     # and has it once the holder is done
