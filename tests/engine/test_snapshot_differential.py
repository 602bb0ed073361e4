"""Every way a snapshot reads the workspace (engine/snapshot_plan.py: unchanged, declared,
watched, scan, bulk) against the slowest, surest one: after every snapshot of a random
workload, its tree is compared with the tree a fresh store's full scan of the same files makes
(a new Store and Workspace, an empty stat cache, every file hashed: no cache to trust).

The workloads (seeded) write, delete, rename and chmod files, make folders and symlinks, edit
`.gitignore` (widening it, and narrowing it over files not captured), rewrite a file within the
same second as the previous snapshot, drop the stat cache's handle as a compaction does, and
snapshot by declared paths, by the watcher's dirty set (half the seeds run one), by a diff's
refresh that makes no checkpoint, by a forced walk, and again with nothing changed.

A declared snapshot is compared only when the declared paths are all that changed since the
last checkpoint (otherwise it legitimately keeps the rest as the checkpoint had it); every
walked or watched one, and every one after it, must hold everything.
"""
from __future__ import annotations

import os
import random
import time

from chronos_git.engine.checkpoint import CheckpointMeta
from chronos_git.engine.config import EngineConfig
from chronos_git.engine.snapshot_plan import CacheFacts, Strategy, choose
from chronos_git.engine.store import Store

SEEDS = range(6)
STEPS = 20
IGNORE_ON = "*.log\nbuild/\n"
IGNORE_OFF = "build/\n"


def _oracle(tmp_path, root) -> str:
    """The tree of a full scan by a store that has never seen `root`: an empty index, every
    file hashed (a deadline rules the bulk import out, so this is the scan's own walk)."""
    store = Store.open(tmp_path / f"oracle-{os.urandom(6).hex()}", EngineConfig())
    res = store.workspace(root).snapshot(CheckpointMeta(description="oracle"), commit=False,
                                         deadline=time.monotonic() + 600)
    assert not res.partial
    return res.tree_id


