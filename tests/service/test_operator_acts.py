"""Finding 4 of issue 32: an agent settled its own gate.  A process left running by an earlier
protected call waited for the gate to close, then ran `chronos-git journal resolve`; the journal
credited operator-cli.  Now an operator act from a process that descends from a live dispatcher
of protected calls, or from a process such a call left running, is refused and journaled, and
every operator act records who acted (uid, terminal, ancestry)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap

import pytest

from chronos_git.engine import processes
from support.helpers import wait_for

PY = sys.executable


def _status(cli):
    return cli("journal", "status", "--json").json


def _events(cli, n=20):
    return cli("journal", "log", "--json", "--limit", n).json["events"]


def _crashed_op(cli, ws) -> str:
    assert cli("run", "--json", "--", "true", cwd=ws, fault="after_intent").rc == -9
    (u,) = _status(cli)["unresolved"]
    return u["operation_id"]


@pytest.mark.process
def test_a_process_an_earlier_call_left_running_cannot_resolve_the_gate(cli, ws, store_dir, tmp_path):
    trigger, out = tmp_path / "op-id", tmp_path / "resolve.json"
    waiter = textwrap.dedent(f"""
        import os, subprocess, sys, time
        if os.fork():                    # the call's own process returns at once; the child lives on
            sys.exit(0)
        os.setsid()
        while not os.path.exists({str(trigger)!r}):
            time.sleep(0.02)
        op = open({str(trigger)!r}).read()
        env = dict(os.environ, CHRONOS_GIT_STORE={str(store_dir)!r})
        p = subprocess.run([{PY!r}, "-m", "chronos_git.cli", "journal", "resolve", op, "--outcome",
                            "completed", "--evidence", "the agent says so", "--json"],
                           capture_output=True, text=True, env=env)
        open({str(out)!r} + ".tmp", "w").write(p.stdout)
        os.rename({str(out)!r} + ".tmp", {str(out)!r})
    """)
    r = cli("run", "--json", "--", PY, "-c", waiter, cwd=ws)
    assert r.rc == 0, r.stdout + r.stderr
    left = _events(cli, 1)[0]
    assert left["kind"] == "returned" and left.get("left_running"), left
    op = _crashed_op(cli, ws)
    trigger.write_text(op)
    wait_for(out.exists, timeout=60, message="the left-over process never tried to resolve")
    doc = json.loads(out.read_text())
    assert doc["status"] == "error" and doc["code"] == "agent_descendant", doc
    assert "left running" in doc["error"]
    st = _status(cli)
    assert st["gate"] == "closed" and [u["operation_id"] for u in st["unresolved"]] == [op]
    refused = [e for e in _events(cli) if e.get("action") == "operator_refused"]
    assert refused and refused[0]["act"] == "journal resolve" and refused[0]["operation_id"] == op
    assert refused[0]["actor"]["tty"] is None and len(refused[0]["actor"]["ancestry"]) >= 2


@pytest.mark.process
def test_a_command_a_live_call_runs_cannot_change_the_remotes(cli, ws, tmp_path):
    """`chronos-git run` dispatches the call (its owner); the command it runs descends from it."""
    bare = tmp_path / "remote.git"
    r = cli("run", "--json", "--", PY, "-m", "chronos_git.cli", "remote", "add", "r", str(bare), "--json",
            cwd=ws)
    assert r.rc == 1, r.stdout
    assert "agent_descendant" in r.stderr or "descends from" in r.stderr, r.stderr
    assert cli("remote", "list", "--json").json["remotes"] == []


@pytest.mark.process
def test_the_operator_s_own_act_is_allowed_and_says_who_acted(cli, ws):
    op = _crashed_op(cli, ws)
    r = cli("journal", "resolve", op, "--outcome", "not_applied", "--evidence", "checked by hand", "--json")
    assert r.rc == 0, r.stdout
    ev = _events(cli, 1)[0]
    assert ev["kind"] == "resolved" and ev["actor"] == "operator-cli"
    who = ev["operator"]
    assert who["uid"] == os.getuid()
    assert [p[0] for p in who["ancestry"]][:1] == [os.getpid()]     # the CLI ran in this process


def test_left_running_names_only_what_the_call_started(tmp_path):
    me = os.getpid()
    since = processes.now_ticks()
    assert since is not None
    found = processes.left_running(me, since)
    assert all(p.pid != me and p.start >= since for p in found)
    chain = processes.ancestry()
    assert chain[0].pid == me and chain[-1].pid == 1


@pytest.mark.process
@pytest.mark.skipif(shutil.which("unshare") is None or os.getuid() != 0, reason="needs unshare as root")
def test_a_pid_namespace_of_its_own_does_not_hide_the_ancestry(cli, ws, tmp_path):
    """The red team's bypass: in `unshare -pf` a process is pid 1 to itself while /proc shows the
    outer tree; its ancestry is read through /proc/self, and such a process is refused anyway."""
    bare = tmp_path / "remote.git"
    for how in (["unshare", "-pf"], ["unshare", "-pf", "--mount-proc"]):
        r = cli("run", "--json", "--", *how, PY, "-m", "chronos_git.cli", "remote", "add", "r",
                str(bare), "--json", cwd=ws)
        assert r.rc == 1, r.stdout + r.stderr
        assert "agent_descendant" in r.stderr, (how, r.stderr)
    assert cli("remote", "list", "--json").json["remotes"] == []
