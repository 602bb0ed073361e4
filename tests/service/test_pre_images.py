"""A file call's pre-image is what the file held right before the call: taken from its
pre-checkpoint's read of the file while the file is as it was then (engine/index_entry.py),
else read again.  Crash recovery settles a call by it, so it must never be stale."""
from __future__ import annotations

import os
import time

import pygit2
import pytest

from chronos_git.engine import durability
from chronos_git.service import Call, Declared, Outcome, snapshots as snapshots_mod, transaction
from support.helpers import wait_for

OLD_NS = 1_700_000_000 * 10**9       # well past the racy window


def _old(f) -> None:
    """An old mtime, and a ctime past the racy window (it moves with the utime)."""
    os.utime(f, ns=(OLD_NS, OLD_NS))
    wait_for(lambda: not durability.racy(str(f), os.lstat(f), time.time_ns(), os.lstat(f).st_ctime_ns),
             timeout=10)


@pytest.fixture
def reads(monkeypatch):
    """The paths whose pre-image was read from the file again (not from the checkpoint's read)."""
    seen: list[str] = []
    real = transaction.content_id

    def counted(path, store_in=None):
        seen.append(os.fsdecode(path))
        return real(path, store_in=store_in)
    monkeypatch.setattr(transaction, "content_id", counted)
    return seen


def _call(ws, f, post: bytes) -> Call:
    return Call(tool="write_file", args={"path": str(f), "content": post.decode()}, workspace=str(ws),
                session_id="s", declared=[Declared(str(f), post)])


def _run(s, call) -> dict:
    ticket = s.begin(call)
    for d in call.declared:
        with open(d.path, "wb") as fh:
            fh.write(d.post)
    s.finish(ticket, Outcome(status="ok", result_hash=None))
    return ticket.declared[0]


def test_an_old_file_s_pre_image_is_the_checkpoint_s_read(svc, ws, store_dir, reads):
    f = ws / "a.txt"
    _old(f)
    s = svc()
    s.snapshot(str(ws), "first")
    d = _run(s, _call(ws, f, b"alpha 2\n"))
    assert d["pre"] == str(pygit2.hash(b"alpha\n")) and d["post"] == str(pygit2.hash(b"alpha 2\n"))
    assert reads == []                                   # not read a second time
    assert pygit2.Repository(str(store_dir))[d["pre"]].data == b"alpha\n"


def test_a_file_written_just_now_is_read_again(svc, ws, reads):
    f = ws / "a.txt"
    f.write_bytes(b"just now\n")
    s = svc()
    s.snapshot(str(ws), "first")
    d = _run(s, _call(ws, f, b"after\n"))
    assert d["pre"] == str(pygit2.hash(b"just now\n")) and reads == [str(f)]


def test_a_file_changed_after_the_checkpoint_read_it_is_read_again(svc, ws, reads, monkeypatch):
    """Another writer between the pre-checkpoint and the images: the same size, its mtime put
    back, only its ctime moves; the pre-image is what the file holds now."""
    f = ws / "a.txt"
    _old(f)
    s = svc()
    s.snapshot(str(ws), "first")
    real = snapshots_mod.Snapshots.for_call

    def then_changed(self, *a, **k):
        out = real(self, *a, **k)
        with open(f, "r+b") as fh:
            fh.write(b"ALPHA\n")
        os.utime(f, ns=(OLD_NS, OLD_NS))
        return out
    monkeypatch.setattr(snapshots_mod.Snapshots, "for_call", then_changed)
    d = _run(s, _call(ws, f, b"alpha 2\n"))
    assert d["pre"] == str(pygit2.hash(b"ALPHA\n")) and reads == [str(f)]



def test_a_call_that_took_no_checkpoint_reads_its_pre_image(svc, ws, reads):
    """What an earlier call's checkpoint read is not this call's: without a checkpoint of its
    own (auto_snapshot off) the file is read, even while its stamps are unchanged."""
    f = ws / "a.txt"
    _old(f)
    s = svc()
    s.snapshot(str(ws), "first")
    ticket = s.begin(_call(ws, f, b"alpha 2\n"))          # its checkpoint read a.txt
    s.finish(ticket, Outcome(status="error", result_hash=None))     # and the call never wrote it
    assert reads == []
    d = _run(svc(auto_snapshot=False), _call(ws, f, b"alpha 3\n"))
    assert d["pre"] == str(pygit2.hash(b"alpha\n")) and reads == [str(f)]
