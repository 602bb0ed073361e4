"""A git server that trickles a byte now and then, or hangs, never holds a push or a fetch:
the exchange is cut off at `remote_deadline_s` (or below `remote_min_rate_bps`), recorded
as failing, counted by `require_anchor`, and the store is as it was (issue 33, finding 2).

Before the fix a push to TrickleServer never returned (libgit2's timeout is per read):
these tests ended at their outer timeout."""
from __future__ import annotations

import json
import threading
import time

import pygit2
import pytest

from chronos_git.engine import offload, remote as transport
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from chronos_git.windtunnel.slowremote import TrickleServer
from support.helpers import run_cli, wait_for

pytestmark = pytest.mark.process        # the point is a child process that is killed

DEADLINE_S = 3
OUTER_S = DEADLINE_S + 60               # generous: a push not cut off never ends at all


@pytest.fixture
def trickle():
    srv = TrickleServer(every=0.5).start()
    yield srv
    srv.stop()                          # also ends a push that was never cut off (the test failed)


@pytest.fixture
def hang():
    srv = TrickleServer(hang=True).start()
    yield srv
    srv.stop()


def bounded(fn):
    """fn() on a thread; its answer, or a failure when it has not ended within OUTER_S."""
    box: list = []

    def call():
        try:
            box.append(fn())
        except Exception as exc:
            box.append(exc)
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(OUTER_S)
    assert not t.is_alive(), f"still running after {OUTER_S} s: the slow server was never cut off"
    return box[0]


def refs(store) -> dict[str, str]:
    repo = pygit2.Repository(str(store))
    return {name: str(repo.references[name].target) for name in repo.references}


def but_anchor(r: dict[str, str]) -> dict[str, str]:
    """A push extends the anchor chain before it talks to the remote; nothing else moves."""
    return {k: v for k, v in r.items() if not k.startswith("refs/chronos/anchor/")}


def test_a_trickling_server_is_cut_off_recorded_and_counted_by_require_anchor(tmp_path, trickle):
    store, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    settings = {"remote_deadline_s": DEADLINE_S}

    def cli(*args):
        return run_cli(store, *args, "--json", settings=settings)
    assert cli("write", "f.txt", "--content", "1", "--workspace", ws).rc == 0
    assert cli("remote", "add", "slow", trickle.url()).rc == 0
    before = refs(store)
    p = bounded(lambda: cli("push", "slow"))
    assert trickle.sent > 0, "the server never trickled: the case proves nothing"
    assert p.rc == 1 and p.json["status"] == "error", p.stdout
    err = p.json["error"]
    assert err.startswith(f"remote 'slow' ({trickle.url()}) was cut off") and f"remote_deadline_s = {DEADLINE_S}" in err
    assert "Traceback" not in p.stdout + p.stderr
    rec = cli("remote", "list").json["remotes"][0]
    assert rec["last_error"] == err and rec["failing_since"], rec
    # nothing half-written: only the anchor chain moved, and a second attempt moves nothing
    after = refs(store)
    assert but_anchor(after) == but_anchor(before)
    assert bounded(lambda: cli("push", "slow")).rc == 1
    assert refs(store) == after
    assert cli("journal", "verify").rc == 0
    assert not list((store / "chronos" / "tmp").glob("fetch-*"))
    # require_anchor counts the cut-off push like any other failure
    settings.update(require_anchor=True, anchor_timeout_s=0.001)
    wait_for(lambda: time.time() - rec["failing_since"] > 0.01)
    blocked = cli("write", "f.txt", "--content", "2", "--workspace", ws)
    assert blocked.rc == 3, blocked.stdout
    assert "require_anchor" in blocked.json["message"] and "remote_deadline_s" in blocked.json["message"]


def test_a_server_below_the_minimum_rate_is_cut_off_before_the_deadline(tmp_path, trickle, monkeypatch):
    monkeypatch.setattr(transport, "RATE_WINDOW_S", 1.0)        # instead of 60 s
    ws = tmp_path / "ws"
    ws.mkdir()
    svc = Chronos.get(tmp_path / "store", Settings(remote_deadline_s=600, remote_min_rate_bps=1024))
    svc.start()
    svc.write_file(str(ws), "f.txt", b"1\n")
    svc.remote_add("slow", trickle.url())
    exc = bounded(lambda: svc.push("slow"))
    assert isinstance(exc, transport.RemoteError), exc
    assert str(exc).startswith("remote 'slow'") and "fewer than 1024 a second" in str(exc)
    assert "remote_min_rate_bps = 1024" in str(exc) and "remote_deadline_s" not in str(exc)
    assert svc.remote_list().remotes[0].failing_since


def test_a_hanging_server_never_holds_the_background_pusher_or_a_fetch(tmp_path, hang):
    ws = tmp_path / "ws"
    ws.mkdir()
    svc = Chronos.get(tmp_path / "store", Settings(remote_deadline_s=DEADLINE_S, push_interval_s=1))
    svc.start()
    svc.write_file(str(ws), "f.txt", b"1\n")
    svc.remote_add("slow", hang.url())

    def attempt():
        """Kick the background pusher; the remote's record once that attempt has failed."""
        since = time.time()

        def failed():
            rec = json.loads((svc.core.store.meta_dir / "remotes.json").read_text())["slow"]
            return rec if rec.get("last_error") and rec.get("last_attempt", 0) > since else None
        svc.remotes.kick()
        return wait_for(failed, timeout=OUTER_S, message="the background push was never cut off")
    first = attempt()
    assert "remote_deadline_s" in first["last_error"]
    # the pusher is free: a later push runs (and is cut off again)
    second = attempt()
    assert second["failing_since"] == first["failing_since"]
    # a fetch is cut off the same way, and neither its scratch repository nor a ref is left
    before = refs(svc.core.store.root)
    exc = bounded(lambda: svc.fetch("slow"))
    assert isinstance(exc, transport.RemoteError) and "remote_deadline_s" in str(exc), exc
    assert refs(svc.core.store.root) == before
    assert not list((svc.core.store.meta_dir / "tmp").glob("fetch-*"))


def test_without_a_child_process_the_call_is_left_behind_at_the_deadline(tmp_path, hang, monkeypatch):
    def unavailable(*a, **k):
        raise offload.Unavailable("no interpreter (test)")
    monkeypatch.setattr(offload, "run", unavailable)
    ws = tmp_path / "ws"
    ws.mkdir()
    svc = Chronos.get(tmp_path / "store", Settings(remote_deadline_s=DEADLINE_S))
    svc.start()
    svc.write_file(str(ws), "f.txt", b"1\n")
    svc.remote_add("slow", hang.url())
    exc = bounded(lambda: svc.push("slow"))
    assert isinstance(exc, transport.RemoteError) and "remote_deadline_s" in str(exc), exc
    assert svc.remote_list().remotes[0].failing_since
