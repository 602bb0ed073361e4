"""Write-behind outcomes (the Hermes host): the caller has its result before the outcome is
recorded; the next call, `flush` and `journal status` wait for it, and a kill in between
leaves the call where `after_dispatch` does (a file call settles as completed by evidence)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from chronos_git.service import Chronos
from chronos_git.service.calls import Call, Declared, Outcome
from chronos_git.settings import Settings
from support.helpers import wait_for


def _write_call(ws, name, data):
    p = str(ws / name)
    return Call(tool="write_file", args={"path": p, "content": data.decode()}, workspace=str(ws),
                declared=[Declared(p, data)])


def _hold_outcomes(svc) -> threading.Event:
    """The outcome writer waits until the returned event is set."""
    hold = threading.Event()
    real_finish = svc.calls.finish
    svc.calls.finish = lambda ticket, outcome: (hold.wait(10), real_finish(ticket, outcome))[1]
    return hold


def _waits_for_outcome(hold: threading.Event, ask):
    """`ask()` on another thread: it must block while the outcome is held, then answer."""
    answers = []
    asker = threading.Thread(target=lambda: answers.append(ask()))
    asker.start()
    asker.join(0.3)
    assert not answers                                    # held until the outcome is written
    hold.set()
    asker.join(10)
    assert answers
    return answers[0]


def test_outcome_recorded_behind_and_waited_for_by_the_next_call(tmp_path, ws):
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    hold = _hold_outcomes(svc)
    with svc.protect(_write_call(ws, "a.txt", b"one\n"), write_behind=True) as t:
        (ws / "a.txt").write_bytes(b"one\n")
        t.outcome = Outcome(status="ok")
    assert t.record.recorded and t.record.post_checkpoint is None       # provisional: not yet written
    assert svc.core.journal.events(1)[0]["kind"] == "started"                # the caller did not wait
    op = t.ticket.operation_id
    nxt = _waits_for_outcome(hold, lambda: svc.begin(_write_call(ws, "b.txt", b"two\n")))
    kinds = [(e["kind"], e.get("operation_id")) for e in svc.core.journal.events(3)]
    assert kinds[1] == ("returned", op) and kinds[0][0] == "started"    # newest first: order kept
    svc.finish(nxt, Outcome(status="ok"))


def test_errors_are_recorded_before_the_caller_returns(tmp_path, ws):
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    with svc.protect(Call(tool="terminal", args={"command": "false"}, workspace=str(ws)),
                     write_behind=True) as t:
        t.outcome = Outcome(status="error", exit_code=1)
    assert t.record.post_checkpoint is not None
    assert svc.core.journal.events(1)[0]["kind"] == "returned"


def test_flush_and_status_wait(tmp_path, ws):
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    hold = _hold_outcomes(svc)
    for n, ask in enumerate((svc.journal_status, svc.flush)):
        hold.clear()
        with svc.protect(_write_call(ws, f"f{n}.txt", b"x\n"), write_behind=True) as t:
            (ws / f"f{n}.txt").write_bytes(b"x\n")
        _waits_for_outcome(hold, ask)
    ops = {o["operation_id"] for o in svc.journal_status().wire()["running"]}
    assert t.ticket.operation_id not in ops
    assert [e["kind"] for e in svc.core.journal.events(2)] == ["returned", "started"]


@pytest.mark.process
def test_a_kill_before_the_outcome_is_written_settles_the_file_call_as_completed(tmp_path, ws):
    store = tmp_path / "store"
    code = textwrap.dedent(f"""
        import os, signal, threading
        from chronos_git.service import Chronos
        from chronos_git.service.calls import Call, Declared, Outcome
        from chronos_git.settings import Settings
        svc = Chronos.get({str(store)!r}, Settings())
        svc.snapshot({str(ws)!r}, "baseline")
        seen = threading.Event()
        # the writer dies first, once the caller has shown its result
        svc.calls.finish = lambda *a: (seen.wait(30), os.kill(os.getpid(), signal.SIGKILL))
        p = {str(ws / "a.txt")!r}
        call = Call(tool="write_file", args={{"path": p, "content": "landed\\n"}}, workspace={str(ws)!r},
                    declared=[Declared(p, b"landed\\n")])
        with svc.protect(call, write_behind=True) as t:
            open(p, "wb").write(b"landed\\n")
        print("RESULT-SEEN", flush=True)      # what Hermes would show the model
        seen.set()
        svc.flush()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "CHRONOS_GIT_FAULT"})
    assert proc.returncode == -9 and "RESULT-SEEN" in proc.stdout, proc.stderr
    Chronos.forget_instances()
    svc = Chronos.get(store, Settings())
    started = svc.start()
    assert [s.result for s in started["settled"]] == ["completed"]
    assert svc.gate.is_open() and (ws / "a.txt").read_bytes() == b"landed\n"


