"""Retention and compaction: what is dropped is reported, pinned checkpoints stay, git stays happy."""
from __future__ import annotations

import json
import os
import threading

import pygit2
import pytest

from chronos_git.engine import compaction, pack_builders, pack_list, reachability
from chronos_git.engine import restore as restore_mod
from chronos_git.engine import retention
from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.errors import CheckpointNotFound
from chronos_git.engine.store import Store
from support.helpers import git


def snap(store, ws, desc="t"):
    return store.workspace(ws).snapshot(CheckpointMeta(description=desc))


def make_history(store, ws, n, size=64):
    """n checkpoints, each adding a file of `size` random bytes and rewriting a.txt; returns
    ids oldest first and, per checkpoint, the blob only it holds (its a.txt)."""
    ids, blobs = [], []
    for i in range(n):
        (ws / f"f{i}.bin").write_bytes(os.urandom(size))
        text = f"version {i} {os.urandom(8).hex()}\n"
        (ws / "a.txt").write_text(text)
        ids.append(snap(store, ws, f"v{i}").checkpoint.id)
        blobs.append(str(pygit2.hash(text.encode())))
    return ids, blobs


def fsck_ok(store_dir):
    r = git("--git-dir", store_dir, "fsck", "--strict", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    r = git("--git-dir", store_dir, "log", "--all", "--format=%H %s", check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def store(store_dir):
    return Store.open(store_dir, EngineConfig(max_checkpoints=0, size_budget_mb=0))


def test_max_checkpoints_drops_oldest_and_reports_them(store, ws, store_dir):
    ids, blobs = make_history(store, ws, 6)
    w = store.workspace(ws)
    rep = compaction.compact(store, max_checkpoints=3, size_budget_bytes=0, grace_s=0)
    assert rep["dry_run"] is False
    assert len(rep["dropped"]) == 1
    d = rep["dropped"][0]
    assert d["workspace"] == str(ws) and d["workspace_id"] == w.id and d["kept"] == 3
    assert [c["id"] for c in d["checkpoints"]] == list(reversed(ids[:3]))
    assert [c["description"] for c in d["checkpoints"]] == ["v2", "v1", "v0"]
    assert isinstance(rep["size_before"], int) and isinstance(rep["size_after"], int)
    assert rep["size_after"] > 0 and rep["size_after"] == compaction.store_size(store)

    assert [c.id for c in w.checkpoints()] == list(reversed(ids[3:]))
    assert (store_dir / "shallow").read_text().split() == [ids[3]]
    log = fsck_ok(store_dir)
    for cid in ids[3:]:
        assert cid in log
    for cid in ids[:3]:
        assert cid not in log

    repo = pygit2.Repository(str(store_dir))
    for b in blobs[:3] + ids[:3]:
        assert b not in repo.odb                 # really gone (grace 0)
    for b in blobs[3:] + ids[3:]:
        assert b in repo.odb
    for cid in ids[:3]:
        with pytest.raises(CheckpointNotFound):
            w.resolve(cid)

    # the oldest kept checkpoint is complete and restorable
    restore_mod.restore(w, ids[3])
    assert (ws / "a.txt").read_text().startswith("version 3 ")
    assert sorted(p.name for p in ws.iterdir() if p.suffix == ".bin") == ["f0.bin", "f1.bin", "f2.bin", "f3.bin"]
    fsck_ok(store_dir)

    # the log of compactions says what went
    records = [json.loads(l) for l in (store_dir / "chronos" / "retention.log").read_text().splitlines()]
    decided = [r for r in records if r["phase"] == "decided"]
    assert [c["id"] for c in decided[-1]["dropped"][0]["checkpoints"]] == list(reversed(ids[:3]))
    assert records[-1]["phase"] == "done"


def test_size_budget_keeps_the_newest_that_fit(store_dir, ws):
    store = Store.open(store_dir, EngineConfig(max_checkpoints=0, size_budget_mb=0.025))   # 26214 bytes
    ids, _ = make_history(store, ws, 5, size=10_000)
    rep = compaction.compact(store, grace_s=0)                 # limits from the config
    dropped = [c["id"] for c in rep["dropped"][0]["checkpoints"]]
    assert dropped == list(reversed(ids[:3]))
    assert [c.id for c in store.workspace(ws).checkpoints()] == [ids[4], ids[3]]
    fsck_ok(store_dir)


def test_size_budget_always_keeps_the_newest(store_dir, ws):
    store = Store.open(store_dir, EngineConfig(max_checkpoints=0, size_budget_mb=0.001))
    ids, _ = make_history(store, ws, 3, size=5_000)
    compaction.compact(store, grace_s=0)
    assert [c.id for c in store.workspace(ws).checkpoints()] == [ids[2]]
    restore_mod.restore(store.workspace(ws), ids[2])
    fsck_ok(store_dir)


def test_pinned_checkpoints_are_kept(store, ws, store_dir):
    ids, _ = make_history(store, ws, 5)
    w = store.workspace(ws)
    rep = compaction.compact(store, pinned={ids[0]}, max_checkpoints=1, grace_s=0)
    assert rep["dropped"] == []
    assert [c.id for c in w.checkpoints()] == list(reversed(ids))

    rep = compaction.compact(store, pinned={ids[2]}, max_checkpoints=1, grace_s=0)
    assert [c["id"] for c in rep["dropped"][0]["checkpoints"]] == [ids[1], ids[0]]
    assert [c.id for c in w.checkpoints()] == [ids[4], ids[3], ids[2]]
    fsck_ok(store_dir)
    restore_mod.restore(w, ids[2])
    assert (ws / "a.txt").read_text().startswith("version 2 ")
    assert not (ws / "f3.bin").exists()


def test_dry_run_compaction_changes_nothing(store, ws, store_dir):
    ids, _ = make_history(store, ws, 4)
    objects_before = sorted(str(p) for p in (store_dir / "objects").rglob("*") if p.is_file())
    rep = compaction.compact(store, max_checkpoints=1, grace_s=0, dry_run=True)
    assert rep["dry_run"] is True
    assert [c["id"] for c in rep["dropped"][0]["checkpoints"]] == list(reversed(ids[:3]))
    assert sorted(str(p) for p in (store_dir / "objects").rglob("*") if p.is_file()) == objects_before
    assert not (store_dir / "shallow").exists()
    assert len(store.workspace(ws).checkpoints()) == 4


def test_retention_is_per_workspace_and_repeatable(store, ws, tmp_path, store_dir):
    ws2 = tmp_path / "ws2"
    ws2.mkdir()
    ids1, _ = make_history(store, ws, 4)
    ids2, _ = make_history(store, ws2, 2)
    rep = compaction.compact(store, max_checkpoints=2, grace_s=0)
    assert [d["workspace"] for d in rep["dropped"]] == [str(ws)]
    assert [c.id for c in store.workspace(ws2).checkpoints()] == list(reversed(ids2))
    fsck_ok(store_dir)

    # keep working on top of the cut, compact again: the old boundary goes, the new one stays
    more, _ = make_history(store, ws, 2)
    (ws2 / "late.txt").write_text("late\n")
    late = snap(store, ws2).checkpoint.id
    rep = compaction.compact(store, max_checkpoints=2, grace_s=0)
    by_ws = {d["workspace"]: [c["id"] for c in d["checkpoints"]] for d in rep["dropped"]}
    assert by_ws == {str(ws): [ids1[3], ids1[2]], str(ws2): [ids2[0]]}
    assert sorted((store_dir / "shallow").read_text().split()) == sorted([more[0], ids2[1]])
    assert [c.id for c in store.workspace(ws).checkpoints()] == [more[1], more[0]]
    assert [c.id for c in store.workspace(ws2).checkpoints()] == [late, ids2[1]]
    fsck_ok(store_dir)
    # an unchanged workspace still reuses its checkpoint: the index survived compaction
    again = snap(store, ws)
    assert again.created is False and again.checkpoint.id == more[1]
    # and new checkpoints chain onto the kept ones
    (ws / "a.txt").write_text("after compaction\n")
    new = snap(store, ws)
    assert new.created and new.checkpoint.parent_id == more[1]
    fsck_ok(store_dir)


def test_compaction_while_snapshots_run(store, ws, store_dir):
    make_history(store, ws, 4)
    errors: list[BaseException] = []
    created: list[str] = []
    stop = threading.Event()

    def writer():
        i = 0
        try:
            while not stop.is_set() and i < 40:
                i += 1
                (ws / "live.txt").write_text(f"live {i}\n")
                r = snap(store, ws, f"live {i}")
                if r.created:
                    created.append(r.checkpoint.id)
        except BaseException as exc:   # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    reports = [compaction.compact(store, max_checkpoints=5, grace_s=0) for _ in range(3)]
    stop.set()
    t.join()
    assert not errors, errors
    assert all(r["size_after"] > 0 for r in reports)
    fsck_ok(store_dir)
    kept = [c.id for c in store.workspace(ws).checkpoints()]
    assert kept[0] == created[-1]
    # every kept checkpoint is complete
    repo = pygit2.Repository(str(store_dir))
    for cid in kept:
        for entry in repo[cid].tree:
            assert entry.id in repo.odb


def test_service_compacts_automatically_past_the_limit(svc, ws, store_dir):
    s = svc(max_checkpoints=2, compact_grace_s=0)
    for i in range(13):                      # limit 2 + slack 10: the 13th snapshot compacts
        (ws / "a.txt").write_text(f"{i}\n")
        s.snapshot(str(ws), f"s{i}")
    rows = s.log(str(ws), None).wire()["checkpoints"]
    assert [r["description"] for r in rows] == ["s12", "s11"]
    fsck_ok(store_dir)
    events = s.journal_log(None).wire()["events"]
    maint = [e for e in events if e.get("kind") == "maintenance"]
    retention = [e for e in maint if e["action"] == "retention"]
    assert retention and retention[0]["dropped"][0]["checkpoints"]
    assert any(e["action"] == "compact" for e in maint)


@pytest.mark.process
@pytest.mark.parametrize("other_process", [False, True])
def test_content_equal_to_pruned_objects_is_written_again_after_a_compaction(tmp_path, ws, other_process):
    """Regression (wind tunnel, random kill seeds 10000/10004): libgit2 keeps a deleted
    pack's index in memory, so a handle opened before a compaction believed pruned
    objects still existed and skipped writing them; a checkpoint whose content equalled
    a pruned one then named a missing tree, and its restore failed."""
    import subprocess
    import sys
    cfg = EngineConfig(max_checkpoints=1, compact_grace_s=0)
    store = Store.open(tmp_path / "store", cfg)
    (ws / "docs").mkdir()
    (ws / "docs" / "old.txt").write_text("the old state\n")
    snap(store, ws, "old state")                        # its docs/ tree and blob are packed later
    (ws / "docs" / "old.txt").write_text("a new state\n")
    snap(store, ws, "new state")
    if other_process:                                   # the compaction runs elsewhere
        code = ("import sys; from chronos_git.engine.store import Store; from chronos_git.engine import compaction;"
                "from chronos_git.engine.config import EngineConfig;"
                "s = Store.open(sys.argv[1], EngineConfig(max_checkpoints=1, compact_grace_s=0));"
                "compaction.compact(s, grace_s=0)")
        subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], check=True)
    else:
        compaction.compact(store, grace_s=0)
    (ws / "docs" / "old.txt").write_text("the old state\n")   # back to content that was pruned
    cid = snap(store, ws, "old state again").checkpoint.id
    fsck = subprocess.run(["git", f"--git-dir={tmp_path / 'store'}", "fsck", "--strict", "--no-dangling"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    repo = pygit2.Repository(str(tmp_path / "store"))
    assert repo[repo[cid].tree["docs"].id]["old.txt"].data == b"the old state\n"


def _kept_bytes(store):
    return sum(retention.added_bytes(c) for w in store.workspaces() for c in w.iter_commits())


def test_store_budget_drops_oldest_across_workspaces_and_keeps_each_newest(store, ws, tmp_path, store_dir):
    other = tmp_path / "other"
    other.mkdir()
    a_ids, _ = make_history(store, ws, 4, size=4000)
    b_ids, _ = make_history(store, other, 4, size=4000)
    before = _kept_bytes(store)
    assert before > 32000
    dry = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, store_budget_bytes=14000,
                             dry_run=True)
    assert _kept_bytes(store) == before and sum(len(d["checkpoints"]) for d in dry["dropped"]) >= 4
    rep = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, store_budget_bytes=14000, grace_s=0)
    assert rep["store_budget_kept_bytes"] <= 14000 and _kept_bytes(store) <= 14000
    assert [d["checkpoints"] for d in rep["dropped"]] == [d["checkpoints"] for d in dry["dropped"]]
    for w, ids in ((store.workspace(ws), a_ids), (store.workspace(other), b_ids)):
        kept = [str(c.id) for c in w.iter_commits()]
        assert kept[0] == ids[-1] and kept == list(reversed(ids))[:len(kept)]   # newest first, oldest cut
    fsck_ok(store_dir)


