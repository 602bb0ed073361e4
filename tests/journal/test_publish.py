"""An intent is durable at its witness write; its objects and the ref follow (journal_refs/publish.py).
Concurrent appends of one process share one witness write (group commit)."""
from __future__ import annotations

import threading

import pytest

from chronos_git.engine import locking, metadir
from chronos_git.engine.store import Store
from chronos_git.journal_refs import Journal, events
from chronos_git.journal_refs.journal import REF
from chronos_git.journal_refs.publish import PUBLISHER, _Publisher
from chronos_git.journal_refs.witness import WitnessFile


def _journal(store_dir) -> Journal:
    j = Journal(Store.open(store_dir)).open()
    assert j.integrity == "ok", j.integrity
    return j


def _intent(j: Journal, n: int, *, defer: bool = True) -> dict:
    return j.append(events.Started, {"operation_id": f"op{n:030d}", "tool": "terminal",
                                     "owner": j.me.to_dict()}, defer=defer)


def _ref(store_dir) -> str:
    return (store_dir / REF).read_text().strip()


def _witness_gen(j: Journal) -> int:
    wf = WitnessFile(j.witness_path)
    wf.read()
    return wf._gen


@pytest.fixture
def held_publisher(monkeypatch):
    """The background publisher does nothing: what an intent leaves pending stays so."""
    monkeypatch.setattr(_Publisher, "kick", lambda self, journal: None)


def test_an_intent_returns_durable_and_its_ref_follows_in_the_background(tmp_path):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    before = _ref(store_dir)
    ev = _intent(j, 1)
    assert j.read_witness()["head"] == ev["id"] == j.head            # durable when it returns
    assert PUBLISHER.wait(j, 30)                                      # then published
    assert _ref(store_dir) == ev["id"] != before
    assert j.verify()["problems"] == []


def test_a_reader_in_the_process_settles_what_is_pending(tmp_path, held_publisher):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    base = _ref(store_dir)
    ev = _intent(j, 1)
    assert j.pending is not None and _ref(store_dir) == base          # not published yet
    w = j.read_witness()
    assert w["base"] == base and ev["id"] in w["carried"]             # the witness says where from
    assert [e["id"] for e in j.events(1)] == [ev["id"]]               # a read publishes it first
    assert j.pending is None and _ref(store_dir) == ev["id"]


def test_appends_while_one_is_pending_keep_the_base_and_publish_together(tmp_path, held_publisher):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    base = _ref(store_dir)
    ids = [_intent(j, n)["id"] for n in range(3)]
    assert j.read_witness()["base"] == base and _ref(store_dir) == base
    assert len(j.pending.objects) == 9                                 # commit, tree, state of each
    j.settle()
    assert _ref(store_dir) == ids[-1]
    assert j.verify()["problems"] == []


def test_another_process_finds_pending_events_and_publishes_them(tmp_path, held_publisher):
    """The journal lock is free between appends: another process (here another Journal on the
    same store) that opens then heals the ref from the witness, writing the objects back."""
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    ids = [_intent(j, n)["id"] for n in range(2)]
    other = _journal(store_dir)
    assert other.head == ids[-1] and other.integrity == "ok"
    assert "not yet published" in (other.healed or "") and "moved forward" in other.healed
    # the first journal carries on from there: nothing is published twice, nothing lost
    ev = _intent(j, 9, defer=False)
    assert j.pending is None and _ref(store_dir) == ev["id"] and j.integrity == "ok"
    assert j.verify()["problems"] == []


def test_a_crash_before_publication_is_healed_and_the_event_kept(tmp_path, held_publisher):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    ev = _intent(j, 1)
    j.pending = None                 # the process dies: nothing it left pending gets published
    again = _journal(store_dir)
    assert again.head == ev["id"] and again.state.open[f"op{1:030d}"]["state"] == "running"
    assert again.verify()["problems"] == []


def test_a_ref_rolled_back_past_the_witnessed_base_is_still_tampering(tmp_path, held_publisher):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    first = _intent(j, 1, defer=False)["id"]
    _intent(j, 2, defer=False)
    _intent(j, 3)                    # pending; its base is event 2
    j.pending = None
    (store_dir / REF).write_text(first + "\n")          # further back than any crash leaves it
    again = Journal(Store.open(store_dir)).open()
    assert again.integrity != "ok"


def _in_one_batch(j: Journal, **calls) -> dict[str, object]:
    """Run each call on its own thread, all queued behind the guard so that one commit takes
    them together; name -> its result or the exception it raised."""
    out: dict[str, object] = {}

    def run(name, fn):
        try:
            out[name] = fn()
        except Exception as exc:     # noqa: BLE001 - the test looks at it
            out[name] = exc
    threads = [threading.Thread(target=run, args=(name, fn)) for name, fn in calls.items()]
    with j.guard:
        for t in threads:
            t.start()
        while len(j._queue) < len(threads):
            threading.Event().wait(0.001)
    for t in threads:
        t.join(30)
    return out


def test_concurrent_appends_share_one_witness_write(tmp_path):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    gen = _witness_gen(j)
    results = _in_one_batch(j, **{f"c{n}": (lambda n=n: _intent(j, n)) for n in range(8)})
    assert sorted(results) == [f"c{n}" for n in range(8)] and all(isinstance(r, dict) for r in results.values())
    assert _witness_gen(j) == gen + 1                    # one record, one sync
    seqs = sorted(r["seq"] for r in results.values())   # type: ignore[union-attr]
    assert seqs == list(range(seqs[0], seqs[0] + 8))
    j.settle()
    assert j.verify()["problems"] == [] and j.state.seq == seqs[-1]


