"""The lock order (engine/metadir.py): every lock under `<store>/chronos/` has a place in
LOCK_ORDER, and one taken against it raises in strict mode (conftest sets it for every test and
every process a test starts, so the whole suite checks the order as it runs)."""
from __future__ import annotations

import os

import pytest

from chronos_git.engine import locking, metadir


@pytest.fixture
def meta(tmp_path):
    d = tmp_path / "store" / "chronos"
    (d / "ws").mkdir(parents=True)
    return d


def test_the_suite_runs_in_strict_mode():
    assert os.environ.get("CHRONOS_GIT_LOCK_ORDER") == "strict"


def test_a_lock_taken_against_the_order_raises_before_it_waits(meta):
    ws = metadir.lock_path(meta, "ws", "abc")
    maintenance = locking.ReadWriteLock(metadir.lock_path(meta, "maintenance"))
    with locking.exclusive(ws):
        with pytest.raises(metadir.LockOrderError, match="maintenance taken while holding ws"):
            with maintenance.shared():
                pass
        with pytest.raises(metadir.LockOrderError):
            with locking.exclusive(metadir.lock_path(meta, "compact")):
                pass
    with maintenance.shared(), locking.exclusive(ws), locking.exclusive(metadir.lock_path(meta, "journal")):
        with locking.exclusive(ws):                  # re-entry waits for nothing new
            pass


def test_without_strict_mode_the_order_is_not_enforced(meta, monkeypatch):
    monkeypatch.delenv("CHRONOS_GIT_LOCK_ORDER")
    with locking.exclusive(metadir.lock_path(meta, "journal")):
        with locking.exclusive(metadir.lock_path(meta, "ws", "abc")):
            pass


def test_every_lock_a_store_takes_is_in_the_order(svc, ws, tmp_path, store_dir):
    """A store's life (calls, a shell call, a restore, a compaction, a remote push): each lock
    file it made has a kind in LOCK_ORDER."""
    s = svc(max_checkpoints=2, compact_grace_s=0)
    s.start()
    for i in range(3):
        s.write_file(str(ws), "a.txt", f"{i}\n".encode())
    s.run_command(str(ws), ["sh", "-c", "echo x > b.txt"])
    s.restore(str(ws), "2")
    s.compact()
    s.remote_add("r", str(tmp_path / "remote.git"))
    s.push("r")
    locks = [p for p in (store_dir / "chronos").rglob("*.lock")]
    assert len({metadir.kind_of(p) for p in locks}) >= 5, locks
    assert [p for p in locks if metadir.kind_of(p) is None] == []


def test_lock_paths_are_named_in_one_place(meta):
    assert metadir.lock_path(meta, "push", "origin").name == "push-origin.lock"
    assert metadir.kind_of(metadir.lock_path(meta, "push", "origin")) == "push"
    assert metadir.kind_of(metadir.lock_path(meta, "ws", "abc")) == "ws"
    with pytest.raises(ValueError, match="no lock 'elsewhere'"):
        metadir.lock_path(meta, "elsewhere")
