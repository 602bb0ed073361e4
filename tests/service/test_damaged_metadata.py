"""Damage is shown, never fatal (issue 33, finding 1): one checkpoint commit whose metadata
lacks `description` made log, diff, snapshot, health and restore fail with a TypeError, and
every later protected call run without a checkpoint while `journal verify` said ok."""
from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from chronos_git.engine.checkpoint import SCHEMA, CheckpointMeta


def _ref(store_dir: Path) -> tuple[pygit2.Repository, str]:
    repo = pygit2.Repository(str(store_dir))
    (ref,) = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")]
    return repo, ref


def plant(store_dir: Path, message: str) -> str:
    """A commit on top of the workspace's checkpoint ref, with the tip's tree and `message`."""
    repo, ref = _ref(store_dir)
    tip = repo.references[ref].peel(pygit2.Commit)
    sig = pygit2.Signature("x", "x@example.invalid")
    return str(repo.create_commit(ref, sig, sig, message, tip.tree_id, [tip.id]))


def without(store_dir: Path, *keys: str, **extra) -> str:
    """The tip's own message, its metadata without `keys` and with `extra`, planted on top."""
    repo, ref = _ref(store_dir)
    lines = repo.references[ref].peel(pygit2.Commit).message.rstrip("\n").split("\n")
    meta = json.loads(lines[-1])
    for k in keys:
        meta.pop(k)
    meta.update(extra)
    return plant(store_dir, "\n".join(lines[:-1] + [json.dumps(meta)]) + "\n")


@pytest.fixture
def history(cli, ws):
    """Two intact checkpoints: (older, newer)."""
    first = cli("--json", "snapshot", "-m", "first", cwd=ws).json["checkpoint"]
    (ws / "a.txt").write_text("beta\n")
    second = cli("--json", "snapshot", "-m", "second", cwd=ws).json["checkpoint"]
    return first, second


def test_metadata_without_a_description_is_shown_not_fatal(cli, ws, store_dir, history):
    first, second = history
    bad = without(store_dir, "description")
    log = cli("--json", "log", cwd=ws)
    assert log.rc == 0, log.stdout + log.stderr
    listed = {c["id"]: c for c in log.json["checkpoints"]}
    assert set(listed) == {bad, second, first}
    assert "no description" in listed[bad]["damaged"] and "damaged" not in listed[second]
    text = cli("log", cwd=ws)
    assert text.rc == 0 and "damaged" in text.stdout, text.stdout + text.stderr
    for args in (["diff"], ["show", "1"], ["show", bad]):
        r = cli(*args, cwd=ws)
        assert r.rc == 0, (args, r.stdout + r.stderr)
    health = cli("health", cwd=ws)
    assert health.rc == 0 and "DEGRADED" in health.stdout and bad[:12] in health.stdout, health.stdout + health.stderr
    h = cli("--json", "health", cwd=ws).json
    assert h["protection"]["state"] == "degraded" and any(d["id"] == bad for d in h["damaged"])
    dry = cli("--json", "restore", first, "--dry-run", cwd=ws)
    assert dry.rc == 0 and dry.json["restored_checkpoint"] == first, dry.stdout + dry.stderr
    (ws / "a.txt").write_text("gamma\n")
    snap = cli("--json", "snapshot", "-m", "after the damage", cwd=ws)
    assert snap.rc == 0 and snap.json["created"], snap.stdout + snap.stderr
    repo, ref = _ref(store_dir)
    assert [str(p) for p in repo[snap.json["checkpoint"]].parent_ids] == [bad]      # a readable parent serves
    assert cli("--json", "journal", "verify", cwd=ws).json["status"] == "ok"


def test_a_protected_call_keeps_its_checkpoint_past_damaged_metadata(cli, ws, store_dir, history):
    without(store_dir, "description", "files")
    r = cli("run", "--", "sh", "-c", "echo new > new.txt", cwd=ws)
    assert r.rc == 0 and "no checkpoint was taken" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("change, reason", [
    ({"files": "many"}, "files is not"), ({"time": "yesterday"}, "time is not"),
    ({"skipped": [{"path": 1}]}, "skipped is not"), ({"nested_repos": "x"}, "nested_repos is not"),
    ({"modes": {"600": "a"}}, "modes is not"), ({"time": 1e300}, "time is not"),
    ({"surprise": 1}, "unknown field"), ({"kind": None}, "kind is not"),
])
def test_wrong_typed_and_extra_fields_are_named(change, reason):
    meta = CheckpointMeta(description="d", time=1.0e9)
    payload = {"schema": SCHEMA, **meta.__dict__, **change}
    parsed, problems = CheckpointMeta.parse("chronos checkpoint: d\n\n" + json.dumps(payload) + "\n")
    assert any(reason in p for p in problems), problems
    assert parsed.description == "d"