def test_store_budget_never_drops_pinned(store, ws, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    a_ids, _ = make_history(store, ws, 4, size=4000)
    make_history(store, other, 4, size=4000)
    compaction.compact(store, pinned={a_ids[0]}, max_checkpoints=0, size_budget_bytes=0,
                       store_budget_bytes=14000, grace_s=0)
    assert [str(c.id) for c in store.workspace(ws).iter_commits()] == list(reversed(a_ids))
    assert len(list(store.workspace(other).iter_commits())) == 1     # the rest of the budget went here


def test_orphaned_workspace_pruned_after_its_days_unless_pinned(store, ws, tmp_path, store_dir):
    import shutil
    import time
    gone = tmp_path / "gone"
    gone.mkdir()
    g_ids, g_blobs = make_history(store, gone, 3)
    ids, _ = make_history(store, ws, 2)
    shutil.rmtree(gone)
    missing = retention.note_missing(store, now=time.time() - 3 * 86400)   # first seen gone 3 days ago
    assert list(missing) == [store.workspace(gone).id]
    assert compaction.compact(store, orphan_s=5 * 86400, dry_run=True)["pruned"] == []
    pinned = compaction.compact(store, orphan_s=2 * 86400, pinned={g_ids[1]}, grace_s=0)
    assert pinned["pruned"] == [] and len(store.workspaces()) == 2
    dry = compaction.compact(store, orphan_s=2 * 86400, dry_run=True)
    assert [(p["workspace"], p["checkpoints"]) for p in dry["pruned"]] == [(str(gone), 3)]
    rep = compaction.compact(store, orphan_s=2 * 86400, grace_s=0)
    assert [p["workspace"] for p in rep["pruned"]] == [str(gone)]
    assert [os.fsdecode(w.root_bytes) for w in store.workspaces()] == [str(ws)]
    repo = pygit2.Repository(str(store_dir))
    assert not any(r.endswith(store.workspace(gone).id) for r in repo.references)
    assert g_blobs[0] not in repo and [str(c.id) for c in store.workspace(ws).iter_commits()] == ids[::-1]
    assert retention.note_missing(store) == {}
    fsck_ok(store_dir)


def test_a_folder_that_comes_back_restarts_its_clock(store, ws, tmp_path):
    import time
    d = tmp_path / "back"
    d.mkdir()
    make_history(store, d, 1)
    os.rename(d, tmp_path / "away")
    retention.note_missing(store, now=time.time() - 10 * 86400)
    os.rename(tmp_path / "away", d)
    assert retention.note_missing(store) == {}
    assert compaction.compact(store, orphan_s=86400, grace_s=0)["pruned"] == []


def test_service_journals_the_pruning_and_health_shows_the_budget(svc, ws, tmp_path):
    import shutil
    import time
    s = svc(orphan_days=1, store_budget_mb=1)
    gone = tmp_path / "gone2"
    gone.mkdir()
    (gone / "x.txt").write_text("x")
    s.snapshot(str(gone), "one")
    s.snapshot(str(ws), "mine")
    shutil.rmtree(gone)
    retention.note_missing(s.core.store, now=time.time() - 2 * 86400)
    h = s.health(str(ws))
    assert h.store_budget.orphans == 1 and h.store_budget.budget_bytes == 1024 * 1024
    assert 0 < h.store_budget.used_bytes < 1024 * 1024
    assert s.maintenance.store_due() is not None
    res = s.compact()
    assert [p.workspace for p in res.pruned] == [str(gone)]
    ev = [e for e in s.core.journal.events(None) if e.get("action") == "prune_orphans"]
    assert len(ev) == 1 and ev[0]["pruned"][0]["workspace"] == str(gone)
    assert s.maintenance.store_due() is None


def test_after_a_turn_the_check_and_the_compaction_run_on_a_thread(svc, ws, tmp_path):
    import shutil
    import time
    s = svc(orphan_days=1)
    s.snapshot(str(ws), "mine")
    assert s.maintenance.compact_in_background_if_due()          # a check started: not due
    s.core.jobs.wait("compact", 30)
    assert not [e for e in s.core.journal.events(None) if e.get("action") == "prune_orphans"]
    gone = tmp_path / "gone3"
    gone.mkdir()
    (gone / "x.txt").write_text("x")
    s.snapshot(str(gone), "one")
    shutil.rmtree(gone)
    retention.note_missing(s.core.store, now=time.time() - 2 * 86400)
    assert s.maintenance.compact_in_background_if_due()
    s.core.jobs.wait("compact", 60)
    ev = [e for e in s.core.journal.events(None) if e.get("action") == "prune_orphans"]
    assert len(ev) == 1 and ev[0]["pruned"][0]["workspace"] == str(gone)


def _packs(store_dir):
    return sorted(p.stem for p in (store_dir / "objects" / "pack").glob("pack-*.pack"))


def test_geometric_compaction_keeps_a_compacted_pack_and_packs_only_what_is_new(store, ws, store_dir, monkeypatch):
    monkeypatch.setattr(pack_list, "KEEP_BYTES", 0)
    ids, blobs = make_history(store, ws, 6, size=2000)
    first = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert first["packs_kept"] == 0
    big = _packs(store_dir)
    assert len(big) == 1 and pack_list.compacted_packs(store) == set(big)
    more, more_blobs = make_history(store, ws, 2, size=2000)
    second = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert second["packs_kept"] == 1 and second["objects_packed"] < first["objects_packed"] / 2
    now = _packs(store_dir)
    assert big[0] in now and len(now) == 2 and pack_list.compacted_packs(store) == set(now)
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in blobs + more_blobs)
    fsck_ok(store_dir)
    # a retention cut that leaves most of the kept pack unreachable rewrites it
    third = compaction.compact(store, max_checkpoints=1, size_budget_bytes=0, grace_s=0)
    assert third["packs_kept"] == 0 and big[0] not in _packs(store_dir)
    repo = pygit2.Repository(str(store_dir))
    assert more_blobs[-1] in repo and blobs[0] not in repo
    fsck_ok(store_dir)