def test_a_restore_while_an_outcome_is_still_behind_does_not_deadlock(tmp_path, ws):
    """Wind tunnel, io watcher_handoff, seed 14 (1 run in 10): the restore took its workspace's
    lock, then its intent waited for the outcome writer, whose post-snapshot waited for that lock."""
    svc = Chronos.get(tmp_path / "store", Settings())
    (ws / "a.txt").write_bytes(b"zero\n")
    first = svc.snapshot(str(ws), "baseline").checkpoint
    hold = _hold_outcomes(svc)
    with svc.protect(_write_call(ws, "a.txt", b"one\n"), write_behind=True) as t:
        (ws / "a.txt").write_bytes(b"one\n")
        t.outcome = Outcome(status="ok")
    res = _waits_for_outcome(hold, lambda: svc.restore(str(ws), first, actor="test"))
    assert res.status == "ok" and (ws / "a.txt").read_bytes() == b"zero\n"
    kinds = [e["kind"] for e in svc.core.journal.events(4)]
    assert kinds[:2] == ["returned", "started"] and kinds[2] == "returned"   # the write's outcome, then the restore


def _one_write_behind(tmp_path, ws, monkeypatch, release_after_s: float):
    """A service whose outcome writer waits `release_after_s` for a release, and one ok
    write-behind call made with it."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "RELEASE_AFTER_S", release_after_s)
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    with svc.protect(_write_call(ws, "a.txt", b"one\n"), write_behind=True) as t:
        (ws / "a.txt").write_bytes(b"one\n")
        t.outcome = Outcome(status="ok")
    return svc


def test_an_outcome_behind_waits_for_the_host_to_go_to_the_network(tmp_path, ws, monkeypatch):
    """Written when released (Hermes' model request), not while Hermes builds that request."""
    svc = _one_write_behind(tmp_path, ws, monkeypatch, 30.0)
    behind = svc.calls._behind
    with behind.all_tasks_done:                        # not written on its own
        assert not behind.all_tasks_done.wait_for(lambda: behind.unfinished_tasks == 0, timeout=0.5)
    svc.calls.release_behind()
    behind.join()                                      # released: written without settle_behind
    assert svc.core.journal.events(1)[0]["kind"] == "returned"


def test_an_outcome_behind_is_written_anyway_without_a_release(tmp_path, ws, monkeypatch):
    svc = _one_write_behind(tmp_path, ws, monkeypatch, 0.05)
    svc.calls._behind.join()                           # no release, no settle: the timeout
    assert svc.core.journal.events(1)[0]["kind"] == "returned"


def test_queued_outcomes_share_one_deadline(tmp_path, ws, monkeypatch):
    """Without a release, a batch of outcomes is written within one RELEASE_AFTER_S of being
    queued, not one per outcome."""
    import time
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "RELEASE_AFTER_S", 0.3)
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    tickets = [svc.calls.begin(_write_call(ws, f"f{i}.txt", b"x\n")) for i in range(4)]
    t0 = time.monotonic()
    for t in tickets:                                  # a parallel batch: all begun, then finished
        svc.calls._finish_behind(t, Outcome(status="ok"))
    svc.calls._behind.join()
    assert time.monotonic() - t0 < 4 * 0.3 - 0.2       # one deadline (0.3 s), not four (1.2 s)


