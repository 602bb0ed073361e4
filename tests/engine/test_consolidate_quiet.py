"""A host's background consolidation waits for pauses in the agent's calls (its disk work
slows theirs), but never while it holds a lock a call needs, and never for long: the
store is compact at the latest DEFER_MAX_S after the import listed its packs."""
from __future__ import annotations

import os

import pytest

from support.helpers import wait_for

from chronos_git.engine import consolidate
from chronos_git.engine.consolidate import WAITING, Quiet
from chronos_git.service import Chronos
from chronos_git.settings import Settings


class Clock:
    """Fake clocks: `sleep` moves both on, and the agent (when busy) calls at every step;
    a test moves `t` alone for an NTP correction."""

    def __init__(self, activity, t=1_000_000.0, busy_for=0.0):
        self.t, self.mono, self.activity, self.busy_until = t, 50.0, activity, 50.0 + busy_for
        self.slept = []

    def now(self):
        return self.t

    def monotonic(self):
        return self.mono

    def sleep(self, s):
        self.slept.append(s)
        self.t += s
        self.mono += s
        if self.mono < self.busy_until:            # the agent made another call meanwhile
            os.utime(self.activity, (self.t, self.t))

    def quiet(self, *files):
        return Quiet(*files, now=self.now, monotonic=self.monotonic, sleep=self.sleep)


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
    q = clock.quiet(activity, since)
    q(lambda *a: said.append(a), 7, 9)
    return clock, said, q


def test_it_waits_while_the_agent_calls_and_goes_on_once_it_pauses(tmp_path):
    clock, said, q = _quiet(tmp_path, last_call_ago=0.2, pending_for=5, busy_for=10)
    assert said == [(WAITING, 7, 9), ("compressing", 7, 9)]     # said once, and when it goes on
    waited = sum(clock.slept)
    assert 10 + consolidate.QUIET_S - 0.3 <= waited <= 10 + consolidate.QUIET_S + 0.3
    assert max(clock.slept) <= 0.25                  # it looks again at least four times a second


def test_a_quiet_or_unknown_agent_is_not_waited_for(tmp_path):
    for ago in (consolidate.QUIET_S, 3600):
        clock, said, _ = _quiet(tmp_path, last_call_ago=ago, pending_for=5)
        assert clock.slept == [] and said == []
    clock = Clock(tmp_path / "gone")
    q = clock.quiet(tmp_path / "gone", tmp_path / "also-gone")
    q(lambda *a: None, 0, 0)                          # no journal (a snapshot-only store)
    assert clock.slept == []


def test_a_busy_agent_defers_it_for_minutes_never_for_good(tmp_path):
    # packs pending since longer than DEFER_MAX_S: no waiting at all
    clock, said, _ = _quiet(tmp_path, last_call_ago=0.0, pending_for=consolidate.DEFER_MAX_S + 1,
                            busy_for=10_000)
    assert clock.slept == [] and said == []
    # an agent that never pauses: waited DEFER_MAX_S in all, then on, and no more waiting in this run
    clock, said, q = _quiet(tmp_path, last_call_ago=0.0, pending_for=0, busy_for=10_000)
    assert abs(sum(clock.slept) - consolidate.DEFER_MAX_S) < 1e-6 and len(said) == 2
    clock.slept.clear()
    q(lambda *a: None, 8, 9)
    assert clock.slept == []
    # a witness stamped in the future (the clock stepped back since): busy no longer than
    # QUIET_S unless it changes again
    clock, said, _ = _quiet(tmp_path, last_call_ago=-600, pending_for=-600)
    assert abs(sum(clock.slept) - consolidate.QUIET_S) < 1e-6