def test_an_adopted_clone_pack_is_kept_by_compaction(tmp_path, monkeypatch):
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    monkeypatch.setattr(pack_list, "KEEP_BYTES", 0)
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(30):
        (ws / f"f{i}.txt").write_text(f"{i}\n" * (i + 1))
        st = (ws / f"f{i}.txt").stat()          # older than git's index, whatever the clock's tick:
        os.utime(ws / f"f{i}.txt", ns=(st.st_atime_ns, st.st_mtime_ns - 2_000_000_000))  # not racily clean
    git("init", "-q", cwd=ws)
    git("add", "-A", cwd=ws)
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "c", cwd=ws)
    git("gc", "-q", cwd=ws)
    svc = Chronos.get(tmp_path / "store", Settings(max_checkpoints=0, size_budget_mb=0))
    svc.snapshot(str(ws), "first")
    out = svc.consolidate()
    assert out.adopted == 1
    adopted = set(pack_list.compacted_packs(svc.core.store))
    assert len(adopted) == 1
    (ws / "f0.txt").write_text("changed\n")
    svc.snapshot(str(ws), "second")
    rep = svc.compact(grace_s=0)
    assert rep.packs_kept == 1 and adopted <= set(_packs(tmp_path / "store"))
    fsck_ok(tmp_path / "store")