def test_a_settle_is_not_undone_by_an_outcome_queued_meanwhile(tmp_path, ws, monkeypatch):
    """A thread waiting in settle_behind lets every outcome through, also one queued after it
    started waiting (another call of the same batch finishing)."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "RELEASE_AFTER_S", 30.0)
    svc = Chronos.get(tmp_path / "store", Settings())
    svc.snapshot(str(ws), "baseline")
    late = svc.calls.begin(_write_call(ws, "b.txt", b"two\n"))    # a batch: both begun first
    hold = _hold_outcomes(svc)
    with svc.protect(_write_call(ws, "a.txt", b"one\n"), write_behind=True) as t:
        t.outcome = Outcome(status="ok")
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (svc.calls.settle_behind(), done.set()))
    waiter.start()                                    # releases a.txt's outcome, held in finish
    wait_for(lambda: svc.calls._settling and svc.calls._behind.qsize() == 0,
             message="settle_behind is not waiting with a.txt's outcome taken by the writer")
    svc.calls._finish_behind(late, Outcome(status="ok"))           # queued while it waits
    hold.set()
    assert done.wait(5), "settle_behind waited for a release that had already been given"
    waiter.join()


def test_a_released_outcome_waits_until_the_request_is_out_unless_a_call_needs_it(tmp_path, ws, monkeypatch):
    """After a release Hermes still builds and sends its request in Python: the writer waits
    SENT_AFTER_S (set long here) so as not to compete with it for the GIL, but a thread that
    settles (the next call's begin) gets the outcome at once."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "SENT_AFTER_S", 30.0)
    svc = _one_write_behind(tmp_path, ws, monkeypatch, 30.0)
    behind = svc.calls._behind
    svc.calls.release_behind()
    with behind.all_tasks_done:                        # released, but the request is not out yet
        assert not behind.all_tasks_done.wait_for(lambda: behind.unfinished_tasks == 0, timeout=0.5)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (svc.calls.settle_behind(), done.set()))
    waiter.start()
    assert done.wait(10), "a settle waited for SENT_AFTER_S"
    waiter.join()
    assert svc.core.journal.events(1)[0]["kind"] == "returned"


def test_a_released_outcome_is_written_once_the_model_has_answered(tmp_path, ws, monkeypatch):
    """A model that answers before SENT_AFTER_S (the scripted one, a cache hit): the outcome is
    written beside Hermes' handling of the answer, not after SENT_AFTER_S."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "SENT_AFTER_S", 30.0)
    svc = _one_write_behind(tmp_path, ws, monkeypatch, 30.0)
    svc.calls.release_behind()
    svc.calls.answered()
    behind = svc.calls._behind
    with behind.all_tasks_done:
        assert behind.all_tasks_done.wait_for(lambda: behind.unfinished_tasks == 0, timeout=10)
    assert svc.core.journal.events(1)[0]["kind"] == "returned"


def test_after_fast_answers_a_released_outcome_is_written_at_once(tmp_path, ws, monkeypatch):
    """A model that lately answered within SENT_AFTER_S (a local or scripted one) leaves no
    wait to hide the writer in: it starts at the release, as before SENT_AFTER_S existed."""
    from chronos_git.service import transaction
    monkeypatch.setattr(transaction, "SENT_AFTER_S", 30.0)
    svc = _one_write_behind(tmp_path, ws, monkeypatch, 30.0)
    calls = svc.calls
    calls.release_behind()
    calls.answered()                                   # answered in far less than 30 s
    calls._behind.join()
    with svc.protect(_write_call(ws, "b.txt", b"two\n"), write_behind=True) as t:
        (ws / "b.txt").write_bytes(b"two\n")
        t.outcome = Outcome(status="ok")
    assert calls._behind.unfinished_tasks == 1         # held for the release
    calls.release_behind()                             # no answer, no settle: written anyway
    behind = calls._behind
    with behind.all_tasks_done:
        assert behind.all_tasks_done.wait_for(lambda: behind.unfinished_tasks == 0, timeout=10)
    assert svc.core.journal.events(1)[0]["kind"] == "returned"
