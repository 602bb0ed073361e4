"""A file call's post-image: carried by its intent's witness record and written after the flush
(loose.staged_blob), unless the journal's last write failed: then written before the intent, so
a store known to refuse new files refuses the call before it runs."""
from __future__ import annotations

import errno

import pygit2
import pytest

from chronos_git.engine import loose
from chronos_git.journal_refs.journal import Journal
from chronos_git.service import Call, Declared, Outcome
from chronos_git.service.errors import StoreUnwritable


@pytest.fixture
def staged(monkeypatch):
    """The `objects` each intent was appended with."""
    seen: list[dict] = []
    real = Journal.append

    def append(self, kind, fields, **kw):
        if kind.kind == "started":
            seen.append(dict(kw.get("objects") or {}))
        return real(self, kind, fields, **kw)
    monkeypatch.setattr(Journal, "append", append)
    return seen


def _write(s, ws, name: str, data: bytes):
    f = ws / name
    ticket = s.begin(Call(tool="write_file", args={"path": str(f), "content": data.decode()}, workspace=str(ws),
                          session_id="s", declared=[Declared(str(f), data)]))
    f.write_bytes(data)
    s.finish(ticket, Outcome(status="ok", result_hash=None))
    return ticket


def test_staged_unless_the_journal_last_failed_to_write(svc, ws, staged):
    s = svc()
    s.snapshot(str(ws), "first")
    _write(s, ws, "a.txt", b"alpha 2\n")
    post = str(pygit2.hash(b"alpha 2\n"))
    assert list(staged[-1]) == [post]
    assert s.core.store.repo()[post].data == b"alpha 2\n"       # written by the publication after
    _write(s, ws, "a.txt", b"alpha 2\n")                        # the store holds it: nothing staged
    assert staged[-1] == {}
    s.core.journal.unwritable = "the last write failed (test)"
    _write(s, ws, "new.txt", b"brand new\n")
    assert staged[-1] == {} and s.core.store.repo()[str(pygit2.hash(b"brand new\n"))].data == b"brand new\n"


def test_a_store_known_to_refuse_new_files_refuses_a_file_call_before_it_runs(svc, ws, monkeypatch):
    """A quota statvfs does not show, once the journal has met it: the call is refused, nothing
    is poisoned, and the next call runs once the store takes files again."""
    s = svc()
    s.snapshot(str(ws), "first")
    s.core.journal.unwritable = "Disk quota exceeded (a publication met it)"

    def quota(path, packed, durable):
        raise OSError(errno.EDQUOT, "Disk quota exceeded", path)
    monkeypatch.setattr(loose, "_put", quota)
    for name, data in (("new.txt", b"hello quota\n"), ("a.txt", b"alpha over quota\n")):
        with pytest.raises(StoreUnwritable):
            s.write_file(str(ws), name, data)
    assert not (ws / "new.txt").exists() and (ws / "a.txt").read_text() == "alpha\n"
    assert s.core.journal.poisoned is None and s.refusal() is None
    monkeypatch.undo()
    assert s.write_file(str(ws), "new.txt", b"after the quota\n").status == "ok"
