"""One runner for background work (service/jobs.py): one running job per key, its typed state
in `health`, an exception ends the job with its error (never the host), and work that can
run in a child process says where it ran."""
from __future__ import annotations

import threading

from support.helpers import wait_for

from chronos_git.engine import offload
from chronos_git.service import snapshots
from chronos_git.service.jobs import Jobs


def test_one_running_job_per_key_and_its_state():
    jobs, gate = Jobs(), threading.Event()
    first = jobs.start("compact", "compact", lambda job: gate.wait(30))
    assert first is not None and first.running
    assert jobs.start("compact", "compact", lambda job: None) is None      # running: not made again
    other = jobs.start("verify", "verify", lambda job: 42)
    assert other is not None and jobs.wait("verify", 30) and other.result == 42
    gate.set()
    assert jobs.wait("compact", 30) and not first.running
    states = jobs.states()
    assert [(s.kind, s.running, s.error) for s in states] == [("compact", False, None), ("verify", False, None)]
    assert all(s.finished and s.finished >= s.started for s in states)
    again = jobs.start("compact", "compact", lambda job: None)                # ended: may start again
    assert again is not None and again is not first and jobs.wait("compact", 30)


def test_an_exception_ends_the_job_with_its_error():
    jobs = Jobs()

    def work(job):
        raise OSError("disk full")
    job = jobs.start("consolidate", "consolidate", work)
    assert jobs.wait("consolidate", 30)
    assert job.error == "OSError: disk full" and job.state().error == "OSError: disk full"


def test_offloaded_work_runs_here_when_no_child_can(monkeypatch, tmp_path):
    def unavailable(*_a, **_k):
        raise offload.Unavailable("no fork here")
    monkeypatch.setattr(offload, "run", unavailable)
    jobs = Jobs()

    class Core:
        store_dir, store = tmp_path, type("S", (), {"config": None})()
    job = jobs.start("x", "first_snapshot",
                     lambda job: job.offloaded("first_snapshot", Core(), {}, here=lambda: "done here"))
    assert jobs.wait("x", 30) and job.result == "done here"
    assert job.runs_in == "this process: no fork here"


def test_health_reports_the_background_work(svc, ws, monkeypatch):
    monkeypatch.setattr(snapshots, "SMALL_TREE_ENTRIES", 0)     # a tree too big to import on the spot
    s = svc()
    s.background = True
    s.write_file(str(ws), "a.txt", b"one\n")          # a long-lived host: the first snapshot is a job
    assert s.snapshots.wait(s.core.store.workspace(str(ws)), 60)
    h = s.health(str(ws))
    assert h.jobs and h.jobs[0].kind == "baseline" and h.jobs[0].running is False and h.jobs[0].error is None
    assert "background" in __import__("chronos_git.cli.render", fromlist=["text"]).text(h)


def test_a_worker_runs_once_per_key_in_order_and_keeps_a_failed_items_error():
    """A worker (Jobs.worker) does its owner's items one at a time; an item that raises is kept
    as the job's error and the items behind it are still done."""
    import queue
    jobs, items, done = Jobs(), queue.Queue(), []

    def do(item):
        if item == "bad":
            raise ValueError("no such item")
        done.append(item)
    first = jobs.worker("w", "w", items.get, do)
    assert jobs.worker("w", "w", items.get, do) is first and first.running      # started once
    for item in ("a", "bad", "b"):
        items.put(item)
    wait_for(lambda: first.progress == {"done": 2, "failed": 1}, message=lambda: first.progress)
    assert done == ["a", "b"] and first.running and not first.busy
    state = [s for s in jobs.states() if s.kind == "w"][0]
    assert state.running and state.error == "ValueError: no such item"


def test_health_reports_the_pusher_and_the_outcome_writer_with_their_errors(svc, ws, tmp_path, monkeypatch):
    """The outcome writer and the pusher are jobs of service/jobs.py: `health` lists them, and
    an exception in either is kept as its error (the writer goes on with the next outcome,
    the pusher with the next push)."""
    from chronos_git.service.calls import Call, Declared, Outcome
    s = svc()
    s.snapshot(str(ws), "baseline")
    real_finish = s.calls.finish

    def failing_finish(ticket, outcome):
        raise RuntimeError("outcome writer broke")
    monkeypatch.setattr(s.calls, "finish", failing_finish)

    def write(name: str):
        p = str(ws / name)
        call = Call(tool="write_file", args={"path": p, "content": "x\n"}, workspace=str(ws),
                    declared=[Declared(p, b"x\n")])
        with s.protect(call, write_behind=True) as t:
            (ws / name).write_bytes(b"x\n")
            t.outcome = Outcome(status="ok")
    write("one.txt")
    s.calls.settle_behind()                     # not stranded: the failed item is done with
    monkeypatch.setattr(s.calls, "finish", real_finish)
    write("two.txt")
    s.calls.settle_behind()
    assert s.core.journal.events(1)[0]["kind"] == "returned"         # the writer went on

    s.remote_add("r", str(tmp_path / "remote.git"))
    real_push_all, pushed = s.remotes.push_all, threading.Event()

    def failing_push_all():
        raise RuntimeError("pusher broke")
    monkeypatch.setattr(s.remotes, "push_all", failing_push_all)
    s.after_turn()                               # kicks the pusher
    pusher = s.core.jobs.get("push")
    wait_for(lambda: pusher.progress["failed"] == 1, message=lambda: pusher.state())
    monkeypatch.setattr(s.remotes, "push_all", lambda: (real_push_all(), pushed.set()))
    s.after_turn()
    assert pushed.wait(60)
    wait_for(lambda: pusher.progress["done"] == 1, message=lambda: pusher.state())

    jobs = {j.kind: j for j in s.health(str(ws)).jobs or []}
    assert jobs["outcomes"].running and jobs["outcomes"].error == "RuntimeError: outcome writer broke"
    assert jobs["outcomes"].progress == {"done": 1, "failed": 1}
    assert jobs["push"].running and jobs["push"].error == "RuntimeError: pusher broke"
    assert jobs["push"].progress == {"done": 1, "failed": 1}
    assert s.remote_list().remotes[0].last_push                       # the second push went out
    text = __import__("chronos_git.cli.render", fromlist=["text"]).text(s.health(str(ws)))
    assert "outcomes running (RuntimeError: outcome writer broke)" in text
    assert "push running (RuntimeError: pusher broke)" in text


def test_a_drain_at_exit_waits_for_the_push_under_way(svc, ws, tmp_path, monkeypatch):
    s = svc()
    s.write_file(str(ws), "a.txt", b"one\n")
    s.remote_add("r", str(tmp_path / "remote.git"))
    release, order = threading.Event(), []

    def held_push_all():
        release.wait(60)
        order.append("pushed")
    monkeypatch.setattr(s.remotes, "push_all", held_push_all)
    s.after_turn()
    pusher = s.core.jobs.get("push")
    wait_for(lambda: pusher.busy, message="the pusher never started its push")
    drain = threading.Thread(target=lambda: (s.drain_pushes(60), order.append("drained")))
    drain.start()
    release.set()
    drain.join(60)
    assert order == ["pushed", "drained"] and not pusher.busy and pusher.progress == {"done": 1, "failed": 0}
