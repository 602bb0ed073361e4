"""Checkpoint numbers (`@N`): given once by the chain, never changed by later checkpoints,
restores, compaction or retention; a chain written before numbers is numbered once, oldest
first, and the next checkpoint continues from there."""
from __future__ import annotations

import pygit2
import pytest

from chronos_git.engine import compaction
from chronos_git.engine import restore as restore_mod
from chronos_git.engine.chain import Chain
from chronos_git.engine.checkpoint import CheckpointMeta, role_of
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.errors import CheckpointNotFound
from chronos_git.engine.store import Store


@pytest.fixture
def store(store_dir):
    return Store.open(store_dir, EngineConfig(max_checkpoints=0, size_budget_mb=0))


def snap(store, ws, i):
    (ws / "a.txt").write_text(f"version {i}\n")
    return store.workspace(ws).snapshot(CheckpointMeta(description=f"v{i}")).checkpoint


def numbers(store, ws) -> dict[str, int]:
    return {c.id: c.number for c in store.workspace(ws).checkpoints()}


def test_numbers_are_given_once_and_survive_restores_and_retention(store, ws):
    ids = [snap(store, ws, i).id for i in range(5)]
    w = store.workspace(ws)
    assert [c.number for c in w.checkpoints()] == [5, 4, 3, 2, 1]
    assert w.resolve("@2").id == ids[1] and w.resolve("2").id == ids[3]      # @N: number; N: index
    before = numbers(store, ws)
    (ws / "a.txt").write_text("edited after the last checkpoint\n")
    res = restore_mod.restore(w, "@1")
    assert res["safety_checkpoint"] and numbers(store, ws)[res["safety_checkpoint"]] == 6
    assert {k: v for k, v in numbers(store, ws).items() if k in before} == before
    assert w.resolve("@1").id == ids[0]
    compaction.compact(store, max_checkpoints=3, size_budget_bytes=0, grace_s=0)
    kept = numbers(store, ws)
    assert sorted(kept.values()) == [4, 5, 6] and all(before.get(k, 6) == v for k, v in kept.items())
    with pytest.raises(CheckpointNotFound, match="no checkpoint @2"):
        w.resolve("@2")
    assert snap(store, ws, 9).number == 7


def test_a_chain_from_before_numbers_is_numbered_oldest_first(store, ws, monkeypatch):
    monkeypatch.setattr(Chain, "_next_number", lambda self, tip: None)     # as older versions wrote
    legacy = [snap(store, ws, i).id for i in range(3)]
    repo = store.repo()
    assert all('"number"' not in repo[c].message for c in legacy)
    monkeypatch.undo()
    w = store.workspace(ws)
    assert [(c.id, c.number) for c in w.checkpoints()] == list(zip(reversed(legacy), [3, 2, 1]))
    assert w.tip().number == 3 and w.resolve("@1").id == legacy[0]
    new = snap(store, ws, 3)
    assert new.number == 4 and '"number":4' in repo[new.id].message
    assert [c.number for c in w.checkpoints()] == [4, 3, 2, 1]


def test_roles_are_written_and_derived_for_older_checkpoints():
    assert role_of(CheckpointMeta(description="before write_file", tool="write_file")) == "before_call"
    assert role_of(CheckpointMeta(description="after terminal", tool="terminal")) == "after_call"
    assert role_of(CheckpointMeta(description="at turn start", tool="turn start")) == "turn_start"
    assert role_of(CheckpointMeta(description="x", kind="safety")) == "safety"
    meta = CheckpointMeta(description="x", role="restored", restored_from="a" * 40, number=3)
    back, problems = CheckpointMeta.parse(meta.to_message())
    assert problems == [] and (back.role, back.restored_from, back.number) == ("restored", "a" * 40, 3)
    bad = meta.to_message().replace('"role":"restored"', '"role":"wizard"')
    assert "role is not one of" in "; ".join(CheckpointMeta.parse(bad)[1])


def test_a_commit_is_numbered_from_the_tip_it_was_written_on(store, ws):
    first = snap(store, ws, 0)
    assert first.number == 1
    assert isinstance(store.repo()[first.id], pygit2.Commit)


def test_metadata_with_an_odd_role_is_damaged_never_a_crash():
    import json

    from chronos_git.engine.checkpoint import CheckpointMeta
    good = CheckpointMeta(description="x", role="manual").to_message()
    head, _, body = good.rpartition("\n\n")
    for odd in (["before_call"], {"a": 1}, 7, "nonsense"):
        doc = json.loads(body)
        doc["role"] = odd
        meta, problems = CheckpointMeta.parse(head + "\n\n" + json.dumps(doc), when=1.0)
        assert meta.role is None and any("role" in p for p in problems), (odd, problems)