def test_a_refused_transition_in_a_batch_fails_alone(tmp_path):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    out = _in_one_batch(j, ok=lambda: _intent(j, 1), bad=lambda: j.append(
        events.Returned, {"operation_id": "no-such-operation", "status": "ok"}))
    assert isinstance(out["bad"], Exception) and "not running" in str(out["bad"])
    assert isinstance(out["ok"], dict) and j.head == out["ok"]["id"]


def test_a_reader_holding_a_later_lock_waits_for_the_publisher(tmp_path, monkeypatch):
    """Taking the store's and the journal's locks under one that comes after them in the lock
    order could deadlock: such a reader waits for the background publisher instead."""
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    kick = _Publisher.kick
    monkeypatch.setattr(_Publisher, "kick", lambda self, journal: None)
    ev = _intent(j, 1)
    assert j.pending is not None
    with locking.exclusive(metadir.lock_path(j.store.meta_dir, "alerts")):
        threading.Thread(target=kick, args=(PUBLISHER, j)).start()
        j.repo()                     # strict lock order (the tests' setting) would raise if it took them
        assert j.pending is None and _ref(store_dir) == ev["id"]


# ---------------------------------------------------------------- from the review of the change
def test_an_append_whose_lock_failed_is_never_committed_later(tmp_path, monkeypatch):
    """The caller was told it failed (the call never ran): the next append must not record it."""
    import contextlib
    import errno

    from chronos_git.journal_refs import journal as jmod
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    real, fail = jmod.locking.exclusive, [True]

    @contextlib.contextmanager
    def flaky(path, **kw):
        if fail[0] and path == j.lock_path:
            fail[0] = False
            raise OSError(errno.EMFILE, "Too many open files")
        with real(path, **kw):
            yield
    monkeypatch.setattr(jmod.locking, "exclusive", flaky)
    with pytest.raises(OSError):
        _intent(j, 1)
    _intent(j, 2)
    assert f"op{1:030d}" not in j.state.open and f"op{2:030d}" in j.state.open
    assert j._queue == []


def test_refresh_publishes_what_is_pending_before_the_head_is_read(tmp_path, held_publisher):
    from chronos_git.journal_refs import anchor
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    ev = _intent(j, 1)
    j.refresh()                              # what a push and the anchor check do first
    assert _ref(store_dir) == ev["id"]
    anchor.extend(j.store, j.head)           # reads the head's objects by id


def test_a_reader_that_cannot_write_the_store_opens_during_the_window(tmp_path, held_publisher, monkeypatch):
    """Another process (here another Journal) that cannot write the store finds an intent not
    yet published: not damage; it reads the journal up to the ref and cannot append."""
    import errno

    from chronos_git.journal_refs import carried
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    base = _ref(store_dir)
    _intent(j, 1)

    def denied(*a, **k):
        raise OSError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(carried, "atomic_write", denied)
    other = Journal(Store.open(store_dir)).open()
    assert other.integrity == "ok" and other.head == base and "not published yet" in other.unwritable
    with pytest.raises(Exception) as exc:
        _intent(other, 2)
    assert "not published yet" in str(exc.value) and other.integrity == "ok"
    monkeypatch.undo()
    j.settle()
    assert Journal(Store.open(store_dir)).open().verify()["problems"] == []


def test_an_intent_on_a_nearly_full_disk_is_published_before_it_returns(tmp_path, monkeypatch):
    from chronos_git.journal_refs import batch
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    monkeypatch.setattr(batch, "room", lambda where: False)
    monkeypatch.setattr(_Publisher, "kick", lambda self, journal: None)
    ev = _intent(j, 1)
    assert j.pending is None and _ref(store_dir) == ev["id"]


def test_a_request_with_a_missing_linked_blob_fails_alone(tmp_path):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    out = _in_one_batch(j, ok=lambda: _intent(j, 1), bad=lambda: j.append(
        events.Started, {"operation_id": f"op{9:030d}", "tool": "write_file", "owner": j.me.to_dict()},
        blobs={"pre/a": "ab" * 20}, defer=True))
    assert isinstance(out["bad"], Exception) and "missing" in str(out["bad"])
    assert isinstance(out["ok"], dict) and j.head == out["ok"]["id"]


def test_a_clean_exit_publishes_what_is_pending(tmp_path, held_publisher):
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    ev = _intent(j, 1)
    PUBLISHER._journals.add(j)
    PUBLISHER.flush()                        # what atexit runs
    assert _ref(store_dir) == ev["id"]


def test_readers_never_see_a_head_whose_objects_are_missing(tmp_path):
    """A reader in one thread while another appends intents: every read finds its objects."""
    store_dir = tmp_path / "store"
    j = _journal(store_dir)
    errors: list[Exception] = []
    done = threading.Event()

    def reader():
        while not done.is_set() and not errors:
            try:
                j.events(3)
            except Exception as exc:     # noqa: BLE001 - the test looks at it
                errors.append(exc)
    t = threading.Thread(target=reader)
    t.start()
    for n in range(300):
        _intent(j, n)
    done.set()
    t.join(30)
    assert errors == []
