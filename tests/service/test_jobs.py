"""One runner for background work (service/jobs.py): one running job per key, its typed state
in `health`, an exception ends the job with its error (never the host), and work that can
run in a child process says where it ran."""
from __future__ import annotations

import threading

from chronos_git.engine import offload
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


def test_health_reports_the_background_work(svc, ws):
    s = svc()
    s.background = True
    s.write_file(str(ws), "a.txt", b"one\n")          # a long-lived host: the first snapshot is a job
    assert s.snapshots.wait(s.core.store.workspace(str(ws)), 60)
    h = s.health(str(ws))
    assert h.jobs and h.jobs[0].kind == "baseline" and h.jobs[0].running is False and h.jobs[0].error is None
    assert "background" in __import__("chronos_git.cli.render", fromlist=["text"]).text(h)