class Workload:
    """Random changes to `root`; each returns the workspace-relative paths a caller that
    declares its paths would name (None: a change no declared snapshot can describe)."""

    def __init__(self, root, rng: random.Random):
        self.root, self.rng, self.n = str(root), rng, 0

    def _p(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def files(self) -> list[str]:
        out = []
        for d, dirs, fs in os.walk(self.root):
            dirs[:] = [x for x in dirs if x != "build"]
            out += [os.path.relpath(os.path.join(d, f), self.root) for f in fs]
        return sorted(f for f in out if f != ".gitignore" and not f.endswith(".log"))

    def _write(self, rel: str, text: str) -> None:
        os.makedirs(os.path.dirname(self._p(rel)) or self.root, exist_ok=True)
        with open(self._p(rel), "w") as fh:
            fh.write(text)

    def step(self, declarable: bool) -> list[str] | None:
        self.n += 1
        ops = ["write", "write", "append", "delete", "rename", "chmod", "newdir", "link", "rmdir",
               "ignored"]
        if not declarable:
            ops += ["unignore", "reignore"]
        op = self.rng.choice(ops)
        files = self.files()
        if op in ("append", "delete", "rename", "chmod") and not files:
            op = "write"
        i = self.n
        if op == "write":
            rel = self.rng.choice([f"f{i % 7}.txt", f"src/m{i % 5}.py", f"new{i}.txt"])
            if os.path.isdir(self._p(rel)):
                rel = f"new{i}.txt"
            self._write(rel, f"content {i} {self.rng.random()}\n")
            return [rel]
        if op == "append":
            rel = self.rng.choice(files)
            if os.path.islink(self._p(rel)):
                os.unlink(self._p(rel))
            else:
                with open(self._p(rel), "a") as fh:
                    fh.write(f"more {i}\n")
            return [rel]
        if op == "delete":
            rel = self.rng.choice(files)
            os.unlink(self._p(rel))
            return [rel]
        if op == "rename":
            rel = self.rng.choice(files)
            dst = f"moved{i}/{os.path.basename(rel)}" if self.rng.random() < 0.5 else f"r{i}-{os.path.basename(rel)}"
            os.makedirs(os.path.dirname(self._p(dst)) or self.root, exist_ok=True)
            os.rename(self._p(rel), self._p(dst))
            return [rel, dst]
        if op == "chmod":
            rel = self.rng.choice(files)
            if not os.path.islink(self._p(rel)):
                os.chmod(self._p(rel), os.stat(self._p(rel)).st_mode ^ 0o111)
            return [rel]
        if op == "newdir":
            rels = [f"d{i}/sub/x{k}.txt" for k in range(self.rng.randint(1, 3))]
            for k, rel in enumerate(rels):
                self._write(rel, f"new dir {i} {k}\n")
            return [f"d{i}"] if self.rng.random() < 0.5 else rels
        if op == "link":
            rel = f"link{i}"
            os.symlink(self.rng.choice(files) if files else "nowhere", self._p(rel))
            return [rel]
        if op == "rmdir":
            dirs = sorted({f.split("/")[0] for f in files if "/" in f})
            if not dirs:
                return self.step(declarable)
            d = self.rng.choice(dirs)
            for top, subdirs, fs in os.walk(self._p(d), topdown=False):
                for f in fs:
                    os.unlink(os.path.join(top, f))
                for s in subdirs:
                    os.rmdir(os.path.join(top, s))
            os.rmdir(self._p(d))
            return [d]
        if op == "ignored":                  # never captured, declared or not
            rel = self.rng.choice([f"build/out{i}.o", f"trace{i}.log"])
            with open(self._p(".gitignore")) as fh:
                if rel.endswith(".log") and "*.log" not in fh.read():
                    rel = f"build/out{i}.o"
            self._write(rel, f"ignored {i}\n")
            return []
        if op == "unignore":                 # widening: the logs written so far are captured now
            self._write(".gitignore", IGNORE_OFF)
            return None
        # narrowing, over files no checkpoint holds (git keeps what it tracks: a fresh scan
        # would not, so the captured logs go first)
        for f in os.listdir(self.root):
            if f.endswith(".log"):
                os.unlink(self._p(f))
        self._write(".gitignore", IGNORE_ON)
        return None

    def same_second(self) -> list[str]:
        """A file rewritten at once, the same size (the snapshot before ended a moment ago)."""
        files = [f for f in self.files() if not os.path.islink(self._p(f))]
        rel = self.rng.choice(files) if files else "f0.txt"
        size = os.path.getsize(self._p(rel)) if files else 4
        self._write(rel, "".join(self.rng.choice("abcdefgh") for _ in range(size)))
        return [rel]


def _run(tmp_path, seed: int, watch: bool) -> dict[str, int]:
    root = tmp_path / f"ws{seed}"
    root.mkdir()
    (root / ".gitignore").write_text(IGNORE_ON)
    (root / "src").mkdir()
    for k in range(6):
        (root / f"f{k}.txt").write_text(f"start {k}\n")
        (root / "src" / f"m{k}.py").write_text(f"print({k})\n")
    (root / "old.log").write_text("ignored\n")
    rng = random.Random(seed)
    store = Store.open(tmp_path / f"store{seed}", EngineConfig())
    ws = store.workspace(root)
    if watch:
        assert ws.enable_watcher()
    work = Workload(root, rng)
    seen: dict[str, int] = {}
    pending = False          # the disk holds changes the newest checkpoint does not (a diff's)

    def check(res, what: str, compare: bool = True) -> None:
        seen[res.report["scan"]] = seen.get(res.report["scan"], 0) + 1
        assert not res.partial, what
        if compare:
            want = _oracle(tmp_path, root)
            assert res.tree_id == want, (f"seed {seed} ({'watched' if watch else 'no watcher'}), {what}: "
                                         f"the {res.report['scan']} snapshot's tree {res.tree_id[:12]} is not "
                                         f"the full scan's {want[:12]}")

    check(ws.snapshot(CheckpointMeta(description="first")), "the first snapshot")
    try:
        for step in range(STEPS):
            what = f"step {step}"
            kind = rng.choice(["declared", "declared", "declared", "walk", "walk", "force", "diff",
                               "again", "same_second", "compaction"])
            if pending and rng.random() < 0.6:
                kind = "declared"            # a file call after a diff: the lost-change bug of an alignment
            if kind == "declared":
                touched = [r for _ in range(rng.randint(1, 3)) for r in work.step(declarable=True)]
                res = ws.snapshot(CheckpointMeta(description=what),
                                  paths=[os.path.join(str(root), r) for r in touched] or [str(root / "f0.txt")])
                check(res, f"{what}, declared {touched}", compare=not pending)
                continue
            for _ in range(rng.randint(0 if kind == "again" else 1, 2)):
                work.step(declarable=False)
            if kind == "compaction":
                store.handles_generation += 1       # what a compaction does: handles reopened
            if kind == "diff":
                check(ws.snapshot(CheckpointMeta(description=what), commit=False), f"{what}, a diff's refresh")
                pending = True
                continue
            res = ws.snapshot(CheckpointMeta(description=what), force_scan=kind == "force")
            check(res, f"{what}, {kind}")
            pending = False
            if kind in ("again", "same_second"):
                if kind == "same_second":
                    touched = work.same_second()
                    declared = rng.random() < 0.5
                    res = ws.snapshot(CheckpointMeta(description=what + " again"),
                                      paths=[str(root / touched[0])] if declared else None)
                else:
                    res = ws.snapshot(CheckpointMeta(description=what + " again"))
                check(res, f"{what}, {kind} once more")
        check(ws.snapshot(CheckpointMeta(description="last")), "the last snapshot")
    finally:
        if watch:
            ws._watcher.stop()
    return seen


def test_every_snapshot_holds_what_a_fresh_full_scan_holds(tmp_path):
    """Odd seeds run a watcher; across the seeds all five strategies are carried out."""
    seen: dict[str, int] = {}
    for seed in SEEDS:
        mine = _run(tmp_path, seed, watch=seed % 2 == 1)
        assert mine.get("bulk") == 1 and mine.get("declared"), (seed, mine)
        for k, v in mine.items():
            seen[k] = seen.get(k, 0) + v
    assert {s.value for s in Strategy} <= set(seen), seen


class _Watch:
    walks: tuple[str, ...] = ()

    def __init__(self, quiet: bool, trusted: bool):
        self._quiet, self._trusted, self.took = quiet, trusted, 0

    def quiet(self) -> bool:
        return self._quiet

    def take(self):
        self.took += 1
        return self._trusted, {"b", "a"}, "ok" if self._trusted else "queue overflow"


def _facts(**kw) -> CacheFacts:
    base = {"commit": True, "force_scan": False, "declared": False, "has_tip": True, "settled": True,
            "index_holds_tip": True, "index_empty": False, "budgeted": False}
    return CacheFacts(**{**base, **kw})


def test_the_plan_takes_the_watchers_set_only_for_a_whole_refresh():
    w = _Watch(quiet=True, trusted=True)
    assert choose(_facts(), w).strategy is Strategy.UNCHANGED and w.took == 0
    assert choose(_facts(commit=False, declared=True), w).strategy is Strategy.DECLARED and w.took == 0
    plan = choose(_facts(commit=False), w)
    assert (plan.strategy, plan.paths, plan.took_watch, w.took) == (Strategy.WATCHED, ("a", "b"), True, 1)
    assert choose(_facts(force_scan=True), w).strategy is Strategy.SCAN
    first = choose(_facts(has_tip=False, declared=True, index_empty=True), _Watch(False, False))
    assert (first.strategy, first.fallback) == (Strategy.BULK, Strategy.SCAN)
    assert first.fall_back().strategy is Strategy.SCAN and first.fall_back().took_watch
    assert choose(_facts(has_tip=False, index_empty=True, budgeted=True), None).strategy is Strategy.SCAN
    assert not choose(_facts(settled=False), None).took_watch


def test_a_trusted_watcher_never_refreshes_into_an_empty_stat_cache():
    """Its list is complete only against the last whole picture: into an empty stat cache (a
    dropped index, a bulk import that failed) it would commit the changed paths alone."""
    w = _Watch(quiet=False, trusted=True)
    plan = choose(_facts(index_empty=True, settled=False, index_holds_tip=False), w)
    assert plan.strategy is Strategy.SCAN and plan.took_watch and "empty" in plan.why
    first = choose(_facts(has_tip=False, index_empty=True), _Watch(False, True))
    assert (first.strategy, first.fallback) == (Strategy.BULK, Strategy.SCAN)
    assert choose(_facts(settled=False), _Watch(False, True)).strategy is Strategy.WATCHED
