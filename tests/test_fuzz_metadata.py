"""Fuzz: damaged checkpoint metadata, commit messages and refs never take a read command down
(issue 33, finding 1).  Seeded and in this process: each case plants one kind of damage on
a workspace with intact history, drives log, show, diff, health, restore --dry-run of an
intact checkpoint and snapshot through the CLI, then puts the ref back for the next case."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest
from support.helpers import run_cli

from chronos_git.engine.checkpoint import SCHEMA, Checkpoint, CheckpointMeta
from chronos_git.service.results import CheckpointInfo, LogResult

SEED = 3301
CLI_CASES = 24              # each runs six commands (about 0.5 s)
PARSE_CASES = 400           # metadata alone: parse, the typed result, the renderer

# values each field never takes (so a case that uses one is damaged by construction)
INVALID: dict[str, list] = {
    "description": [None, 1, [], {}], "kind": [None, 2, ["x"]], "tool": [1, [], {}],
    "session_id": [1.5, []], "turn_id": [True], "tool_call_id": [{}], "note": [3, ["n"]],
    "time": ["yesterday", None, -5, 1e300, float("inf"), float("nan"), True, [1]],
    "skipped": ["x", [1], [{"path": 1, "reason": "r"}], [{"path": "p"}], None,
                [{"path": "p", "reason": "r", "size": -1}], [{"path": "p", "reason": "r", "odd": 1}]],
    "nested_repos": ["x", [1], None, {}], "added_bytes": [-1, "1", 1.5, None, True],
    "files": [-1, "1", 2.5, None, False], "modes": ["600", {"600": "a"}, {"600": [1]}, [], 7],
}
# hostile values that are still valid: shown (escaped), never damage
HOSTILE_TEXT = ["\x1b[31mred\x1b[0m", "line\nbreak", "\ud800lone", "[bold]markup[/bold]", "x" * 3000, "", "\u202eevil"]
NO_METADATA = [b"", b"\n", b"just a subject\n", b"chronos checkpoint: x\n\n[]\n", b"chronos checkpoint: x\n\nnull\n",
               b'chronos checkpoint: x\n\n{"schema": "other"}\n', b"chronos checkpoint: x\n\n{\n",
               b"chronos checkpoint: x\n\n" + b"[" * 200_000 + b"\n", b"bad \xff\xfe bytes\n\n\xff{}\n"]
REF_DAMAGE = ["missing", "tree", "blob", "symbolic", "self-symbolic", "garbage", "empty", "truncated", "corrupt",
              "missing-parent"]


@dataclass
class Case:
    what: str
    message: bytes | None = None      # a commit planted on the tip
    ref: str | None = None            # what the ref is made to name instead
    reason: str = ""                  # a word the damage must name
    restorable: bool = True           # the older intact checkpoint is still on the chain


def metadata_case(rng: random.Random, base: dict) -> Case:
    meta = dict(base)
    fields = [k for k in INVALID if k in meta or k == "modes"]
    mode = rng.choice(["missing", "extra", "wrong"])
    if mode == "missing":
        key = rng.choice([k for k in fields if k in meta])
        del meta[key]
        reason = f"no {key}"
    elif mode == "extra":
        key = rng.choice(["surprise", "\x1b[2J", "description2", "x" * 200])
        meta[key] = rng.choice([1, None, "v", [1, 2]])
        reason = "unknown field"
    else:
        key = rng.choice(fields)
        meta[key] = rng.choice(INVALID[key])
        reason = f"{key} is not"
    for k in rng.sample(["description", "tool", "note", "session_id"], 2):    # hostile but valid
        if k != key and k in meta:
            meta[k] = rng.choice(HOSTILE_TEXT)
    text = "chronos checkpoint: fuzz\n\nKind: full\n\n" + json.dumps(meta) + "\n"
    return Case(f"metadata {mode} {key!r}", message=text.encode("utf-8", "surrogatepass"), reason=reason)


def make_cases(rng: random.Random, base: dict, n: int) -> list[Case]:
    """`n` cases, families in turn (metadata, a ref, a message, a ref) so that a short run
    reaches every kind of ref damage; the parse-only test covers metadata in depth."""
    refs = list(REF_DAMAGE)
    rng.shuffle(refs)
    out = []
    for i in range(n):
        family = ("metadata", "ref", "message", "ref")[i % 4]
        if family == "metadata":
            out.append(metadata_case(rng, base))
        elif family == "message":
            out.append(Case("message without metadata", message=rng.choice(NO_METADATA), reason="no chronos-git"))
        else:
            kind = refs[(i // 2) % len(refs)]
            out.append(Case(f"ref {kind}", ref=kind, restorable=kind != "missing-parent"))
    return out


class Store:
    """A workspace with three intact checkpoints, and the means to damage it and undo that."""

    def __init__(self, tmp_path: Path):
        self.dir, self.ws = tmp_path / "store", tmp_path / "ws"
        self.ws.mkdir()
        ids = []
        for i in range(3):
            (self.ws / "a.txt").write_text(f"version {i}\n")
            ids.append(self.cli("snapshot", "-m", f"intact {i}").json["checkpoint"])
        self.first, self.base = ids[0], ids[-1]
        assert self.cli("health").rc == 0           # started: this boot's power-cut check is behind
        self.repo = pygit2.Repository(str(self.dir))
        (self.ref,) = [r for r in self.repo.references if r.startswith("refs/chronos/snapshots/")]
        (self.head,) = (self.dir / "worktrees").glob("*/HEAD")
        self.meta = json.loads(self.repo[self.base].message.rstrip("\n").rsplit("\n", 1)[-1])

    def cli(self, *args):
        r = run_cli(self.dir, "--json", *args, cwd=self.ws)
        assert "Traceback" not in r.stderr, r.stderr
        doc = r.json
        assert r.rc in (0, 1) and doc.get("code") != "internal", (args, r.rc, r.stdout[:2000])
        assert r.rc == 0 or doc.get("error"), (args, r.stdout[:2000])
        return r

    def raw_commit(self, message: bytes, parents: list[str]) -> str:
        tree = str(self.repo[self.base].tree_id)
        head = b"tree %s\n" % tree.encode() + b"".join(b"parent %s\n" % p.encode() for p in parents)
        head += b"author x <x@example.invalid> 1700000000 +0000\ncommitter x <x@example.invalid> 1700000000 +0000\n\n"
        return str(self.repo.odb.write(pygit2.GIT_OBJECT_COMMIT, head + message))

    def set_ref(self, text: str) -> None:
        (self.dir / self.ref).write_text(text)

    def plant(self, case: Case) -> str | None:
        """Damage the store as `case` says; the planted commit, if any."""
        if case.message is not None:
            cid = self.raw_commit(case.message, [self.base])
            self.set_ref(cid + "\n")
            return cid
        valid = CheckpointMeta(description="valid").to_message().encode()
        kind = case.ref
        if kind == "missing":
            self.set_ref("1234567" * 5 + "89abc\n")
        elif kind in ("tree", "blob"):
            oid = self.repo[self.base].tree_id if kind == "tree" else self.repo.create_blob(b"not a commit\n")
            self.set_ref(f"{oid}\n")
        elif kind == "symbolic":
            self.set_ref("ref: refs/chronos/nowhere\n")
        elif kind == "self-symbolic":
            self.set_ref(f"ref: {self.ref}\n")
        elif kind == "garbage":
            self.set_ref("not a ref at all\n")
        elif kind == "empty":
            self.set_ref("")
        elif kind in ("truncated", "corrupt"):
            cid = self.raw_commit(valid + os.urandom(8).hex().encode(), [self.base])
            path = self.dir / "objects" / cid[:2] / cid[2:]
            data = path.read_bytes()
            path.chmod(0o644)
            path.write_bytes(data[: len(data) // 2] if kind == "truncated" else data[:2] + b"\x00" * (len(data) - 2))
            self.set_ref(cid + "\n")
        elif kind == "missing-parent":
            cid = self.raw_commit(valid, ["fedcba9" * 5 + "87654"])
            self.set_ref(cid + "\n")
            return cid
        return None

    def undo(self) -> None:
        self.set_ref(self.base + "\n")
        self.head.write_text(self.base + "\n")


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path)


def test_damaged_history_is_named_and_every_read_command_answers(store):
    cases = make_cases(random.Random(SEED), store.meta, CLI_CASES)
    assert {c.ref for c in cases} >= set(REF_DAMAGE)
    for n, case in enumerate(cases):
        planted = store.plant(case)
        try:
            log = store.cli("log")
            assert log.rc == 0, (case, log.stdout)
            listed = {c["id"]: c for c in log.json["checkpoints"]}
            if case.message is not None:
                assert case.reason in listed[planted].get("damaged", ""), (case, listed[planted])
            else:
                assert log.json.get("damaged"), (case, log.stdout)
            for args in (["show", "1"], ["diff"]):
                assert store.cli(*args).rc == 0, (case, args)
            health = store.cli("health")
            assert health.rc == 0 and health.json["protection"]["state"] == "degraded", (case, health.stdout)
            assert health.json["damaged"] and health.json["gate"] == "open", (case, health.stdout)
            dry = store.cli("restore", store.first, "--dry-run")
            assert dry.rc == 0 or not case.restorable, (case, dry.stdout)
            (store.ws / "a.txt").write_text(f"case {n}\n")
            snap = store.cli("snapshot", "-m", f"after case {n}")
            assert snap.rc == 0 and snap.json["created"], (case, snap.stdout)
        finally:
            store.undo()
    assert store.cli("health").json["protection"]["state"] == "on"


def test_checkpoint_metadata_fuzz_parses_renders_and_names_the_damage():
    """Many more metadata cases, without the CLI: parse, the typed result, the terminal text."""
    from chronos_git.cli import render
    rng = random.Random(SEED + 1)
    base = {"schema": SCHEMA, **CheckpointMeta(description="base", time=1.7e9).__dict__}
    base.pop("modes")
    for _ in range(PARSE_CASES):
        case = (metadata_case(rng, base) if rng.random() < 0.8
                else Case("raw", rng.choice(NO_METADATA), reason="no chronos-git"))
        assert case.message is not None
        meta, problems = CheckpointMeta.parse(case.message.decode("utf-8", "replace"), when=1.6e9)
        assert any(case.reason in p for p in problems), (case, problems)
        cp = Checkpoint(id="a" * 40, tree_id="b" * 40, parent_id=None, meta=meta,
                        damage="damaged metadata: " + "; ".join(problems))
        info = CheckpointInfo(**cp.summary(1))
        res = LogResult(workspace="/w", checkpoints=[info])
        json.dumps(res.wire())
        assert "damaged" in render.text(res)