def test_an_operator_s_asking_is_seen_whatever_the_wall_clock_does(tmp_path):
    clock = Clock(tmp_path / "witness", busy_for=10_000)
    activity, since = _files(tmp_path, clock, last_call_ago=0.0, pending_for=5)
    wanted = tmp_path / "compact.wanted"
    wanted.write_bytes(b"")
    os.utime(wanted, (clock.t - 60, clock.t - 60))          # an earlier operator's
    q = clock.quiet(activity, since, wanted)
    clock.t -= 3600                                          # the clock steps back an hour
    asked = []

    def sleep(s):
        clock.sleep(s)
        if clock.mono > 52 and not asked:                    # an operator asks, stamped in the past
            os.utime(wanted, (clock.t, clock.t))
            asked.append(clock.mono)
    q.sleep = sleep
    q(lambda *a: None, 0, 0)
    assert asked and q.waited - 2.0 < 0.3                     # it went on at the next look


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
    store = svc.core.store
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


@pytest.mark.process
def test_who_waits_for_its_lock_ends_the_wait(tmp_path):
    """An operator's compaction (another process) waits for the lock the consolidation
    holds: it asks, and the consolidation goes on instead of waiting for the agent."""
    import subprocess
    import sys
    import threading
    import time
    from types import SimpleNamespace

    from chronos_git.engine import compaction
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
        said = []
        waiting = threading.Thread(target=q, args=(lambda *a: said.append(a), 0, 0), daemon=True)
        waiting.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        assert said == [(WAITING, 0, 0)]                    # it waits for the busy agent

        def operator():
            with compaction.compaction_lock(store):
                got.set()
        threading.Thread(target=operator, daemon=True).start()
        waiting.join(30)
        assert not waiting.is_alive() and said == [(WAITING, 0, 0), ("compressing", 0, 0)]
        assert q.waited < consolidate.DEFER_MAX_S / 10
        assert not got.is_set()                             # the operator still waits for the lock
    finally:
        busy.clear()
        holder.communicate("", timeout=10)
    assert got.wait(10)                                     # and has it once the holder is done


def _waits_in_flock(pid: int) -> bool:
    """Whether process `pid` has a flock() request queued in the kernel (Linux: /proc/locks
    lists each blocked request as "N: -> FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE ...")."""
    with open("/proc/locks") as fh:
        return any(line.split()[1:3] == ["->", "FLOCK"] and line.split()[5] == str(pid) for line in fh)


@pytest.mark.process
def test_an_operator_waiting_first_gets_the_lock_first(tmp_path):
    """Asking does not cost the asker its place: a later waiter (the host's patient
    compaction, another consolidation) does not take the lock before it."""
    import subprocess
    import sys
    import threading
    import time
    from types import SimpleNamespace

    from chronos_git.engine import compaction
    hold = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()")
    later = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
             "print('waiting', flush=True); fcntl.flock(fd, fcntl.LOCK_EX); print(time.monotonic(), flush=True)")
    wins = 0
    for trial in range(3):
        meta = tmp_path / f"t{trial}"
        meta.mkdir()
        lock = str(meta / "compact.lock")
        holder = subprocess.Popen([sys.executable, "-c", hold, lock], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        got = []

        def operator():
            with compaction.compaction_lock(SimpleNamespace(meta_dir=meta)):
                got.append(time.monotonic())
        op = threading.Thread(target=operator, daemon=True)
        op.start()
        wait_for(lambda: _waits_in_flock(os.getpid()),       # the operator waits first
                 message="the operator's flock() never queued")
        blocker = subprocess.Popen([sys.executable, "-c", later, lock], stdout=subprocess.PIPE, text=True)
        assert blocker.stdout.readline().strip() == "waiting"
        wait_for(lambda pid=blocker.pid: _waits_in_flock(pid), message="the later waiter's flock() never queued")
        holder.communicate("", timeout=10)
        op.join(10)
        their = float(blocker.communicate(timeout=10)[0])
        assert got and (meta / "compact.wanted").exists()      # it asked while it waited
        wins += got[0] < their
    assert wins >= 2, f"the operator who waited first got the lock first in {wins} of 3 trials"
