"""The witness file: two slots rewritten in place (journal_refs/witness.py), and what the
journal makes of a torn or damaged slot."""
from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest

from chronos_git.journal_refs import witness as wmod
from chronos_git.journal_refs.witness import WitnessFile, read_doc



def newest_slot(path) -> tuple[int, int]:
    """(index of the slot holding the newest record, slot size)."""
    raw = path.read_bytes()
    slot = len(raw) // 2
    gens = [int(raw[k * slot:k * slot + 128].split(b" ")[3]) for k in (0, 1)]
    return gens.index(max(gens)), slot


def tear(path, k: int, slot: int, at: int = 40) -> None:
    """What a power cut during the write of slot `k` leaves: part of it, then zeros."""
    with open(path, "r+b") as fh:
        fh.seek(k * slot + at)
        fh.write(b"\0" * (slot - at))


def three_records(tmp_path):
    """A witness file whose newest record is {"n": 2}, the one before it {"n": 1}."""
    path = tmp_path / "w"
    wf = WitnessFile(path)
    for n in range(3):
        wf.write(b'{"n": %d}' % n)
    return path


def test_records_alternate_between_two_slots_in_one_file(tmp_path):
    path = tmp_path / "w"
    wf = WitnessFile(path)
    assert wf.read() is None
    wf.write(b'{"n": 1}')                           # created whole (temp, rename)
    ino = path.stat().st_ino
    for n in range(2, 7):
        wf.write(b'{"n": %d}' % n)                  # in place: same inode, same size
        assert path.stat().st_ino == ino and path.stat().st_size == 2 * wmod.SLOT_MIN
        other = WitnessFile(path)
        assert other.read() == (b'{"n": %d}' % n, False)
        assert newest_slot(path)[0] == (n % 2)     # record n (gen n) lives in slot n % 2
    assert read_doc(path) == b'{"n": 6}'


def test_a_torn_standby_slot_leaves_the_newest_record(tmp_path):
    path = three_records(tmp_path)
    k, slot = newest_slot(path)
    tear(path, 1 - k, slot)
    assert WitnessFile(path).read() == (b'{"n": 2}', True)
    wf2 = WitnessFile(path)
    wf2.read()
    wf2.write(b'{"n": 3}')                           # goes into the torn slot, repairing it
    assert WitnessFile(path).read() == (b'{"n": 3}', False)


def test_a_reader_that_wrote_last_sees_another_writer_s_record_and_damage_to_its_own(tmp_path):
    """The read after a write compares the newest slot whole and the other slot's header only."""
    path = tmp_path / "w"
    mine = WitnessFile(path)
    for n in range(3):
        mine.write(b'{"n": %d}' % n)
    theirs = WitnessFile(path)
    theirs.read()
    theirs.write(b'{"n": 3}')                        # another process's append: the other slot
    assert mine.read() == (b'{"n": 3}', False)
    mine.write(b'{"n": 4}')
    k, slot = newest_slot(path)
    body = path.read_bytes().index(b"\n", k * slot) - k * slot + 3
    tear(path, k, slot, at=body)                    # the newest record's body damaged
    assert mine.read() == (b'{"n": 3}', True)
    mine.write(b'{"n": 5}')
    k, slot = newest_slot(path)
    body = path.read_bytes().index(b"\n", (1 - k) * slot) - (1 - k) * slot + 3
    tear(path, 1 - k, slot, at=body)                # the superseded record's body, header intact:
    assert mine.read() == (b'{"n": 5}', False)       # not read again (the next write overwrites it)
    assert WitnessFile(path).read() == (b'{"n": 5}', True)      # an opener reads both whole
    mine.write(b'{"n": 6}')
    assert WitnessFile(path).read() == (b'{"n": 6}', False)


def test_a_torn_newest_slot_falls_back_to_the_record_before(tmp_path):
    path = three_records(tmp_path)
    k, slot = newest_slot(path)
    tear(path, k, slot)
    assert WitnessFile(path).read() == (b'{"n": 1}', True)


