"""The inotify watch limit reached in a long-lived host (Hermes) is said on every surface: the
host's health and status, the model's first-turn notice, and the CLI's `health` and `journal
status` (text and --json), which run in another process and read what the host published.
The watcher's test cap (engine/watcher.py `CAP`) stands in for the kernel's limit."""
from __future__ import annotations

import json
import re

import pytest

from chronos_git.engine import watcher as watcher_mod
from chronos_git.hermes.alerts import protection_notice
from chronos_git.service import Chronos, snapshots
from chronos_git.service.calls import Call, Declared, Outcome
from chronos_git.settings import Settings

pytestmark = pytest.mark.skipif(not watcher_mod.available(), reason="inotify not available")

SYSCTL = re.compile(r"sudo sysctl fs\.inotify\.max_user_watches=\d+")


@pytest.fixture
def host(tmp_path, store_dir, monkeypatch):
    monkeypatch.setattr(watcher_mod, "CAP", 3)
    root = tmp_path / "ws"
    for d in range(4):
        (root / f"d{d}" / "sub").mkdir(parents=True)
        (root / f"d{d}" / "sub" / "f.txt").write_text(f"{d}\n")
    svc = Chronos.get(store_dir, Settings())
    svc.background = True
    svc.turn_checkpoint(str(root))
    assert svc.snapshots.wait(svc.core.store.workspace(root), 60)
    yield svc, root
    svc.flush()


def _call(svc, root, command="make"):
    t = svc.begin(Call(tool="terminal", args={"command": command}, workspace=str(root)))
    return t


def test_the_host_says_degraded_with_the_sysctl_everywhere(host):
    svc, root = host
    h = svc.health(str(root)).wire()
    w = h["workspace"]["watcher"]
    assert w["mode"] == "degraded: watch limit" and w["watches"] == 3 and w["unwatched_dirs"] == 8 - 2
    assert SYSCTL.fullmatch(w["fix"]) and "/etc/sysctl.d/" in w["fix_permanent"]
    p = h["protection"]
    assert p["state"] == "degraded" and "watch limit" in p["reason"] and str(root) in p["reason"]
    assert SYSCTL.search(p["fix"]) and "/etc/sysctl.d/" in p["fix"]
    assert svc.journal_status().protection.state == "degraded"
    notice = protection_notice(svc.protection(held=False))          # the model's first turn
    assert notice and "DEGRADED" in notice and SYSCTL.search(notice)


def test_nothing_is_lost_in_a_protected_call_in_an_unwatched_directory(host):
    svc, root = host
    ws = svc.core.store.workspace(root)
    unwatched = sorted(ws._watcher._unwatched)[0].decode()
    t = _call(svc, root)
    (root / unwatched / "made-by-the-call.txt").write_text("new\n")
    svc.finish(t, Outcome(status="ok"))
    t2 = _call(svc, root, "make again")                                 # its pre-checkpoint holds it
    assert t2.pre_checkpoint
    svc.finish(t2, Outcome(status="ok"))
    tree = ws.store.repo()[t2.pre_checkpoint].tree
    assert tree[f"{unwatched}/made-by-the-call.txt"]


def _cli_says_it(cli, root, process: bool) -> None:
    h = json.loads(cli("health", "--workspace", root, "--json", process=process).stdout)
    assert h["protection"]["state"] == "degraded" and SYSCTL.search(h["protection"]["fix"])
    w = h["workspace"]["watcher"]
    assert w["mode"] == "degraded: watch limit" and w["unwatched_dirs"] == 6 and w["process"]
    text = cli("health", "--workspace", root, process=process).stdout
    assert "DEGRADED" in text and "watch limit" in text and SYSCTL.search(text)
    assert "watcher" in text and "directories watched" in text
    st = json.loads(cli("journal", "status", "--json", process=process).stdout)
    assert st["protection"]["state"] == "degraded" and SYSCTL.search(st["protection"]["fix"])
    text = cli("journal", "status", process=process).stdout
    assert "protection DEGRADED" in text and SYSCTL.search(text)


def test_the_cli_reads_what_the_host_published(host, cli):
    svc, root = host
    _cli_says_it(cli, root, process=False)
    svc.flush()                                       # the host leaves: its watchers end with it
    h = json.loads(cli("health", "--workspace", root, "--json").stdout)
    assert h["protection"]["state"] == "on" and not (h["workspace"]["watcher"] or {}).get("mode")


@pytest.mark.process
def test_the_cli_in_another_process_reads_it_too(host, cli):
    _, root = host
    _cli_says_it(cli, root, process=True)


def test_a_first_file_call_does_not_wait_for_the_watches_to_be_added(tmp_path, store_dir, monkeypatch):
    """At a million files adding 75,000 watches takes seconds: they are added on the watcher's
    thread, and a file call at the start of a session is protected (its pre-images journaled)
    without waiting for them."""
    import threading
    gate = threading.Event()
    slow = watcher_mod.Watcher._watch_tree

    def held(self, rel):
        gate.wait(60)                    # the watches are still being added
        return slow(self, rel)
    monkeypatch.setattr(watcher_mod.Watcher, "_watch_tree", held)
    monkeypatch.setattr(snapshots, "SMALL_TREE_ENTRIES", 0)     # a tree too big to import on the spot
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "a.txt").write_text("before\n")
    svc = Chronos.get(store_dir, Settings())
    svc.background = True
    svc.turn_checkpoint(str(root))
    state = svc.core.store.workspace(root).watcher_state()
    assert state["mode"] == "starting" and not gate.is_set()
    t = svc.begin(Call(tool="write_file", args={"path": "d/a.txt", "content": "after\n"}, workspace=str(root),
                       declared=[Declared(str(root / "d" / "a.txt"), b"after\n")]))
    assert not gate.is_set()             # begin() returned while the watches were held back
    gate.set()
    (root / "d" / "a.txt").write_text("after\n")
    svc.finish(t, Outcome(status="ok"))
    ev = svc.core.journal.event(svc.core.journal.head)
    assert ev["kind"] == "returned"
    assert svc.snapshots.wait(svc.core.store.workspace(root), 60)
    svc.flush()


def test_two_reasons_to_be_degraded_keep_both_fixes():
    """Whichever surface made protection DEGRADED first, a second reason keeps the first one's
    reason and fix (the watch limit's sysctl beside a narrowing's `capture accept`)."""
    from chronos_git.service.results import Protection
    on = Protection(state="on")
    one = on.degraded("the watch limit", "sudo sysctl fs.inotify.max_user_watches=1")
    assert one.fix == "sudo sysctl fs.inotify.max_user_watches=1"
    two = one.degraded("capture narrowed", "chronos-git capture accept")
    assert two.reason == "capture narrowed; also: the watch limit"
    assert two.fix == "chronos-git capture accept; also: sudo sysctl fs.inotify.max_user_watches=1"
    assert two.degraded("again", None).fix == two.fix
    assert one.degraded("same fix", one.fix).fix == one.fix
