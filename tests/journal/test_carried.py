"""Objects the witness carries until they are synced: what a power cut takes of them (and of
the journal ref) comes back at the next start; the same damage without a reboot is tampering."""
from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
import zlib

import pygit2
import pytest

from chronos_git.journal_refs import carried
from chronos_git.journal_refs.journal import REF
from chronos_git.journal_refs.witness import read_doc, write_doc

from support.helpers import run_command, wait_for


def witness(store_dir) -> dict:
    return json.loads(read_doc(store_dir.parent / (store_dir.name + ".journal-witness.json")))


def chain(store_dir) -> list[str]:
    repo = pygit2.Repository(str(store_dir))
    out, cid = [], repo.references[REF].target
    while cid is not None:
        out.append(str(cid))
        c = repo[cid]
        cid = c.parent_ids[0] if c.parent_ids else None
    return out


def reboot(store_dir) -> None:
    """The machine restarted: the boot the marker and the witness recorded is not this one."""
    from chronos_git.windtunnel.power import reboot as windtunnel_reboot
    windtunnel_reboot(store_dir)


def zero(path) -> None:
    path.chmod(0o644)
    path.write_bytes(b"\0" * path.stat().st_size)


@pytest.fixture
def journal(svc, ws, store_dir):
    s = svc()
    for _ in range(3):
        assert run_command(s, ws, ["true"])[0] == 0
    s.flush()
    return s


def test_an_append_fsyncs_only_the_witness_which_carries_the_new_objects(journal, store_dir):
    w = witness(store_dir)
    head = chain(store_dir)
    assert w["head"] == head[0] and w["seq"] == 6
    # every event since the last sync is carried: its commit, tree and state blob
    assert set(head) <= set(w["carried"])
    for oid, text in w["carried"].items():
        assert carried.decode(oid, text)


@pytest.mark.fsync
def test_sync_packs_what_is_carried_with_a_few_fsyncs_and_stops_carrying_it(journal, store_dir,
                                                                            monkeypatch):
    carry = witness(store_dir)["carried"]
    pack_dir = store_dir / "objects" / "pack"
    before = set(pack_dir.glob("pack-*.idx"))
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    assert journal.core.journal.sync() is True
    monkeypatch.undo()
    # pack, .idx, their directory, the ref (and packed-refs) and its directory: not one per
    # object and fan-out directory
    assert len(synced) <= 7 < len(carry)
    w = witness(store_dir)
    assert "carried" not in w and w["head"] == chain(store_dir)[0]
    (new_idx,) = set(pack_dir.glob("pack-*.idx")) - before
    packed = {str(e) for e in pygit2.Repository(str(store_dir)).odb}
    assert set(carry) <= packed
    for oid in carry:                                   # the loose copies went; libgit2 reads the pack
        assert not (store_dir / "objects" / oid[:2] / oid[2:]).exists()
    repo = pygit2.Repository(str(store_dir))
    for oid, text in carry.items():                     # the same objects, read from the pack
        assert zlib.decompress(carried.loose_bytes(repo, oid)) == zlib.decompress(carried.decode(oid, text))
    assert new_idx.stat().st_mode & 0o222 == 0
    assert journal.core.journal.sync() is False             # nothing left to sync
    assert journal.journal_verify().wire()["status"] == "ok"


def test_a_carried_object_the_witness_cannot_decode_is_synced_where_it_is(journal, store_dir):
    carry = dict(witness(store_dir)["carried"])
    oid = next(iter(carry))
    carry[oid] = "not base64 of that object"
    carried.sync(store_dir, REF, carry)
    assert (store_dir / "objects" / oid[:2] / oid[2:]).exists()     # left loose (and fsynced)
    others = set(carry) - {oid}
    assert not any((store_dir / "objects" / o[:2] / o[2:]).exists() for o in others)


