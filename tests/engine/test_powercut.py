"""After a power cut: un-fsynced snapshot data is found and repaired before libgit2 reads it.

Regression tests for what the wind tunnel's power suite found: libgit2 1.9 loops forever
inflating a truncated loose object (so nothing may read one), and damaged refs, packs and
stat caches must be repaired, never trusted and never answered with a bare GitError.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pygit2

import pytest

from chronos_git.engine import powercut
from chronos_git.engine.store import Store, StoreError
from chronos_git.service import Chronos
from chronos_git.settings import Settings


def _reboot(store: Path) -> None:
    (store / "chronos" / powercut.MARKER).write_text(json.dumps({"boot_id": "the boot before the cut"}))


def _two_checkpoints(store: Path, ws: Path) -> tuple[Chronos, str, str]:
    svc = Chronos.get(store, Settings())
    svc.start()
    (ws / "a.txt").write_text("first\n")
    first = svc.snapshot(str(ws), "first").checkpoint
    (ws / "a.txt").write_text("second\n")
    second = svc.snapshot(str(ws), "second").checkpoint
    return svc, first, second


def _loose(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def _next_process(store: Path) -> Chronos:
    Chronos.forget_instances()
    svc = Chronos.get(store, Settings())
    svc.start()
    return svc


def _finishes(fn, timeout: float = 30.0):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "hung (libgit2 inflating a damaged object?)"
    return box["value"]


def test_loose_object_ok_tells_a_truncated_object_from_a_whole_one(store_dir, ws):
    svc, _first, second = _two_checkpoints(store_dir, ws)
    path = _loose(store_dir, second)
    assert powercut.loose_object_ok(path)
    raw = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(raw[: len(raw) // 2])
    assert not powercut.loose_object_ok(path)
    path.write_bytes(b"\0" * len(raw))
    assert not powercut.loose_object_ok(path)


def _cut_newest(store_dir: Path, oid: str) -> Path:
    path = _loose(store_dir, oid)
    raw = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(raw[: len(raw) // 2])              # the cut: the commit was never synced
    _reboot(store_dir)
    return path


def test_a_truncated_newest_checkpoint_goes_back_to_the_journal_s_checkpoint(store_dir, ws):
    svc, _first, _second = _two_checkpoints(store_dir, ws)
    w = svc.write_file(str(ws), "b.txt", b"by a protected call\n")     # journaled: its pre-checkpoint
    pre = [e for e in svc.core.journal.events(None) if e.get("pre_checkpoint")][-1]["pre_checkpoint"]
    newest = svc.log(str(ws), 1).checkpoints[0].id
    assert w.status == "ok"
    path = _cut_newest(store_dir, newest)
    s = _next_process(store_dir)
    repair = s.startup["power_cut_repair"]
    assert repair["objects_quarantined"] and repair["refs_repaired"]
    assert not path.exists() and any((store_dir / "chronos" / "quarantine").iterdir())
    good = repair["refs_repaired"][0]["now"]
    assert newest != pre and good == pre             # the call's journaled pre-checkpoint
    log = _finishes(lambda: s.log(str(ws)))
    assert log.checkpoints[0].id == good
    # the repair is on the record, and the next snapshot builds on the good checkpoint
    assert any(e.get("action") == "power_cut_repair" for e in s.core.journal.events(10))
    (ws / "a.txt").write_text("third\n")
    third = _finishes(lambda: s.snapshot(str(ws), "third"))
    repo = pygit2.Repository(str(store_dir))
    assert [str(p) for p in repo[third.checkpoint].parent_ids] == [good]
    assert s.journal_verify().status == "ok"


def test_with_no_complete_checkpoint_known_the_next_snapshot_starts_a_new_chain(store_dir, ws):
    """Manual snapshots are not journaled: when the newest one is cut, nothing vouches for
    an older one, and the report says the chain starts again (never a silent reset)."""
    svc, _first, second = _two_checkpoints(store_dir, ws)
    _cut_newest(store_dir, second)
    s = _next_process(store_dir)
    (fix,) = s.startup["power_cut_repair"]["refs_repaired"]
    assert fix["now"] is None and "new chain" in fix["note"]
    assert _finishes(lambda: s.log(str(ws))).checkpoints == []
    snap = _finishes(lambda: s.snapshot(str(ws), "after the cut"))
    assert snap.created and s.log(str(ws)).checkpoints[0].id == snap.checkpoint


def test_the_sweep_runs_once_per_boot(store_dir, ws):
    _two_checkpoints(store_dir, ws)
    _reboot(store_dir)
    s = _next_process(store_dir)
    assert "power_cut_repair" not in s.startup                   # nothing was damaged
    marker = json.loads((store_dir / "chronos" / powercut.MARKER).read_text())
    assert marker["boot_id"] == powercut.current_boot()
    assert powercut.after_reboot(s.core.store) is None           # same boot: no second sweep


def test_a_zeroed_ref_and_a_truncated_stat_cache_are_repaired(store_dir, ws):
    svc, first, second = _two_checkpoints(store_dir, ws)
    w = svc.core.store.workspace(str(ws))
    ref = store_dir / w.ref
    ref.write_bytes(b"\0" * 41)
    index = w.gitdir / "index"
    index.write_bytes(index.read_bytes()[:20])
    _reboot(store_dir)
    s = _next_process(store_dir)
    repair = s.startup["power_cut_repair"]
    assert repair["indexes_dropped"] and repair["refs_repaired"]
    assert repair["refs_repaired"][0]["now"] in (first, second)
    (ws / "b.txt").write_text("new\n")
    snap = _finishes(lambda: s.snapshot(str(ws), "after the cut"))
    assert snap.created and s.diff(str(ws)).files == []


def test_a_damaged_pack_is_quarantined_not_read(store_dir, ws):
    svc, first, second = _two_checkpoints(store_dir, ws)
    packs = list((store_dir / "objects" / "pack").glob("*.pack"))
    assert packs, "the first snapshot is a bulk import into a pack"
    for p in packs:
        p.chmod(0o644)
        data = p.read_bytes()
        p.write_bytes(data[: len(data) - 25])
    _reboot(store_dir)
    s = _next_process(store_dir)
    assert s.startup["power_cut_repair"]["packs_quarantined"]
    _finishes(lambda: s.health(str(ws)))


def test_outside_a_reboot_a_damaged_stat_cache_is_dropped_and_rebuilt(store_dir, ws):
    svc, _first, second = _two_checkpoints(store_dir, ws)
    w = svc.core.store.workspace(str(ws))
    index = w.gitdir / "index"
    index.write_bytes(index.read_bytes()[:30])          # no reboot: nobody swept it
    s = _next_process(store_dir)
    assert s.diff(str(ws)).files == []                  # read through an empty cache: files hashed
    (ws / "a.txt").write_text("changed\n")
    snap = s.snapshot(str(ws), "after")
    assert snap.created and s.diff(str(ws), second).files[0].path == "a.txt"


def test_outside_a_reboot_a_torn_ref_reads_from_head_and_the_next_snapshot_rewrites_it(store_dir, ws):
    svc, first, second = _two_checkpoints(store_dir, ws)
    ref = store_dir / svc.core.store.workspace(str(ws)).ref
    ref.write_bytes(b"garb")
    s = _next_process(store_dir)
    assert [c.id for c in s.log(str(ws)).checkpoints] == [second, first]
    (ws / "a.txt").write_text("third\n")
    snap = s.snapshot(str(ws), "third")
    assert ref.read_text().strip() == snap.checkpoint
    assert [str(p) for p in pygit2.Repository(str(store_dir))[snap.checkpoint].parent_ids] == [second]


def test_a_store_whose_creation_was_killed_before_head_opens(tmp_path):
    """Wind tunnel random kill (seeds 10275, 10437, 10462 of the full run): a process killed while
    libgit2 created the store left objects/, refs/, config but no HEAD; the next start refused
    the folder as 'not a chronos-git store' for good."""
    root = tmp_path / "store"
    pygit2.init_repository(str(root), bare=True)
    (root / "HEAD").unlink()                 # libgit2 writes HEAD last
    (root / "chronos").mkdir()
    store = Store.open(root)
    assert (root / "HEAD").exists() and store.repo().is_bare
    foreign = tmp_path / "foreign"
    pygit2.init_repository(str(foreign), bare=True)
    (foreign / "HEAD").unlink()
    (foreign / "notes.txt").write_text("mine\n")
    with pytest.raises(StoreError, match="not a chronos-git store"):
        Store.open(foreign)
    objects = tmp_path / "with-objects"
    pygit2.init_repository(str(objects), bare=True).create_blob(b"someone's data")
    (objects / "HEAD").unlink()
    with pytest.raises(StoreError, match="not a chronos-git store"):
        Store.open(objects)


def test_a_folder_with_a_config_of_its_own_is_never_turned_into_a_store(tmp_path):
    root = tmp_path / "dotfiles"
    root.mkdir()
    (root / "config").write_text("[user]\n\tname = me\n")
    with pytest.raises(StoreError, match="not a chronos-git store"):
        Store.open(root)
    assert (root / "config").read_text() == "[user]\n\tname = me\n"


def test_a_damaged_loose_copy_of_a_packed_journal_object_is_quarantined_and_the_stat_caches_kept(
        store_dir, ws):
    svc, first, second = _two_checkpoints(store_dir, ws)
    head = svc.core.journal.head
    assert svc.core.journal.sync() is True              # packed; its loose copy deleted
    assert not _loose(store_dir, head).exists()
    # the cut lost that unlink: the copy is back, its blocks never written
    _loose(store_dir, head).write_bytes(b"\0" * 120)
    _reboot(store_dir)
    s = _next_process(store_dir)
    repair = s.startup["power_cut_repair"]
    assert repair["objects_quarantined"] == [head]
    assert repair["indexes_dropped"] == 0           # nothing was lost: the pack holds it
    assert s.journal_verify().wire()["status"] == "ok"   # the chain through `head`, from the pack
    assert pygit2.Repository(str(store_dir))[head].type == pygit2.GIT_OBJECT_COMMIT


def test_a_loose_object_found_whole_is_judged_again_once_its_file_changes(tmp_path):
    import hashlib
    import zlib

    from chronos_git.engine.powercut import loose_object_ok
    data = b"blob 6\0hello\n"
    oid = hashlib.sha1(data).hexdigest()
    path = tmp_path / oid[:2] / oid[2:]
    path.parent.mkdir()
    raw = zlib.compress(data)
    path.write_bytes(raw)
    assert loose_object_ok(path) and loose_object_ok(str(path))       # the second answer from the cache
    path.write_bytes(raw[:-3])                                          # torn: another size, a new stat
    assert not loose_object_ok(path)
    path.unlink()
    assert loose_object_ok(path)                                        # packed meanwhile
