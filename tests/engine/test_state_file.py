"""The JSON state files under `<store>/chronos/` (engine/state_file.py): read, written and
updated in one place, with the lock, durability and format engine/metadir.py's JSON_FILES
gives each."""
from __future__ import annotations

import fcntl
import json
import os
import stat
import threading

import pytest

from chronos_git.engine import metadir
from chronos_git.engine.state_file import REMOVE, StateFile


@pytest.fixture
def meta(tmp_path):
    d = tmp_path / "store" / "chronos"
    d.mkdir(parents=True)
    return d


def test_every_json_file_is_a_file_of_the_store_and_its_lock_is_in_the_order():
    for name, spec in metadir.JSON_FILES.items():
        assert name in metadir.FILES and not name.endswith("/"), name
        assert spec.lock is None or spec.lock in metadir.LOCK_ORDER, name
        assert spec.format in ("json", "sorted", "canonical"), name


@pytest.mark.parametrize("name", ["nope.json", "tmp/", "host-id", "../remotes.json", "ws/"])
def test_an_unknown_name_is_refused(meta, name):
    with pytest.raises(ValueError, match="JSON_FILES"):
        StateFile(meta, name)


def test_missing_reads_as_the_default(meta):
    f = StateFile(meta, "remotes.json")
    assert f.load().state == "missing"
    assert f.read({"x": 1}) == {"x": 1}
    assert f.read([], raise_unreadable=True) == []
    assert not f.path.exists()                       # reading writes nothing


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe\x00garbage", b"[" * 100_000])
def test_damaged_reads_as_the_default_and_load_says_so(meta, raw):
    f = StateFile(meta, "packs.json")
    f.path.write_bytes(raw)
    got = f.load()
    assert got.state == "damaged" and got.doc is None and isinstance(got.error, (ValueError, RecursionError))
    assert f.read({}) == {}
    assert f.read({}, raise_unreadable=True) == {}   # damage is not unreadability


def test_another_json_type_than_expected_reads_as_the_default(meta):
    f = StateFile(meta, "packs.json")
    f.path.write_text("[1, 2]")
    assert f.load().state == "ok"
    assert f.read({}) == [1, 2]                      # no expectation: the document as it is
    assert f.read({}, expect=dict) == {}


def test_unreadable_reads_as_the_default_or_raises_when_asked(meta):
    f = StateFile(meta, "pending-alerts.json")
    f.path.mkdir()                                   # reading it fails with an OSError (root too)
    got = f.load()
    assert got.state == "unreadable" and isinstance(got.error, OSError)
    assert f.read([]) == []
    with pytest.raises(OSError):
        f.read([], raise_unreadable=True)


def test_written_atomically_with_mode_0600(meta):
    f = StateFile(meta, "missing.json")
    f.path.write_text("{}")
    os.chmod(f.path, 0o644)
    f.write({"b": 1.5, "a": 2})
    assert stat.S_IMODE(f.path.stat().st_mode) == 0o600
    assert f.read({}) == {"b": 1.5, "a": 2}
    assert [p.name for p in meta.iterdir()] == ["missing.json"]       # no temp file left


def test_each_file_is_serialised_as_its_writer_always_did(meta):
    doc = {"b": [1, "é"], "a": None}
    StateFile(meta, "unconsolidated.json").write(doc)
    StateFile(meta, "remotes.json").write(doc)
    StateFile(meta, "pending-alerts.json").write(doc)
    assert (meta / "unconsolidated.json").read_text() == json.dumps(doc)
    assert (meta / "remotes.json").read_text() == json.dumps(doc, sort_keys=True)
    assert (meta / "pending-alerts.json").read_text() == '{"a":null,"b":[1,"é"]}'


def test_durability_is_the_files_own(meta, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    StateFile(meta, "journal-verified.json").write({"head": None})
    assert synced == []                              # not synced: lost, the next open verifies more
    StateFile(meta, "journal-alarm.json").write({"problem": "x"})
    assert len(synced) == 2                          # the file and its folder


def test_update_holds_the_files_lock_and_writes_what_fn_returns(meta):
    f = StateFile(meta, "remotes.json")
    lock = metadir.lock_path(meta, "remotes")
    seen = []

    def fn(doc):
        fd = os.open(lock, os.O_RDWR)               # another process's view of the lock
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        seen.append(doc)
        return {**doc, "r": {"url": "u"}}
    assert f.update(fn, {}) == {"r": {"url": "u"}}
    assert seen == [{}] and f.read({}) == {"r": {"url": "u"}}
    f.update(lambda doc: REMOVE, {})
    assert not f.path.exists()


def test_update_takes_its_lock_in_the_lock_order(meta):
    """remotes comes after ws in LOCK_ORDER: taken inside it, fine; taking ws inside it raises."""
    from chronos_git.engine import locking
    f = StateFile(meta, "remotes.json")
    with locking.exclusive(metadir.lock_path(meta, "ws", "abc")):
        f.update(lambda doc: {"n": 1}, {})

    def take_ws(doc):
        with locking.exclusive(metadir.lock_path(meta, "ws", "abc")):
            return {"n": 2}
    with pytest.raises(metadir.LockOrderError):
        f.update(take_ws, {})
    assert f.read({}) == {"n": 1}


def test_a_file_without_a_lock_of_its_own_has_no_update(meta):
    f = StateFile(meta, "packs.json")
    with pytest.raises(ValueError, match="no lock"):
        f.update(lambda doc: doc, {})
    assert not f.path.exists()


def test_concurrent_updates_from_two_threads_lose_nothing(meta):
    f = StateFile(meta, "protected-changes.json")
    n = 100

    def add(tag):
        for i in range(n):
            f.update(lambda cur: [*cur, f"{tag}{i}"], [])
    threads = [threading.Thread(target=add, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = f.read([])
    assert sorted(got) == sorted(f"{t}{i}" for t in "ab" for i in range(n))


def test_each_caller_keeps_its_own_answer_to_damage(meta):
    """Damage is a finding for the power-cut refusal and the journal alarm, an empty list for
    packs.json; remotes.json raises when unreadable (a remote must not vanish) but not when damaged."""
    from types import SimpleNamespace

    from chronos_git.engine import pack_list, powercut
    from chronos_git.journal_refs.commits import AlarmRaised
    from chronos_git.journal_refs.verify import AlarmFile
    from chronos_git.service.remote_record import read_record
    store = SimpleNamespace(meta_dir=meta)
    for name in ("power-cut-refused.json", "journal-alarm.json", "packs.json", "remotes.json"):
        (meta / name).write_bytes(b"\x00{damaged")
    assert "is damaged" in powercut.refused(store)
    with pytest.raises(AlarmRaised, match="not valid JSON"):
        AlarmFile(meta / "journal-alarm.json").check()
    assert pack_list.compacted_packs(store) == set()
    assert read_record(meta / "remotes.json") == {}
    for name in ("power-cut-refused.json", "journal-alarm.json", "remotes.json"):
        (meta / name).unlink()
        (meta / name).mkdir()                    # unreadable
    assert "is unreadable" in powercut.refused(store)
    with pytest.raises(AlarmRaised, match="unreadable"):
        AlarmFile(meta / "journal-alarm.json").check()
    with pytest.raises(OSError):
        read_record(meta / "remotes.json")
    for name in ("power-cut-refused.json", "journal-alarm.json", "remotes.json"):
        (meta / name).rmdir()
    assert powercut.refused(store) is None and read_record(meta / "remotes.json") == {}
    AlarmFile(meta / "journal-alarm.json").check()          # missing: no alarm