def _delta_blobs(store_dir) -> tuple[int, int]:
    """(blobs stored as deltas, blobs) over every pack of the store, as git reads them."""
    deltas = blobs = 0
    for idx in (store_dir / "objects" / "pack").glob("pack-*.idx"):
        out = git("verify-pack", "-v", idx).stdout
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 5 and cols[1] == "blob":
                blobs += 1
                deltas += len(cols) >= 7          # "depth base" follow a delta
    return deltas, blobs


def test_compaction_tells_the_delta_search_each_blob_s_name(store, ws, store_dir):
    """Two versions of 150 files, all of one size: only the name says which blobs belong
    together (git's rule), so nearly every second version packs as a delta of its first."""
    _two_versions_of_150_names(store, ws)
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    fsck_ok(store_dir)
    deltas, blobs = _delta_blobs(store_dir)
    assert blobs >= 300
    assert deltas >= 0.9 * 150, (deltas, blobs)


def test_the_bounded_pack_builder_still_deltifies_a_large_file(store, ws, store_dir):
    """libgit2 takes pack.deltaCacheSize as its big-file threshold too: the bound must stay
    above the largest file a checkpoint keeps, or every version of a big file is stored whole."""
    cfg = pygit2.Repository(str(store_dir)).config
    assert cfg["pack.deltaCacheSize"] == "64m" and cfg["pack.windowMemory"] == "32m"
    body = bytearray(os.urandom(20 << 20))
    (ws / "big.db").write_bytes(body)
    snap(store, ws, "v1")
    body[12345] ^= 0xFF
    (ws / "big.db").write_bytes(body)
    snap(store, ws, "v2")
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    deltas, _blobs = _delta_blobs(store_dir)
    assert deltas >= 1
    assert compaction.store_size(store) < 30 << 20         # one copy of the file, not two