def test_the_witness_carries_a_bounded_number_of_objects(svc, ws, store_dir):
    s = svc()
    sizes = []
    for _ in range(carried.CAP_OBJECTS // 4 + 4):
        assert run_command(s, ws, ["true"])[0] == 0
        sizes.append(len(witness(store_dir).get("carried", {})))
    assert max(sizes) <= carried.CAP_OBJECTS
    assert min(sizes[-10:]) < max(sizes)               # an append synced and started over
    assert s.journal_verify().wire()["status"] == "ok"


def test_a_power_cut_that_took_carried_objects_and_the_refs_last_updates_is_repaired(journal, cli,
                                                                                     store_dir):
    ids = chain(store_dir)                              # newest first
    objects = store_dir / "objects"
    # the cut: the last three events' commits zeroed or gone, the ref back four events
    for k, oid in enumerate(ids[:3]):
        p = objects / oid[:2] / oid[2:]
        if k % 2:
            p.unlink()
        else:
            zero(p)
    (store_dir / REF).write_text(ids[4] + "\n")
    reboot(store_dir)
    st = cli("journal", "status", "--json").json
    assert st["integrity"] == "ok", st
    assert "written back" in st["healed"] and "moved forward" in st["healed"]
    # every event is back (the sweep's power_cut_repair event follows them)
    assert set(ids) <= set(chain(store_dir))
    v = cli("journal", "verify", "--json")
    assert v.rc == 0 and v.json["events"] >= 7, v.stdout


def test_a_power_cut_that_left_the_ref_unreadable_is_repaired(journal, cli, store_dir):
    head = chain(store_dir)[0]
    (store_dir / REF).write_bytes(b"")
    reboot(store_dir)
    st = cli("journal", "status", "--json").json
    assert st["integrity"] == "ok" and "unreadable" in st["healed"], st
    assert head in chain(store_dir)
    assert cli("journal", "verify", "--json").rc == 0


def test_the_same_damage_without_a_reboot_is_tampering(journal, cli, store_dir):
    ids = chain(store_dir)
    (store_dir / REF).write_text(ids[2] + "\n")          # two events back: no crash does that
    assert cli("journal", "verify", "--json").rc == 1
    st = cli("journal", "status", "--json").json
    assert st["integrity"] != "ok" and "rolled back" in st["integrity"]


def test_a_deleted_carried_object_without_a_reboot_is_not_written_back(journal, cli, store_dir):
    victim = chain(store_dir)[3]
    (store_dir / "objects" / victim[:2] / victim[2:]).unlink()
    v = cli("journal", "verify", "--json")
    assert v.rc == 1 and "broken" in v.json["integrity"]


def test_a_carried_object_edited_in_the_witness_closes_the_gate(journal, cli, store_dir):
    path = store_dir.parent / (store_dir.name + ".journal-witness.json")
    w = witness(store_dir)
    oid = next(iter(w["carried"]))
    w["carried"][oid] = carried.encode(b"x")
    write_doc(path, json.dumps(w).encode())
    st = cli("journal", "status", "--json").json
    assert st["integrity"] != "ok" and "not valid" in st["integrity"]


def test_the_write_back_does_not_depend_on_the_stores_boot_marker(journal, cli, store_dir):
    """A first start after the reboot swept the store (marker now says this boot) and was killed
    before its journal opened: the next start still writes back what the witness carries."""
    ids = chain(store_dir)
    victim = store_dir / "objects" / ids[1][:2] / ids[1][2:]
    victim.unlink()
    reboot(store_dir)
    from chronos_git.engine.powercut import current_boot
    (store_dir / "chronos" / "boot.json").write_text(json.dumps({"boot_id": current_boot()}))
    st = cli("journal", "status", "--json").json
    assert st["integrity"] == "ok" and "written back" in st["healed"], st
    assert cli("journal", "verify", "--json").rc == 0


def test_a_witness_naming_a_tree_is_a_clear_integrity_error(journal, cli, store_dir):
    path = store_dir.parent / (store_dir.name + ".journal-witness.json")
    w = witness(store_dir)
    tree = str(pygit2.Repository(str(store_dir))[chain(store_dir)[1]].tree_id)
    w["head"] = tree
    write_doc(path, json.dumps(w).encode())
    v = cli("journal", "verify", "--json")
    assert v.rc == 1 and v.json["status"] == "error" and "Traceback" not in v.stderr, v.stderr
    st = cli("journal", "status", "--json")
    assert st.json["integrity"] != "ok" and "Traceback" not in st.stderr, st.stderr


def test_sync_leaves_everything_carried_while_the_ref_lags(journal, store_dir):
    ids = chain(store_dir)
    (store_dir / REF).write_text(ids[1] + "\n")           # a crash between witness and ref
    before = witness(store_dir)["carried"]
    assert journal.core.journal.sync() is False
    assert witness(store_dir)["carried"] == before


def test_big_linked_blobs_keep_the_witness_small(svc, ws, store_dir):
    s = svc()
    for i in range(12):                                  # incompressible, just under MAX_BLOB
        s.write_file(str(ws), f"big{i}.bin", os.urandom(60_000))
    path = store_dir.parent / (store_dir.name + ".journal-witness.json")
    assert len(read_doc(path)) < 320 * 1024                # 12 × 80 KiB without the byte cap
    assert path.stat().st_size <= 2 * 512 * 1024           # two slots, each a power of two
    assert s.journal_verify().wire()["status"] == "ok"


def test_a_journal_ref_naming_a_tree_is_an_integrity_error(journal, cli, store_dir):
    tree = str(pygit2.Repository(str(store_dir))[chain(store_dir)[0]].tree_id)
    (store_dir / REF).write_text(tree + "\n")
    v = cli("journal", "verify", "--json")
    assert v.rc == 1 and v.json.get("code") != "internal" and v.json["integrity"] != "ok", v.stdout
    assert "not a journal event" in v.json["integrity"]
    st = cli("journal", "status", "--json").json
    assert "not a journal event" in st["integrity"] and "attribute" not in st["integrity"]


def test_a_packed_pre_image_is_not_carried_its_pack_is_made_durable(svc, ws, store_dir, monkeypatch):
    """A file call links its pre- and post-image.  A pre-image already in a pack (the first
    snapshot's, a compaction's) does not ride along in every witness record until the next
    sync: its pack is fsynced instead; the new post-image, loose, is carried as its file holds it."""
    from chronos_git.engine import durability
    old = os.urandom(20_000).hex().encode()            # compressible, under MAX_BLOB
    (ws / "f.txt").write_bytes(old)
    s = svc()
    s.snapshot(str(ws), "first")
    s.compact(grace_s=0)                                # everything packed
    s2 = svc()
    pre = str(pygit2.hash(old))
    repo = pygit2.Repository(str(store_dir))
    assert not (store_dir / "objects" / pre[:2] / pre[2:]).exists() and pre in repo.odb
    synced = []
    real = durability.fsync_file
    monkeypatch.setattr(durability, "fsync_file", lambda p: synced.append(str(p)) or real(p))
    new = old + b"\nmore\n"
    s2.write_file(str(ws), "f.txt", new)
    post = str(pygit2.hash(new))
    w = witness(store_dir)
    assert post in w["carried"] and pre not in w["carried"]
    loose_file = store_dir / "objects" / post[:2] / post[2:]
    assert carried.decode(post, w["carried"][post]) == loose_file.read_bytes()
    event = pygit2.Repository(str(store_dir))[w["head"]]
    started = [c for c in [event] + list(event.parents) if "started" in c.message.split("\n")[0]]
    assert pre in {str(e.id) for c in started for e in c.tree}     # still linked by the event
    assert any(p.endswith(".pack") for p in synced)                 # ... and durable in its pack
    assert s2.journal_verify().wire()["status"] == "ok"


def _bare(tmp_path, name="s"):
    d = tmp_path / name
    pygit2.init_repository(str(d), bare=True)
    return d


def test_a_pack_written_again_at_a_path_once_fsynced_is_fsynced_again(tmp_path, monkeypatch):
    """A compaction deletes a pack; the same bytes come back (same name), written without an
    fsync: an event that links a blob in it must not count on the first file's fsync."""
    from chronos_git.engine import durability
    from chronos_git.engine.pack_writer import pack_entry, write_pack
    d = _bare(tmp_path)
    pd = d / "objects" / "pack"
    data = b"pre-image\n"
    oid = str(pygit2.hash(data))
    entries = [(bytes.fromhex(oid), *pack_entry(3, data, 1))]
    stem = write_pack(str(pd), entries, durable=False)
    durability.settle_objects(d / "objects", [oid])
    first = (pd / (stem + ".pack")).stat().st_ctime_ns
    probe = tmp_path / "probe"
    for _ in range(10_000_000):                 # until the file system's clock moved on
        probe.write_bytes(b"")
        if probe.stat().st_ctime_ns != first:
            break
    for suffix in (".pack", ".idx"):
        os.chmod(pd / (stem + suffix), 0o644)
        os.unlink(pd / (stem + suffix))
    assert write_pack(str(pd), entries, durable=False) == stem     # maybe the freed inode again
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    got, settle = carried.carry(pygit2.Repository(str(d)), [oid])
    assert oid not in got and settle == [oid]
    durability.settle_objects(d / "objects", settle)
    assert any(p.endswith(stem + ".pack") for p in synced)


def test_a_small_loose_file_that_inflates_to_a_huge_object_is_not_inflated(tmp_path):
    """Whether a loose object is small enough to carry is read from its header first."""
    d = _bare(tmp_path)
    n = 64 << 20
    z, h, hdr = zlib.compressobj(9), __import__("hashlib").sha1(), b"blob %d\0" % n
    h.update(hdr)
    parts, chunk = [z.compress(hdr)], bytes(1 << 20)
    for _ in range(n >> 20):
        h.update(chunk)
        parts.append(z.compress(chunk))
    parts.append(z.flush())
    oid = h.hexdigest()
    (d / "objects" / oid[:2]).mkdir()
    (d / "objects" / oid[:2] / oid[2:]).write_bytes(b"".join(parts))
    seen = []
    real = zlib.decompressobj

    class Spy:
        def __init__(self):
            self.d = real()

        def decompress(self, raw, *a):
            out = self.d.decompress(raw, *a)
            seen.append(len(out))
            return out

        def __getattr__(self, k):
            return getattr(self.d, k)
    carried.zlib.decompressobj = Spy
    try:
        got, settle = carried.carry(pygit2.Repository(str(d)), [oid])
    finally:
        carried.zlib.decompressobj = real
    assert got == {} and settle == [oid]                    # too big: fsynced where it is
    assert max(seen) <= 2 * carried.MAX_BLOB


def test_a_blob_borrowed_through_alternates_is_carried(tmp_path):
    """Only the store's own packs are fsynced: a blob another repository lends is carried
    (and packed into the store at the next sync)."""
    from chronos_git.engine import loose
    d, other = _bare(tmp_path), _bare(tmp_path, "other")
    oid = loose.blob(other / "objects", b"borrowed pre-image\n")
    run = __import__("subprocess").run
    run(["git", "-C", str(other), "repack", "-adq"], check=True)
    (d / "objects" / "info").mkdir(exist_ok=True)
    (d / "objects" / "info" / "alternates").write_text(str(other / "objects") + "\n")
    got, settle = carried.carry(pygit2.Repository(str(d)), [oid])
    assert oid in got and settle == []


def test_the_recent_writes_are_found_through_a_symlinked_store(tmp_path):
    from chronos_git.engine import loose
    real = _bare(tmp_path, "real")
    (tmp_path / "link").symlink_to(real)
    repo = pygit2.Repository(str(tmp_path / "link"))
    oid = loose.blob(tmp_path / "link" / "objects", b"x" * 100, repo=repo)
    packed = (real / "objects" / oid[:2] / oid[2:]).read_bytes()
    assert carried._recent(repo, oid) == (100, packed)


def test_a_fifo_at_a_linked_blob_s_loose_path_fails_the_append_without_waiting(tmp_path):
    d = _bare(tmp_path)
    oid = str(pygit2.hash(b"never\n"))
    (d / "objects" / oid[:2]).mkdir()
    os.mkfifo(d / "objects" / oid[:2] / oid[2:])
    with pytest.raises(ValueError, match="not a file"):
        carried.carry(pygit2.Repository(str(d)), [oid])


def test_packs_are_listed_again_only_when_the_pack_folder_changed(tmp_path, monkeypatch):
    """Each file call's intent settles its packed pre-image: the pack folder is listed (and each
    pack stat'ed) only when it changed since every pack was synced, and once its mtime is past
    the window in which a change could keep it (50 ms with nanosecond stamps, else 2 s)."""
    from chronos_git.engine import durability
    from chronos_git.engine.pack_writer import pack_entry, write_pack
    d = _bare(tmp_path)
    pd = d / "objects" / "pack"

    def a_pack(data: bytes) -> tuple[str, str]:
        oid = str(pygit2.hash(data))
        return oid, write_pack(str(pd), [(bytes.fromhex(oid), *pack_entry(3, data, 1))], durable=False)
    first, _ = a_pack(b"one\n")
    listed, synced = [], []
    real_scandir, real_fsync = os.scandir, os.fsync
    monkeypatch.setattr(os, "scandir", lambda p: (listed.append(p), real_scandir(p))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1])
    durability.settle_objects(d / "objects", [first])
    wait_for(lambda: not durability.racy(str(pd), pd.stat(), time.time_ns()), timeout=10)
    durability.settle_objects(d / "objects", [first])          # old enough now: remembered
    listed.clear()
    durability.settle_objects(d / "objects", [first])
    assert listed == []
    second, stem = a_pack(b"two\n")                            # the folder moves: listed, synced
    synced.clear()
    durability.settle_objects(d / "objects", [second])
    assert listed and any(p.endswith(stem + ".pack") for p in synced)


