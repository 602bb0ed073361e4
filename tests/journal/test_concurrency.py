"""Several real processes on one journal: CAS appends lose nothing, live operations do not block
each other, verify never mistakes a concurrent append for tampering."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest


from chronos_git.journal_refs import events
from support.helpers import git

PY = sys.executable

APPENDER = textwrap.dedent("""
    import os, sys, time
    from chronos_git.engine.store import Store
    from chronos_git.journal_refs import Journal, events
    store, tag, pairs, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    j = Journal(Store.open(store)).open()
    assert j.integrity == "ok", j.integrity
    deadline = time.monotonic() + 120
    while not os.path.exists(go):               # all start at once (a tight poll on purpose)
        if time.monotonic() > deadline:
            sys.exit(f"the go file {go} did not appear within 120 s")
        time.sleep(0.001)
    for i in range(pairs):
        op = f"{tag}{i:028d}"
        j.append(events.Started, {"operation_id": op, "tool": tag, "owner": j.me.to_dict()})
        j.append(events.Returned, {"operation_id": op, "status": "ok"})
    print("done", flush=True)
""")


def spawn_appenders(store_dir, tmp_path, n, pairs):
    go = tmp_path / "go"
    procs = [subprocess.Popen([PY, "-c", APPENDER, str(store_dir), f"p{k:03d}", str(pairs), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(n)]
    return go, procs


def wait_all(procs, timeout=300):
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
        assert out.strip() == "done"


@pytest.mark.process
@pytest.mark.slow
def test_cas_four_processes_times_200_appends_lose_nothing(svc, store_dir, tmp_path):
    s = svc()
    s.start()                                          # genesis
    go, procs = spawn_appenders(store_dir, tmp_path, 4, 100)   # 4 x 200 appends
    go.touch()
    wait_all(procs)
    evs = list(reversed(s.core.journal.events(None)))
    assert [e["seq"] for e in evs] == list(range(801))
    per = defaultdict(list)
    for e in evs[1:]:
        per[e["operation_id"][:4]].append(e)
    assert sorted(per) == ["p000", "p001", "p002", "p003"]
    for tag, mine in per.items():
        assert len(mine) == 200
        # each process's own events are all there, in its order: started i, returned i, ...
        expect = []
        for i in range(100):
            op = f"{tag}{i:028d}"
            expect += [("started", op), ("returned", op)]
        assert [(e["kind"], e["operation_id"]) for e in mine] == expect
    res = s.journal_verify().wire()
    assert res["status"] == "ok" and res["events"] == 801, res["problems"]
    assert s.core.journal.state.open == {}
    assert s.core.journal.state.totals == {"genesis": 1, "started": 400, "returned": 400}
    fsck = git(f"--git-dir={store_dir}", "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


@pytest.mark.process
@pytest.mark.slow
def test_verify_during_concurrent_appends_never_reports_tampering(svc, store_dir, tmp_path):
    s = svc()
    s.start()
    go, procs = spawn_appenders(store_dir, tmp_path, 2, 60)
    go.touch()
    results = []
    while any(p.poll() is None for p in procs):
        results.append(s.core.journal.verify())
    wait_all(procs)
    results.append(s.core.journal.verify())
    assert len(results) >= 2
    bad = [r["problems"] for r in results if r["integrity"] != "ok"]
    assert bad == []
    assert s.core.journal.integrity == "ok" and s.gate.state() is None
    assert not (store_dir / "chronos" / "journal-alarm.json").exists()
    assert results[-1]["events"] == 1 + 2 * 2 * 60


@pytest.mark.process
@pytest.mark.slow
def test_concurrent_protected_cli_calls_do_not_block_each_other(cli, ws, store_dir):
    assert cli("journal", "status", "--json", cwd=ws).rc == 0
    env = dict(os.environ, CHRONOS_GIT_STORE=str(store_dir))
    env.pop("CHRONOS_GIT_FAULT", None)
    env.pop("CHRONOS_GIT_SETTINGS", None)
    script = textwrap.dedent("""
        import subprocess, sys
        k = sys.argv[1]
        for i in range(4):
            r = subprocess.run([sys.executable, "-m", "chronos_git.cli", "write", "--json",
                                f"w{k}.txt", "--content", f"{k}-{i}"], capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout, r.stderr); sys.exit(1)
            r = subprocess.run([sys.executable, "-m", "chronos_git.cli", "run", "--json", "--",
                                sys.executable, "-c", "import time; time.sleep(0.05)"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout, r.stderr); sys.exit(1)
    """)
    procs = [subprocess.Popen([PY, "-c", script, str(k)], cwd=ws, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for k in range(4)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out
    for k in range(4):
        assert (ws / f"w{k}.txt").read_text() == f"{k}-3"
    st = cli("journal", "status", "--json").json
    assert st["unresolved"] == [] and st["running"] == [] and st["gate"] == "open"
    assert st["totals"]["started"] == 32 and st["totals"]["returned"] == 32
    v = cli("journal", "verify", "--json")
    assert v.rc == 0 and v.json["events"] == 65


HOLDER = textwrap.dedent("""
    import sys, time
    from chronos_git.service import Chronos, Call
    from chronos_git.settings import Settings
    s = Chronos.get(sys.argv[1], Settings())
    t = s.begin(Call(tool="long_job", args={"n": 1}, workspace=sys.argv[2]))
    s.core.journal.settle()    # the intent is published in the background: other processes see it then
    print(t.operation_id, flush=True)
    time.sleep(600)
""")


@pytest.mark.process
def test_live_owner_elsewhere_then_killed_closes_the_gate_for_the_cli(cli, ws, store_dir):
    assert cli("journal", "status", "--json", cwd=ws).rc == 0
    holder = subprocess.Popen([PY, "-c", HOLDER, str(store_dir), str(ws)], stdout=subprocess.PIPE, text=True)
    try:
        op = holder.stdout.readline().strip()
        assert len(op) == 32
        st = cli("journal", "status", "--json").json
        assert st["gate"] == "open" and st["unresolved"] == []
        assert [(r["operation_id"], r["state"]) for r in st["running"]] == [(op, "running")]
        assert st["running"][0]["owner"]["pid"] == holder.pid
        r = cli("run", "--json", "--", "true", cwd=ws)
        assert r.rc == 0, r.stdout                   # a running op elsewhere does not block
        # an operator cannot resolve an op whose owner is alive
        res = cli("journal", "resolve", op, "--outcome", "completed", "--evidence", "x", "--json")
        assert res.rc == 1
    finally:
        holder.kill()
        holder.wait()
    st = cli("journal", "status", "--json").json
    assert st["gate"] == "closed" and st["running"] == []
    assert [(u["operation_id"], u["state"], u["tool"]) for u in st["unresolved"]] == [(op, "pending", "long_job")]
    b = cli("run", "--json", "--", "true", cwd=ws)
    assert b.rc == 3 and b.json["operation_ids"] == [op]
    assert cli("journal", "resolve", op, "--outcome", "not_applied", "--evidence", "killed before work",
               "--json").rc == 0
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0


def test_in_process_threads_share_one_journal(svc, ws):
    """Threads of one process (Hermes runs tools in threads) append through one Journal."""
    import threading
    from chronos_git.service import Call, Outcome
    s = svc(auto_snapshot=False)
    s.start()
    errors = []

    def worker(k):
        try:
            for i in range(25):
                t = s.begin(Call(tool=f"t{k}", args={"i": i}, workspace=str(ws)))
                s.finish(t, Outcome(status="ok"))
        except Exception as exc:          # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert s.core.journal.state.seq == 200 and s.core.journal.state.open == {}
    assert s.journal_verify().wire()["status"] == "ok"


@pytest.mark.process
def test_two_processes_settling_the_same_crashed_op(cli, ws, store_dir, monkeypatch):
    """Two services start at once after a crash and both try to settle the same operation by
    evidence.  The loser's append is refused by the journal (already settled): its start-up must
    not fail because of that.  The interleaving is forced by running the winner inside the
    loser's evidence check (real journal, real store)."""
    from chronos_git.journal_refs import evidence as recovery
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    assert cli("journal", "status", "--json", cwd=ws).rc == 0
    r = cli("write", "--json", "a.txt", "--content", "crashed\n", cwd=ws, fault="after_dispatch")
    assert r.rc == -9
    winner = Chronos(store_dir, Settings())
    loser = Chronos(store_dir, Settings())
    winner.core.journal.open()
    loser.core.journal.open()
    real = recovery.evidence
    raced = []
    busy = []

    def evidence_with_a_rival(declared):
        out = real(declared)
        if not busy:
            busy.append(1)
            raced.append(winner.reconcile.settle_by_evidence())
        return out

    monkeypatch.setattr(recovery, "evidence", evidence_with_a_rival)
    loser.start()                                       # must not raise
    assert raced and [x.result for x in raced[0]] == ["completed"]
    assert loser.startup["integrity"] == "ok"
    kinds = [e["kind"] for e in loser.core.journal.events(None)]
    assert kinds.count("recovered") == 1
    assert loser.gate.state() is None