def _two_versions_of_150_names(store, ws):
    """Two versions of 150 files of one size (the second one byte changed): only a blob's
    name says which belong together.  Returns the second versions' ids."""
    import random
    rnd = random.Random(11)
    bodies = {f"m{i:03d}.dat": bytearray(rnd.randbytes(4096)) for i in range(150)}
    for i, (name, body) in enumerate(bodies.items()):
        (ws / f"d{i}").mkdir()
        (ws / f"d{i}" / name).write_bytes(body)
    snap(store, ws, "v1")
    for i, (name, body) in enumerate(bodies.items()):
        body[rnd.randrange(4096)] ^= 0xFF          # same size, one byte changed
        (ws / f"d{i}" / name).write_bytes(body)
    snap(store, ws, "v2")
    return [str(pygit2.hash(bytes(b))) for b in bodies.values()]


def test_a_big_compaction_packs_in_parts_that_keep_their_deltas(store, ws, store_dir, monkeypatch):
    """Past PART_MIN_BYTES, one builder per core packs a run of the delta search's order: the
    parts are cut only between names, so the deltas survive, and later compactions keep them."""
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    monkeypatch.setattr(pack_builders, "_cores", lambda: 2)
    latest = _two_versions_of_150_names(store, ws)
    rep = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    parts = _packs(store_dir)
    assert 1 < len(parts) <= len(pack_builders._shares(2))
    assert pack_list.compacted_packs(store) == set(parts)
    assert not list((store_dir / "objects" / "pack").glob("tmp-compact-*"))
    fsck_ok(store_dir)
    deltas, blobs = _delta_blobs(store_dir)
    assert blobs >= 300 and deltas >= 0.9 * 150, (deltas, blobs)
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in latest)
    held = [(store_dir / "objects" / "pack" / f"{p}.idx").read_bytes()[8 + 255 * 4:8 + 256 * 4] for p in parts]
    assert rep["objects_packed"] == sum(int.from_bytes(n, "big") for n in held)     # each object once
    # the parts are kept by the next compaction below KEEP_BYTES (which is for single packs)
    monkeypatch.setattr(pack_list, "PART_KEEP_BYTES", 0)
    assert all((store_dir / "objects" / "pack" / f"{p}.pack").stat().st_size < pack_list.KEEP_BYTES for p in parts)
    (ws / "d0" / "new.txt").write_text("one more\n")
    snap(store, ws, "v3")
    again = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert again["packs_kept"] == len(parts) and set(parts) <= set(_packs(store_dir))
    assert again["objects_packed"] < 10
    fsck_ok(store_dir)