def test_intact_metadata_has_no_problems():
    meta = CheckpointMeta(description="d", modes={"600": ["secret"]})
    parsed, problems = CheckpointMeta.parse(meta.to_message())
    assert problems == [] and parsed == meta


def _break_ref(store_dir: Path, ws: Path, *, target: str, head: bool) -> None:
    repo, ref = _ref(store_dir)
    (store_dir / ref).write_text(target + "\n")
    repo.references  # noqa: B018 - nothing cached: the next reader sees the file
    if head:
        for h in (store_dir / "worktrees").glob("*/HEAD"):
            h.write_text("0" * 40 + "\n")


@pytest.mark.parametrize("head", [False, True], ids=["head-intact", "head-lost"])
def test_an_unreadable_tip_is_named_and_the_next_snapshot_mends_it(cli, ws, store_dir, history, head):
    first, second = history
    assert cli("health", cwd=ws).rc == 0       # started: this boot's power-cut check is behind (next test)
    missing = "1234567" * 5 + "89abc"
    _break_ref(store_dir, ws, target=missing, head=head)
    h = cli("--json", "health", cwd=ws)
    assert h.rc == 0 and h.json["protection"]["state"] == "degraded", h.stdout + h.stderr
    assert "not in the store" in h.json["protection"]["reason"] and h.json["gate"] == "open"
    for args in (["log"], ["diff"], ["show", "1"]):
        r = cli("--json", *args, cwd=ws)
        assert r.rc in (0, 1) and r.json.get("code") != "internal", r.stdout + r.stderr
    (ws / "a.txt").write_text("gamma\n")
    snap = cli("--json", "snapshot", "-m", "mended", cwd=ws)
    assert snap.rc == 0 and snap.json["created"] and "note" not in snap.json, snap.stdout + snap.stderr
    repo, ref = _ref(store_dir)
    new = repo[snap.json["checkpoint"]]
    assert [str(p) for p in new.parent_ids] == ([] if head else [second])
    assert str(repo.references[ref].target) == str(new.id)
    assert snap.json["damaged_tip"].get("parent") == (None if head else second)
    jl = cli("--json", "journal", "log", cwd=ws)
    ev = [e for e in jl.json["events"] if e.get("action") == "damaged_tip"]
    assert ev and ev[0]["was"] == missing and ev[0]["checkpoint"] == str(new.id), jl.stdout
    assert cli("--json", "health", cwd=ws).json["protection"]["state"] == "on"
    dry = cli("--json", "restore", first if not head else str(new.id), "--dry-run", cwd=ws)
    assert dry.rc == 0, dry.stdout + dry.stderr


def test_a_tip_damaged_in_this_boot_closes_the_gate_and_health_still_answers(cli, ws, store_dir, history):
    """Found by the first start's power-cut check with no reboot since: not a power cut's, so
    the journal is in doubt (engine.powercut); health names both, and a snapshot still works."""
    _break_ref(store_dir, ws, target="1234567" * 5 + "89abc", head=False)
    h = cli("health", cwd=ws)
    assert h.rc == 0 and "DEGRADED" in h.stdout and "CLOSED" in h.stdout, h.stdout + h.stderr
    assert "damaged: " in h.stdout and "names no readable checkpoint" in h.stdout
    (ws / "a.txt").write_text("gamma\n")
    snap = cli("--json", "snapshot", "-m", "mended", cwd=ws)
    assert snap.rc == 0 and snap.json["created"] and "could not be journaled" in snap.json["note"], snap.stdout


def test_a_message_in_an_unknown_encoding_is_named(cli, ws, store_dir, history):
    # started first: this boot's power-cut check (engine/powercut.py) still reads the message as is
    assert cli("health", cwd=ws).rc == 0
    repo, ref = _ref(store_dir)
    tip = repo.references[ref].peel(pygit2.Commit)
    raw = (b"tree %s\nparent %s\nauthor x <x@example.invalid> 1 +0000\ncommitter x <x@example.invalid> 1 +0000\n"
           b"encoding no-such-encoding\n\n" % (str(tip.tree_id).encode(), str(tip.id).encode())) + tip.raw_message
    (store_dir / ref).write_text(f"{repo.odb.write(pygit2.GIT_OBJECT_COMMIT, raw)}\n")
    log = cli("--json", "log", cwd=ws)
    assert log.rc == 0 and "encoding" in log.json["checkpoints"][0]["damaged"], log.stdout
    assert log.json["checkpoints"][0]["description"] == "second"       # the metadata itself still reads
    h = cli("--json", "health", cwd=ws)
    assert h.json["protection"]["state"] == "degraded", h.stdout