def test_how_long_a_folder_s_mtime_may_hide_a_change(tmp_path):
    """200 ms on a local file system with nanosecond stamps; 3 s where stamps are whole seconds
    (or FAT's two) or the file system is not known to stamp with this machine's clock."""
    from chronos_git.engine import durability
    dev = tmp_path.stat().st_dev
    now = time.time_ns()
    at = lambda ago_ms, whole=False: SimpleNamespace(   # noqa: E731
        st_dev=dev, st_mtime_ns=(now - ago_ms * 1_000_000) // (10**9 if whole else 1) * (10**9 if whole else 1))
    assert durability._fine_stamps(str(tmp_path), dev)       # the test machine's disk: ext4
    assert durability.racy(str(tmp_path), at(100), now)
    assert not durability.racy(str(tmp_path), at(300), now)
    assert durability.racy(str(tmp_path), at(1_500, whole=True), now)
    assert not durability.racy(str(tmp_path), at(4_500, whole=True), now)
    assert not durability._fine_stamps("/proc", os.stat("/proc").st_dev)
    proc = SimpleNamespace(st_dev=os.stat("/proc").st_dev, st_mtime_ns=now - 1_000_000_000 + 1)
    assert durability.racy("/proc", proc, now)


def test_a_recent_write_is_carried_while_the_store_holds_it_loose_or_packed(tmp_path):
    """What engine/loose.py kept of a blob stands for it only while the store still holds the
    blob: its loose file, else a pack (a sync packed it meanwhile), never once it is gone."""
    import subprocess

    from chronos_git.engine import loose
    d = _bare(tmp_path)
    repo = pygit2.Repository(str(d))
    kept = loose.blob(d / "objects", b"packed meanwhile\n" * 5, repo=repo)
    gone = loose.blob(d / "objects", b"removed meanwhile\n" * 5, repo=repo)
    assert carried._recent(repo, kept) is not None and carried._recent(repo, gone) is not None
    repo.references.create("refs/tags/keep", pygit2.Oid(hex=kept))
    subprocess.run(["git", "--git-dir", str(d), "repack", "-adq"], check=True)
    subprocess.run(["git", "--git-dir", str(d), "prune-packed"], check=True)
    os.unlink(d / "objects" / gone[:2] / gone[2:])
    assert not (d / "objects" / kept[:2] / kept[2:]).exists()
    assert carried._recent(repo, kept) is not None         # packed: still the store's
    assert carried._recent(repo, gone) is None             # neither loose nor packed


def test_objects_this_process_packed_durably_are_not_looked_for_until_a_pack_is_deleted(tmp_path, monkeypatch):
    """The journal's sync packs and fsyncs what the witness carried: a later event linking one
    of those blobs (the next edit's pre-image) does not list the pack folder for it, until the
    store's compaction token changes (a compaction or consolidation deleted packs)."""
    from chronos_git.engine import durability
    from chronos_git.engine.store import Store
    store = Store.open(tmp_path / "s")
    d = store.root
    blob = store.repo().create_blob(b"an earlier call's post-image\n")
    oid = str(blob)
    text = carried.encode((d / "objects" / oid[:2] / oid[2:]).read_bytes())
    carried.sync(d, "refs/chronos/journal", {oid: text}, token=store.compaction_token())
    assert not (d / "objects" / oid[:2] / oid[2:]).exists()          # packed, its loose copy gone
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: (listed.append(str(p)), real_scandir(p))[1])
    durability.settle_objects(d / "objects", [oid], store.compaction_token())
    assert listed == []
    store.note_compacted()
    durability.settle_objects(d / "objects", [oid], store.compaction_token())
    assert any(p.endswith("pack") for p in listed)