def test_parts_are_runs_of_the_delta_order_cut_between_names(store, ws, store_dir, monkeypatch):
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    for i in range(40):
        (ws / f"same{i % 4}").mkdir(exist_ok=True)
        (ws / f"same{i % 4}" / f"n{i % 10}.c").write_bytes(os.urandom(100 + 50 * i))
    cp = snap(store, ws, "v1").checkpoint.id
    repo = pygit2.Repository(str(store_dir))
    names: dict = {}
    oids = reachability.walk(repo, [pygit2.Oid(hex=cp)], [], set(), names)
    parts = pack_builders._parts(repo, oids, names, pack_builders._shares(2))
    assert len(parts) > 1
    assert sorted(o.raw for p in parts for o in p) == sorted(o.raw for o in oids)
    key = {o: (int(repo.odb.read_header(o)[0]), pack_builders._name_hash(names.get(o))) for o in oids}
    owner = {}
    for n, part in enumerate(parts):
        for o in part:
            assert owner.setdefault(key[o], n) == n, "one name's objects split over two parts"
    # git's name hash: only the last 16 characters count, whitespace not at all
    assert pack_builders._name_hash(b"drivers/x/" + b"sixteen-chars..c") == pack_builders._name_hash(b"fs/" + b"sixteen-chars..c")
    assert pack_builders._name_hash(b"a.c") != pack_builders._name_hash(b"a.h")
    assert pack_builders._name_hash(b"a b.c") == pack_builders._name_hash(b"ab.c")
    # below the bound, one part
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 1 << 40)
    assert pack_builders._parts(repo, oids, names, pack_builders._shares(2)) == [oids]