def plant(path, k: int, slot: int, gen: int, record: bytes) -> None:
    """A whole record of generation `gen` written into slot `k`, as an editor who knows the format would."""
    with open(path, "r+b") as fh:
        fh.seek(k * slot)
        fh.write(wmod._header(gen, record) + record)


@pytest.mark.parametrize("edit", ["none", "torn-standby", "torn-newest", "newer-in-standby", "newest-edited"])
def test_the_writer_reading_its_own_file_again_sees_what_a_fresh_reader_sees(tmp_path, edit, monkeypatch):
    """The writer's own reread skips hashing only while both slots hold exactly what it left."""
    path = tmp_path / "w"
    wf = WitnessFile(path)
    for n in range(3):
        wf.write(b'{"n": %d}' % n)
    assert wf.read() == (b'{"n": 2}', False)
    k, slot = newest_slot(path)
    if edit == "torn-standby":
        tear(path, 1 - k, slot)
    elif edit == "torn-newest":
        tear(path, k, slot)
    elif edit == "newer-in-standby":
        plant(path, 1 - k, slot, 3, b'{"n": "planted"}')
    elif edit == "newest-edited":
        plant(path, k, slot, 2, b'{"n": 9}')                   # same generation, other bytes
    hashed = []
    real = wmod.hashlib.sha256
    monkeypatch.setattr(wmod.hashlib, "sha256", lambda *a: hashed.append(1) or real(*a))
    mine = wf.read()
    monkeypatch.undo()
    assert mine == WitnessFile(path).read()
    assert bool(hashed) == (edit != "none")


def test_a_file_swapped_in_while_the_writer_replaced_it_whole_is_read_whole(tmp_path, monkeypatch):
    """Between a whole rewrite's rename and its stat another file takes the name: a size the
    writer never makes, its own bytes at both slot offsets.  The writer must not vouch for it."""
    path = tmp_path / "w"
    real = wmod.atomic_write

    def swapped(target, data, **kw):
        real(target, data, **kw)
        slot = len(data) // 2
        odd = bytearray(2 * (slot + 4096) + 1)
        odd[:slot] = data[:slot]
        odd[len(odd) // 2:len(odd) // 2 + slot] = data[slot:]
        (tmp_path / "other").write_bytes(bytes(odd))
        os.replace(tmp_path / "other", target)
    monkeypatch.setattr(wmod, "atomic_write", swapped)
    wf = WitnessFile(path)
    wf.write(b'{"n": 1}')
    monkeypatch.undo()
    for reader in (wf, WitnessFile(path)):
        with pytest.raises(ValueError, match="not two whole slots"):
            reader.read()


@pytest.mark.parametrize("damage", ["zeros", "truncated", "unrelated", "edited-both", "not-consecutive"])
def test_a_file_without_a_whole_record_is_a_clear_error(tmp_path, damage):
    path = three_records(tmp_path)
    raw = bytearray(path.read_bytes())
    slot = len(raw) // 2
    if damage == "zeros":
        raw = bytearray(len(raw))
    elif damage == "truncated":
        raw = raw[:slot + 100]
    elif damage == "unrelated":
        raw = bytearray(b"hello\n" * 1000)
    elif damage == "edited-both":
        for k in (0, 1):
            i = raw.index(b"{", k * slot)
            raw[i + 1:i + 2] = b"X"
    else:                                           # a slot sealed with a gen two apart
        rec = b'{"n": 9}'
        head = wmod._header(5, rec) + rec
        raw[slot:slot + len(head)] = head
        raw[slot + len(head):2 * slot] = bytes(slot - len(head))
        rec0 = b'{"n": 0}'
        head0 = wmod._header(2, rec0) + rec0
        raw[0:len(head0)] = head0
        raw[len(head0):slot] = bytes(slot - len(head0))
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError):
        WitnessFile(path).read()


def test_a_record_larger_than_its_slot_regrows_the_file_atomically(tmp_path):
    path = tmp_path / "w"
    wf = WitnessFile(path)
    wf.write(b"{}")
    big = b'{"x": "' + b"a" * (3 * wmod.SLOT_MIN) + b'"}'
    wf.write(big)
    assert path.stat().st_size == 2 * 4 * wmod.SLOT_MIN
    assert WitnessFile(path).read() == (big, False)
    wf.write(b'{"small": 1}')                         # and back to writing in place
    assert WitnessFile(path).read() == (b'{"small": 1}', False)
    assert not [p for p in tmp_path.iterdir() if p.name != "w"]        # no temp file left