def test_packs_synced_under_a_token_are_not_stat_ed_again_until_it_changes(tmp_path, monkeypatch):
    """A pre-image in an older pack (the first snapshot's): each time the folder changed, only
    the packs new since the last listing are stat'ed while the compaction token is the same;
    a new token (packs deleted, a name maybe written again on a reused inode) stats them all."""
    from chronos_git.engine import durability
    from chronos_git.engine.pack_writer import pack_entry, write_pack
    from chronos_git.engine.store import Store
    from support.helpers import wait_for
    store = Store.open(tmp_path / "s")
    pd = store.root / "objects" / "pack"
    pd.mkdir(exist_ok=True)

    def pack(data: bytes) -> str:
        oid = str(pygit2.hash(data))
        write_pack(str(pd), [(bytes.fromhex(oid), *pack_entry(3, data, 1))], durable=False)
        wait_for(lambda: not durability.racy(str(pd), pd.stat(), time.time_ns()), timeout=10)
        return oid
    old = [pack(b"first snapshot %d\n" % i) for i in range(3)]
    stated, synced = [], []
    real_key, real_fsync = durability._pack_key, durability.fsync_file
    monkeypatch.setattr(durability, "_pack_key", lambda p: (stated.append(os.path.basename(p)), real_key(p))[1])
    monkeypatch.setattr(durability, "fsync_file",
                        lambda p: (p.name.startswith("pack-") and synced.append(p.name), real_fsync(p))[1])
    durability.settle_objects(store.root / "objects", [old[0]], store.compaction_token())
    assert len(stated) == 6 and len(synced) == 6                   # every pack: synced once
    stated.clear()
    synced.clear()
    pack(b"the outcome writer's sync\n")                              # the folder moves
    durability.settle_objects(store.root / "objects", [old[1]], store.compaction_token())
    assert len(stated) == 2 and len(synced) == 2                   # only the new pack's two files
    stated.clear()
    synced.clear()
    # the same bytes put in place over a known pack (a rename: another inode), same token
    victim = sorted(pd.glob("pack-*.pack"))[0]
    copy = pd / "tmp_copy"
    copy.write_bytes(victim.read_bytes())
    os.replace(copy, victim)
    wait_for(lambda: not durability.racy(str(pd), pd.stat(), time.time_ns()), timeout=10)
    durability.settle_objects(store.root / "objects", [old[1]], store.compaction_token())
    assert stated == [victim.name] and synced == [victim.name]
    stated.clear()
    synced.clear()
    store.note_compacted()
    pack(b"after a compaction\n")
    durability.settle_objects(store.root / "objects", [old[2]], store.compaction_token())
    assert len(stated) == 10                                        # a new token: every file again
    assert len(synced) == 2                                         # the same files are not synced twice