def test_a_part_that_fails_fails_the_compaction_and_loses_nothing(store, ws, store_dir, monkeypatch):
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    monkeypatch.setattr(pack_builders, "_cores", lambda: 2)
    latest = _two_versions_of_150_names(store, ws)
    before = sorted(p.name for p in (store_dir / "objects").rglob("*") if p.is_file())
    real, calls = pack_builders._build, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise pygit2.GitError("disk full (injected)")
        return real(*a, **k)
    monkeypatch.setattr(pack_builders, "_build", flaky)
    with pytest.raises(pygit2.GitError, match="injected"):
        compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    after = sorted(p.name for p in (store_dir / "objects").rglob("*") if p.is_file())
    assert after == before                  # nothing deleted, no part left behind
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in latest)
    monkeypatch.setattr(pack_builders, "_build", real)
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    fsck_ok(store_dir)


def test_a_packing_in_parts_cut_off_between_a_pack_and_its_index_loses_nothing(store, ws, store_dir, monkeypatch):
    """The disk fails right after the first part's pack is renamed into place (as a crash
    there leaves it): nothing was deleted, and the next compaction sweeps the lone pack."""
    from chronos_git.engine import faults
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    monkeypatch.setattr(pack_builders, "_cores", lambda: 2)
    latest = _two_versions_of_150_names(store, ws)
    monkeypatch.setattr(faults, "_ARMED", ("compact_pack_before_idx", 1, "enospc"))
    monkeypatch.setattr(faults, "_hits", 0)
    with pytest.raises(OSError):
        compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    pack_dir = store_dir / "objects" / "pack"
    lone = [p for p in pack_dir.glob("pack-*.pack") if not p.with_suffix(".idx").exists()]
    assert len(lone) == 1
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in latest)
    monkeypatch.setattr(faults, "_ARMED", None)
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert [p for p in pack_dir.glob("pack-*.pack") if not p.with_suffix(".idx").exists()] == []
    assert len(_packs(store_dir)) > 1
    fsck_ok(store_dir)
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in latest)