def test_an_older_versions_json_witness_is_read_and_replaced_whole(tmp_path):
    path = tmp_path / "w"
    path.write_text('{"schema": "old"}')
    wf = WitnessFile(path)
    assert wf.read() == (b'{"schema": "old"}', False)
    wf.write(b'{"schema": "new"}')
    raw = path.read_bytes()
    assert raw.startswith(b"chronos-git witness v1 ")
    assert WitnessFile(path).read() == (b'{"schema": "new"}', False)


@pytest.mark.fsync
def test_one_write_is_one_pwrite_and_one_fdatasync(tmp_path, monkeypatch):
    """The point of the layout: no temp file, no rename, no directory fsync per append."""
    path = tmp_path / "w"
    wf = WitnessFile(path)
    wf.write(b"{}")
    calls = []
    for name in ("pwrite", "fdatasync", "fsync", "replace", "rename", "mkstemp"):
        mod = tempfile if name == "mkstemp" else os
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _n=name, _r=real, **k: (calls.append(_n), _r(*a, **k))[1])
    wf.read()
    wf.write(b'{"n": 2}')
    assert calls == ["pwrite", "fdatasync"], calls
    assert WitnessFile(path).read() == (b'{"n": 2}', False)


# ------------------------------------------------------------------ the journal
@pytest.fixture
def appended(cli, ws, store_dir):
    """A journal after a few calls, each process a new start (the CLI)."""
    for _ in range(3):
        assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    return store_dir.parent / (store_dir.name + ".journal-witness.json")


def test_a_torn_standby_slot_is_what_a_power_cut_leaves_and_is_accepted(appended, cli, ws):
    k, slot = newest_slot(appended)
    tear(appended, 1 - k, slot)
    st = cli("journal", "status", "--json").json
    assert st["integrity"] == "ok", st
    assert cli("journal", "verify", "--json").rc == 0
    assert cli("run", "--json", "--", "true", cwd=ws).rc == 0
    assert WitnessFile(appended).read()[1] is False        # the next append rewrote that slot


def test_a_lost_newest_record_with_the_journal_ahead_closes_the_gate(appended, cli, ws):
    before = json.loads(read_doc(appended))
    k, slot = newest_slot(appended)
    tear(appended, k, slot)
    survived = json.loads(read_doc(appended))
    assert survived["seq"] < before["seq"]                  # the last write was an append
    raw = appended.read_bytes()
    st = cli("journal", "status", "--json").json
    assert "newest record" in st["integrity"] and "damaged" in st["integrity"], st
    r = cli("run", "--json", "--", sys.executable, "-c", "open('must-not-run.txt','w').write('x')", cwd=ws)
    assert r.rc == 3 and not (ws / "must-not-run.txt").exists()
    assert appended.read_bytes() == raw                      # the evidence is left as found


