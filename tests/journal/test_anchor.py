"""The anchor chain: the journal without its image blobs, one mirror commit per event."""
from __future__ import annotations

import pygit2
import pytest

from chronos_git.journal_refs import IntegrityError, anchor
from chronos_git.journal_refs.events import parse_message
from chronos_git.journal_refs.journal import REF


def _chain(repo, tip):
    out = []
    while tip:
        c = repo[tip]
        out.append(c)
        tip = str(c.parent_ids[0]) if c.parent_ids else None
    return out


def test_each_event_is_mirrored_with_its_id_and_without_image_contents(svc, ws):
    s = svc()
    s.write_file(str(ws), "a.txt", b"secret body\n")
    repo = s.core.store.repo()
    head = str(repo.references[REF].target)
    tip, mirrored = anchor.extend(s.core.store)
    assert mirrored == head
    journal, mirror = _chain(repo, head), _chain(repo, tip)
    assert [anchor.event_of(m) for m in mirror] == [str(e.id) for e in journal]
    for event, m in zip(journal, mirror):
        assert m.tree["state.json"].id == event.tree["state.json"].id
        images = {e.name for e in event.tree if e.name != "state.json"}
        assert {e.name for e in m.tree} == {"state.json"} | ({"images.json"} if images else set())
        assert anchor.payload_of(m) == parse_message(event.message)[0]
        for entry in m.tree:                     # no image blob is reachable from the mirror
            assert b"secret body" not in repo[entry.id].data
    assert any("images.json" in m.tree for m in mirror)


def test_extend_is_incremental_deterministic_and_rebuilds_when_lost(svc, ws):
    s = svc()
    s.write_file(str(ws), "a.txt", b"1\n")
    first, _ = anchor.extend(s.core.store)
    s.write_file(str(ws), "a.txt", b"2\n")
    second, _ = anchor.extend(s.core.store)
    repo = s.core.store.repo()
    assert repo.descendant_of(second, first)
    assert anchor.extend(s.core.store)[0] == second           # nothing new: the same tip
    repo.references.delete(anchor.ANCHOR_REF)
    assert anchor.extend(s.core.store)[0] == second           # rebuilt: the same ids


def test_a_rewritten_journal_is_refused(svc, ws):
    s = svc()
    s.write_file(str(ws), "a.txt", b"1\n")
    anchor.extend(s.core.store)
    repo = s.core.store.repo()
    head = repo[repo.references[REF].target]
    sig = pygit2.Signature("x", "x@x", 1, 0)
    forged = repo.create_commit(None, sig, sig, head.message, head.tree_id, [])   # a new, rootless history
    with pytest.raises(IntegrityError, match="rewritten"):
        anchor.extend(s.core.store, str(forged))


def test_a_stale_view_of_the_journal_is_not_a_rewrite(svc, ws):
    """Another process appended and mirrored further than this one has seen (found in review)."""
    s = svc()
    s.write_file(str(ws), "a.txt", b"1\n")
    repo = s.core.store.repo()
    old = str(repo.references[REF].target)
    s.write_file(str(ws), "a.txt", b"2\n")
    tip, done = anchor.extend(s.core.store)
    assert anchor.extend(s.core.store, old) == (tip, done)
    repo.references[REF].set_target(pygit2.Oid(hex=old))      # now the journal itself went back
    with pytest.raises(IntegrityError, match="rolled back"):
        anchor.extend(s.core.store, old)