def test_builders_run_at_once_and_no_part_is_a_crumb(store, ws, store_dir, monkeypatch):
    """One name far bigger than a part's share makes one big part, not a trail of one-name
    parts after it; the parts are built at the same time (a barrier that two sequential
    builds would break)."""
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    monkeypatch.setattr(pack_builders, "_cores", lambda: 2)
    (ws / "big").mkdir()
    for v in range(6):
        (ws / "big" / "log.bin").write_bytes(os.urandom(40_000))
        snap(store, ws, f"big {v}")
    for i in range(60):
        (ws / f"small{i:02d}.txt").write_bytes(os.urandom(900))
    cp = snap(store, ws, "small").checkpoint.id
    repo = pygit2.Repository(str(store_dir))
    names: dict = {}
    oids = reachability.walk(repo, [pygit2.Oid(hex=cp)], [], set(), names)
    parts = pack_builders._parts(repo, oids, names, pack_builders._shares(2))
    sizes = [sum(repo.odb.read_header(o)[1] for o in p) for p in parts]
    assert len(parts) > 1 and min(sizes) >= min(pack_builders._shares(2)) / 2 * sum(sizes), sizes
    barrier = threading.Barrier(2, timeout=20)
    real, started = pack_builders._build, []

    def together(*a, **k):
        started.append(1)
        if len(started) <= 2:
            barrier.wait()               # BrokenBarrierError if the second never comes
        return real(*a, **k)
    monkeypatch.setattr(pack_builders, "_build", together)
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert len(started) == len(_packs(store_dir)) > 1
    fsck_ok(store_dir)


def test_an_object_above_the_solo_bound_packs_with_one_builder(store, ws, store_dir, monkeypatch):
    monkeypatch.setattr(pack_builders, "PART_MIN_BYTES", 0)
    monkeypatch.setattr(pack_builders, "SOLO_OBJECT_BYTES", 50_000)
    monkeypatch.setattr(pack_builders, "_cores", lambda: 2)
    _two_versions_of_150_names(store, ws)
    (ws / "big.bin").write_bytes(os.urandom(60_000))
    snap(store, ws, "big")
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert len(_packs(store_dir)) == 1
    fsck_ok(store_dir)


@pytest.mark.parametrize("doc", ['{"compacted": null, "parts": 5}', '{"compacted": "pack-x", "parts": null}',
                                 '[1, 2]', '{"parts": {"a": 1}}', 'not json'])
def test_a_damaged_pack_list_only_means_packing_again(store, ws, store_dir, doc):
    make_history(store, ws, 3)
    compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    pack_list.packs_list_path(store).write_text(doc)
    ids, blobs = make_history(store, ws, 2)
    rep = compaction.compact(store, max_checkpoints=0, size_budget_bytes=0, grace_s=0)
    assert rep["packs_kept"] == 0
    repo = pygit2.Repository(str(store_dir))
    assert all(b in repo for b in blobs)
    fsck_ok(store_dir)


def test_the_small_packs_of_the_journals_syncs_call_for_a_compaction_that_merges_them(svc, ws):
    from support.helpers import run_command
    s = svc()
    for i in range(pack_list.SMALL_PACKS_DUE):
        assert run_command(s, ws, ["true"])[0] == 0
        assert s.core.journal.sync() is True            # one small durable pack each
    assert pack_list.small_packs(s.core.store) >= pack_list.SMALL_PACKS_DUE
    assert "small packs" in (s.maintenance.store_due() or "")
    s.compact()
    assert pack_list.small_packs(s.core.store) == 0 and s.maintenance.store_due() is None
    assert s.journal_verify().wire()["status"] == "ok"