def test_a_failed_sync_leaves_the_record_before_as_the_newest(tmp_path, monkeypatch):
    """Linux keeps the pages of a failed fsync readable: the failed append's record must not
    be read back as the newest by the next append."""
    path = tmp_path / "w"
    wf = WitnessFile(path)
    wf.write(b'{"n": 1}')
    wf.write(b'{"n": 2}')

    def eio(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(OSError):
        wf.write(b'{"n": 3}')
    monkeypatch.undo()
    assert WitnessFile(path).read() == (b'{"n": 2}', True)
    wf.read()
    wf.write(b'{"n": 3}')
    assert WitnessFile(path).read() == (b'{"n": 3}', False)


@pytest.mark.parametrize("size", [8192, 65536, 3 * 2 * wmod.SLOT_MIN, 2 * 2 * wmod.SLOT_MAX])
def test_a_size_the_writer_does_not_make_is_refused_before_anything_is_read(tmp_path, size):
    path = three_records(tmp_path)
    os.truncate(path, size)                   # the last one sparse, 1 GiB: refused from its size
    with pytest.raises(ValueError, match="two whole slots"):
        WitnessFile(path).read()


def test_a_zero_extended_file_reads_only_headers_and_records(tmp_path, monkeypatch):
    path = three_records(tmp_path)            # the newest record is in slot 0
    k, _ = newest_slot(path)
    if k != 0:
        WitnessFile(path).read()
        wf = WitnessFile(path)
        wf.read()
        wf.write(b'{"n": 3}')
    os.truncate(path, 2 * 64 * wmod.SLOT_MIN)  # 8 MiB of zeros after it: slot 1 moved, torn
    real, asked = os.pread, []
    monkeypatch.setattr(os, "pread", lambda fd, n, off: (asked.append(n), real(fd, n, off))[1])
    got, torn = WitnessFile(path).read()
    assert torn and got.startswith(b'{"n": ')
    assert sum(asked) < 4096, asked            # not the 8 MiB


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_witness_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path, kind):
    path = tmp_path / "w"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)                       # no writer: a plain open would wait forever
    with pytest.raises(ValueError, match="not a regular file"):
        WitnessFile(path).read()


def test_hard_links_and_symlinks_are_replaced_not_written_through(tmp_path):
    path = three_records(tmp_path)
    backup = tmp_path / "backup"
    os.link(path, backup)                     # a `cp -al` backup of the store's folder
    target = tmp_path / "elsewhere"
    wf = WitnessFile(path)
    wf.read()
    wf.write(b'{"n": 3}')
    assert WitnessFile(backup).read()[0] == b'{"n": 2}'          # the backup kept its file
    assert os.stat(path).st_nlink == 1
    target.write_bytes(path.read_bytes())
    link = tmp_path / "link"
    link.symlink_to(target)
    wf = WitnessFile(link)
    wf.read()
    wf.write(b'{"n": 4}')
    assert not link.is_symlink() and WitnessFile(link).read()[0] == b'{"n": 4}'
    assert WitnessFile(target).read()[0] == b'{"n": 3}'          # the target untouched


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_the_journal_closes_the_gate_on_a_witness_it_cannot_read(appended, cli, ws, kind):
    appended.unlink()
    if kind == "directory":
        appended.mkdir()
    else:
        os.mkfifo(appended)
    st = cli("journal", "status", "--json", timeout=60)
    assert "not a regular file" in st.json["integrity"], st.stdout
    v = cli("journal", "verify", "--json", timeout=60)
    assert v.rc == 1 and "Traceback" not in v.stderr and v.json.get("code") != "internal", v.stdout
    assert cli("run", "--json", "--", "true", cwd=ws, timeout=60).rc == 3


def test_a_temp_file_left_by_a_killed_rewrite_is_removed_at_the_next_open(appended, cli):
    stale = appended.with_name(f".{appended.name}.k1ll3d.tmp")
    stale.write_bytes(b"half a witness")
    assert cli("journal", "status", "--json").json["integrity"] == "ok"
    assert not stale.exists()


def test_a_store_whose_witness_has_its_older_name_keeps_it(tmp_path, ws):
    """An upgrade never finds the witness missing: a store made when it was called
    `<store>.journal-checkpoint.json` keeps that file, and a new-name file planted beside it is
    not read instead."""
    import os

    from chronos_git.journal_refs.witness import witness_path_for
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    store = tmp_path / "store"
    s = Chronos.get(store, Settings())
    s.write_file(str(ws), "a.txt", b"one\n")
    new, old = tmp_path / "store.journal-witness.json", tmp_path / "store.journal-checkpoint.json"
    assert witness_path_for(store) == new and new.exists()
    os.rename(new, old)                                  # the store as an older version left it
    Chronos.forget_instances()
    s = Chronos.get(store, Settings())
    assert witness_path_for(store) == old
    s.write_file(str(ws), "a.txt", b"two\n")
    assert s.journal_verify().status == "ok" and not new.exists()
    new.write_text(old.read_text())                      # planted beside it: the older one still rules
    Chronos.forget_instances()
    assert witness_path_for(store) == old
    assert Chronos.get(store, Settings()).journal_verify().status == "ok"
