"""P1..P6 for one corpus, the three comparators interleaved call by call.

Comparators (names used in the JSON):
  chronos  chronos-git through the service layer (Chronos.begin/finish/restore/compact)
  gitcli   the git CLI as a shadow-git plugin drives it (add -A + commit, persistent index)
  hermes   Hermes' built-in tools.checkpoint_manager.CheckpointManager, in-process

All three look at the same workspace.  For every call the order of the
comparators is rotated, `os.sync()` runs (untimed) before each one so that
nobody pays for another's writeback, and each comparator's timer only wraps
its own call (inside its worker process).
"""
from __future__ import annotations

import base64
import os
import random
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from . import journals, scale, timemachine, use_test_support
from .corpora import Corpus, make_workspace, say
from .gitcli import blob_id, dir_bytes, git, git_env
from .machine import fsync_latency_ms
from .rpc import Worker, WorkerError
from .stats import ratio, summary

HERMES_MAX_SNAPSHOTS = 100_000     # Hermes' default of 20 runs a `git gc` inside every call past the 20th
CHRONOS_SETTINGS = {"max_checkpoints": 0, "size_budget_mb": 0}   # keep everything: P6 compares like with like
NO_JOURNAL = "n/a: Hermes' checkpoints have no journal"


@dataclass
class Plan:
    calls: int          # P1, P2 measured calls
    warmup: int         # untimed calls before them (per comparator, interleaved too)
    p3_reps: int
    p4_reps: int
    p5_reps: int        # per kind (one file, ten files)
    large_events: int   # P4 "large" journal
    p0_sessions: int = 4   # per arm, after the first (P0f) session
    p0_calls: int = 50     # tool calls per session, write_file and terminal in turn
    p7_calls: int = 200    # P7: protected calls of one session
    p7_every: int = 50     # ... sampled this often
    p0_think_ms: int = 0   # the scripted model's response time in P0 (0: it answers at once)
    p8_reps: int = 10      # P8/P9: repetitions (each P8 one runs ten time-machine operations)
    log_checkpoints: int = 10_000   # P9: checkpoints of the workspace `log --all` lists
    timemachine: bool = True        # P8, P9 run on this corpus (--quick: on synthetic-1k only)


def plan_for(name: str, quick: bool, calls: int | None, journal_events: int | None) -> Plan:
    if quick:
        p = Plan(calls=5, warmup=1, p3_reps={"synthetic-1k": 2}.get(name, 1), p4_reps=8, p5_reps=3,
                 large_events=10_000, p0_sessions=1, p0_calls=4, p7_calls=20, p7_every=10, p8_reps=3,
                 timemachine=name == "synthetic-1k")
    else:
        p = Plan(calls=20, warmup=2, p3_reps={"synthetic-1k": 5, "synthetic-20k": 3}.get(name, 1),
                 p4_reps=20, p5_reps=20, large_events=100_000)
    if calls:
        p.calls = p.p4_reps = p.p5_reps = p.p8_reps = calls
    if journal_events:
        p.large_events = journal_events
    return p


def rotate(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


def _fmt_events(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


class CorpusRun:
    def __init__(self, corpus: Corpus, plan: Plan, *, repo: Path, cache: Path, keep: bool, profile: bool,
                 host: str = "hermes", figures: set[str] | None = None):
        self.corpus = corpus
        self.plan = plan
        self.repo = repo
        self.cache = cache
        self.keep = keep
        self.profile = profile
        self.host = host                         # how the chronos service runs: hermes | cli
        self.host_info: dict = {}
        self.figures = figures                   # None = all; P3 always runs (it sets up the stores)
        (cache / "runs").mkdir(parents=True, exist_ok=True)
        import tempfile
        self.rundir = Path(tempfile.mkdtemp(prefix=f"{corpus.name}-", dir=cache / "runs"))
        self.logdir = self.rundir / "logs"
        self.rng = random.Random(f"chronos-git bench {corpus.name}")
        self.ws: Path | None = None
        self.chronos_store: Path | None = None
        self.git_dir: Path | None = None
        self.hermes_base: Path | None = None
        self.hermes: str | None = None          # None = active, else "refused: ..." / "unavailable: ..."
        self.pool: list[str] = []
        self.results: dict = {}
        self.failures: list[str] = []
        self.new_files = 0

    # ------------------------------------------------------------ plumbing
    def spawn(self, kind: str, tag: str) -> Worker:
        env = {}
        if kind == "hermes":
            env["HERMES_HOME"] = str(self.rundir / "hermes-home")
        return Worker(kind, repo=self.repo, log_dir=self.logdir, env=env, tag=tag)

    def comparators(self) -> list[str]:
        return ["chronos", "gitcli"] + (["hermes"] if self.hermes is None else [])

    def open_workers(self, tag: str) -> dict[str, Worker]:
        ws = {}
        try:
            ws["chronos"] = self.spawn("chronos", tag)
            info = ws["chronos"].call("open", store_dir=str(self.chronos_store), ws=str(self.ws),
                                      settings=CHRONOS_SETTINGS, host=self.host)
            self.host_info = {k: info.get(k) for k in ("host", "host_note", "turn_checkpoint_ms") if info.get(k)}
            ws["gitcli"] = self.spawn("gitcli", tag)
            ws["gitcli"].call("open", git_dir=str(self.git_dir), ws=str(self.ws))
            if self.hermes is None:
                ws["hermes"] = self.spawn("hermes", tag)
                ws["hermes"].call("setup", base=str(self.hermes_base), ws=str(self.ws),
                                  max_snapshots=HERMES_MAX_SNAPSHOTS)
            for w in ws.values():
                w.mark_baseline()
        except BaseException:
            for w in ws.values():
                w.kill()
            raise
        return ws

    @staticmethod
    def close_workers(workers: dict[str, Worker]) -> dict:
        out = {}
        for name, w in workers.items():
            try:
                fin = w.close()
            except Exception:        # noqa: BLE001 - a dead worker has no RSS to report
                w.kill()
                continue
            hwm = fin.get("vmhwm_mb") or fin.get("ru_maxrss_self_mb")
            kids = fin.get("ru_maxrss_children_mb") or 0.0
            if name == "chronos":
                out["chronos_peak_rss_mb"] = hwm
                out["chronos_base_rss_mb"] = w.base_rss_mb
                if kids:
                    out["chronos_child_peak_rss_mb"] = kids
            elif name == "gitcli":
                out["gitcli_peak_rss_mb"] = kids       # the largest git process
            else:
                out["hermes_peak_rss_mb"] = max(hwm or 0, kids)
                out["hermes_inproc_peak_rss_mb"] = hwm
                out["hermes_base_rss_mb"] = w.base_rss_mb
                out["hermes_git_peak_rss_mb"] = kids
        return out

    def figure_row(self, times: dict[str, list[float]], extra: dict | None = None) -> dict:
        row = {}
        for name in ("chronos", "gitcli", "hermes"):
            if name == "hermes" and self.hermes is not None:
                row.update({"hermes_p50_ms": None, "hermes_p95_ms": None, "hermes_refused": self.hermes})
                continue
            row.update(summary(times.get(name, []), name))
        row["ratio"] = ratio(row.get("chronos_p50_ms"), row.get("gitcli_p50_ms"))
        row["ratio_p95"] = ratio(row.get("chronos_p95_ms"), row.get("gitcli_p95_ms"))
        if self.hermes is None:
            row["ratio_hermes"] = ratio(row.get("chronos_p50_ms"), row.get("hermes_p50_ms"))
        row.update(extra or {})
        return row

    def read(self, rel: str) -> bytes:
        with open(os.path.join(self.ws, rel), "rb") as fh:
            return fh.read()

    def write(self, rel: str, data: bytes) -> None:
        p = os.path.join(self.ws, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data)

    # ----------------------------------------------------------------- run
    def run(self) -> dict:
        t0 = time.monotonic()
        c = self.corpus
        out = {"corpus": c.name, "corpus_info": c.to_dict(), "plan": self.plan.__dict__,
               "rundir": str(self.rundir), "chronos_host": self.host}
        try:
            self.ws = make_workspace(c, self.rundir / "ws")
            out["workspace"] = str(self.ws)
            for fig, fn in (("P3", self.p3), ("P0", self.p0), ("P1", self.p1), ("P2", self.p2), ("P4", self.p4),
                            ("P5", self.p5), ("P6", self.p6), ("P7", self.p7), ("P8", self.p8), ("P9", self.p9),
                            ("P8S", self.p8s)):
                if self.figures is not None and fig != "P3" and fig not in self.figures:
                    continue
                if fig == "P3" and self.figures is not None and self.figures <= {"P8S"}:
                    continue                      # the scale rows take their own first snapshots
                if fig == "P8S" and self.figures is None:
                    continue                      # opt-in: --figures P8S
                if fig != "P3" and "error" in self.results.get("P3", {}):
                    self.results[fig] = {"error": "skipped: P3 (first snapshot) failed"}
                    continue
                if fig in ("P8", "P9") and not self.plan.timemachine:
                    self.results[fig] = {"skipped": "--quick runs P8 and P9 on synthetic-1k only"}
                    continue
                disk_ms = fsync_latency_ms(self.rundir, n=5)   # the disk is uneven: note it per figure
                tf = time.monotonic()
                say(f"{c.name}: {fig} ... (durable small write {disk_ms} ms)")
                try:
                    self.results[fig] = fn()
                except Exception as exc:          # noqa: BLE001 - one figure failing must not hide the rest
                    msg = f"{type(exc).__name__}: {exc}"
                    self.failures.append(f"{c.name} {fig}: {msg}")
                    self.results[fig] = {"error": msg}
                    say(f"{c.name}: {fig} FAILED: {msg}")
                    say(traceback.format_exc())
                self.results[fig]["wall_s"] = round(time.monotonic() - tf, 1)
                self.results[fig]["disk_durable_write_ms_before"] = disk_ms
                say(f"{c.name}: {fig} done in {self.results[fig]['wall_s']}s")
        finally:
            if not self.keep:
                shutil.rmtree(self.rundir, ignore_errors=True)
        out.update(self.results)
        out["hermes"] = self.hermes or "active"
        out["failures"] = self.failures
        out["wall_s"] = round(time.monotonic() - t0, 1)
        return out

    # ------------------------------------------------------------- P8S
    def p8s(self) -> dict:
        """Issue 37's scale rows (bench/scale.py); opt-in, meant for the mono-1m corpora."""
        return scale.p8_scale(self)

    # ------------------------------------------------------------- P8, P9
    def p8(self) -> dict:
        """The time machine: agent-only restore, revert, undo, redo, each beside a full restore."""
        return timemachine.p8(self)

    def p9(self) -> dict:
        """`log --all` over 10,000 checkpoints."""
        return timemachine.p9(self)

    # ------------------------------------------------------------------ P7
    def p7(self) -> dict:
        """Store growth over a session: writes, patches (both declared) and shell calls through
        the service; every `p7_every` calls the store's bytes against what `git gc` makes of the
        git CLI's store of the same workspace states (a gc'ed copy, untimed)."""
        workers = {"chronos": self.spawn("chronos", "P7"), "gitcli": self.spawn("gitcli", "P7")}
        samples = []
        try:
            workers["chronos"].call("open", store_dir=str(self.chronos_store), ws=str(self.ws),
                                    settings=CHRONOS_SETTINGS, host=self.host)
            workers["gitcli"].call("open", git_dir=str(self.git_dir), ws=str(self.ws))
            for i in range(1, self.plan.p7_calls + 1):
                if i % 3:                                   # write_file / patch: declared
                    rel, data, expect = self._pick_write(1000 + i)
                    workers["chronos"].call("pre_write", path=os.path.join(self.ws, rel),
                                            content_b64=base64.b64encode(data).decode(), expect=expect)
                    workers["chronos"].call("post_write")
                else:                                       # a shell call changing a few files
                    workers["chronos"].call("pre_terminal", expect={})
                    for r in self.rng.sample(self.pool, min(3, len(self.pool))):
                        self.write(r, self.read(r) + f"\n# P7 shell {i}\n".encode())
                    workers["chronos"].call("post_terminal")
                workers["gitcli"].call("checkpoint")
                if i % self.plan.p7_every == 0 or i == self.plan.p7_calls:
                    samples.append(self._p7_sample(i))
        finally:
            rss = self.close_workers(workers)
        worst = max(samples, key=lambda x: x["ratio"] or 0)
        return {"calls": self.plan.p7_calls, "samples": samples, "ratio": worst["ratio"],
                "chronos_bytes": samples[-1]["chronos_bytes"], "gitcli_gc_bytes": samples[-1]["gitcli_gc_bytes"],
                **rss}

    def _p7_sample(self, i: int) -> dict:
        copy = self.rundir / "p7-gc.git"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.git_dir, copy, symlinks=True)
        git(["gc", "--prune=now", "-q"], git_env(str(copy), str(self.ws)), cwd=str(self.ws))
        gc_bytes = dir_bytes(copy)
        shutil.rmtree(copy, ignore_errors=True)
        mine = dir_bytes(self.chronos_store)
        return {"calls": i, "chronos_bytes": mine, "gitcli_bytes": dir_bytes(self.git_dir),
                "gitcli_gc_bytes": gc_bytes, "ratio": ratio(mine, gc_bytes)}

    # ------------------------------------------------------------------ P0
    def p0(self) -> dict:
        from .hermes_chat import run
        return run(self.corpus, self.rundir, sessions=self.plan.p0_sessions, calls=self.plan.p0_calls,
                   think_ms=self.plan.p0_think_ms)

    # ------------------------------------------------------------------ P3
    def p3(self) -> dict:
        workers = {"chronos": self.spawn("chronos", "P3"), "gitcli": self.spawn("gitcli", "P3")}
        try:
            workers["hermes"] = self.spawn("hermes", "P3")
        except WorkerError as exc:
            self.hermes = f"unavailable: {str(exc).splitlines()[0]}"
        for w in workers.values():
            w.mark_baseline()
        times = {"chronos": [], "gitcli": [], "hermes": []}
        extra: dict = {}
        init_ms = []
        try:
            for r in range(self.plan.p3_reps):
                last = r == self.plan.p3_reps - 1
                cstore = self.rundir / f"chronos-{r}" / "store"
                gdir = self.rundir / f"gitcli-{r}.git"
                hbase = self.rundir / f"hermes-{r}" / "checkpoints"
                for name in rotate(list(workers), r):
                    if name == "hermes" and self.hermes is not None:
                        continue
                    os.sync()
                    if name == "chronos":
                        user_git = self.ws / ".git"
                        use_test_support()
                        from support.helpers import tree_fingerprint as fingerprint
                        before = fingerprint(user_git, mtimes=True) if user_git.is_dir() else None
                        res = workers[name].call("first", store_dir=str(cstore), ws=str(self.ws),
                                                 settings=CHRONOS_SETTINGS)
                        if before is not None:
                            if fingerprint(user_git, mtimes=True) != before:
                                raise RuntimeError("chronos changed the workspace's own .git")
                            extra["user_git_identical"] = True
                        init_ms.append(res["init_ms"])
                        for k in ("seed", "phases_s", "store_bytes_fast", "consolidate_ms"):
                            if k in res:
                                extra[f"chronos_{k}"] = res[k]
                        if res.get("consolidate"):
                            extra["chronos_consolidate"] = {k: res["consolidate"].get(k) for k in
                                                            ("packs", "objects", "bytes_before", "bytes_after")}
                        extra["chronos_files"] = res["files"]
                        extra["chronos_kind"] = res.get("kind")
                        extra["chronos_skipped"] = res.get("skipped")
                        if last:
                            extra["chronos_checkpoint"] = res["checkpoint"]
                    elif name == "gitcli":
                        res = workers[name].call("first", git_dir=str(gdir), ws=str(self.ws))
                        extra["gitcli_files"] = res["files"]
                    else:
                        res = workers[name].call("first", base=str(hbase), ws=str(self.ws),
                                                 max_snapshots=HERMES_MAX_SNAPSHOTS)
                        if res.get("refused"):
                            self.hermes = f"refused: {res['refused']}"
                            extra["hermes_refusal_ms"] = round(res["ms"], 1)
                            extra["hermes_counted"] = res.get("count")
                            continue
                        if not res.get("taken"):
                            self.hermes = "failed: ensure_checkpoint() took no first checkpoint"
                            continue
                        extra["hermes_files"] = res["files"]
                    times[name].append(res["ms"])
                if last:
                    self.chronos_store, self.git_dir, self.hermes_base = cstore, gdir, hbase
                else:       # only the last repetition's stores are used later
                    for d in (cstore.parent, gdir, hbase.parent):
                        shutil.rmtree(d, ignore_errors=True)
            # what the first snapshot left on disk (chronos' store also holds the journal's genesis)
            extra["chronos_store_bytes"] = dir_bytes(self.chronos_store)
            extra["gitcli_store_bytes"] = dir_bytes(self.git_dir)
            if self.hermes is None:
                extra["hermes_store_bytes"] = dir_bytes(self.hermes_base)
            extra["store_ratio"] = ratio(extra["chronos_store_bytes"], extra["gitcli_store_bytes"])
            if extra.get("chronos_store_bytes_fast"):       # before the first import was consolidated
                extra["store_ratio_before_consolidation"] = ratio(extra["chronos_store_bytes_fast"],
                                                                  extra["gitcli_store_bytes"])
            # the pool of files every comparator tracks: P1/P2/P5 modify only these
            tracked = set(workers["chronos"].call("tracked", checkpoint=extra["chronos_checkpoint"]))
            tracked &= set(workers["gitcli"].call("ls_files"))
            if self.hermes is None and "hermes" in workers:
                tracked &= set(workers["hermes"].call("ls_files"))
            self.pool = sorted(tracked)
            extra["pool_files"] = len(self.pool)
            extra["chronos_init_ms"] = round(min(init_ms), 1) if init_ms else None
        finally:
            rss = self.close_workers(workers)
        if self.hermes is not None:
            rss.pop("hermes_peak_rss_mb", None)
        if len(self.pool) < 20:
            raise RuntimeError(f"only {len(self.pool)} files are tracked by every comparator")
        return self.figure_row(times, {**extra, **rss})

    # ------------------------------------------------------------------ P1
    def _round(self, workers, names, i: int, target: str, args: dict, expect: dict, *, measured: bool,
               prof: bool, times: dict, extra: dict, modes: dict) -> dict:
        """One call per comparator in rotating order (os.sync() before each); returns chronos' result."""
        chronos = {}
        for name in rotate(names, i):
            os.sync()
            if name == "chronos":
                if prof:
                    pr = workers[name].call("profile", target=target, kwargs=args)
                    extra["chronos_profile"] = pr["profile"]
                    res = pr["result"]
                else:
                    res = workers[name].call(target, **args)
                if measured:
                    modes[str(res.get("scan"))] = modes.get(str(res.get("scan")), 0) + 1
                chronos = res
            else:
                res = workers[name].call("snapshot", expect=expect)
                if name == "hermes" and not res.get("taken") and measured:
                    extra["hermes_not_taken"] = extra.get("hermes_not_taken", 0) + 1
            if measured:
                times[name].append(res["ms"])
        return chronos

    def _pick_write(self, i: int) -> tuple[str, bytes, dict]:
        if i % 5 == 4:                               # every 5th call creates a file
            self.new_files += 1
            rel = f"bench-new/w{self.new_files:04d}.txt"
            data = f"new file {self.new_files} written by the benchmark\n".encode() * 8
            return rel, data, {rel: None}
        rel = self.rng.choice(self.pool)
        old = self.read(rel)
        return rel, old + f"\n/* bench write_file {i} */\n".encode(), {rel: blob_id(old)}

    def p1(self) -> dict:
        workers = self.open_workers("P1")
        names = self.comparators()
        times = {n: [] for n in names}
        post, partial, created = [], 0, 0
        extra: dict = {}
        modes: dict = {}
        try:
            total = self.plan.warmup + self.plan.calls + (1 if self.profile else 0)
            for i in range(total):
                measured = self.plan.warmup <= i < self.plan.warmup + self.plan.calls
                prof = i == self.plan.warmup + self.plan.calls
                rel, data, expect = self._pick_write(i)
                path = os.path.join(self.ws, rel)
                args = dict(path=path, content_b64=base64.b64encode(data).decode(), expect=expect)
                res = self._round(workers, names, i, "pre_write", args, expect, measured=measured,
                                  prof=prof, times=times, extra=extra, modes=modes)
                partial += bool(res.get("partial"))
                created += bool(res.get("created"))
                res = workers["chronos"].call("post_write")
                if measured:
                    post.append(res["ms"])
        finally:
            rss = self.close_workers(workers)
        extra.update(summary(post, "chronos_finish"))
        extra.update(chronos_partial=partial, chronos_created=created, chronos_scan_modes=modes,
                     chronos_host=dict(self.host_info),
                     note="chronos: begin() of a write_file call declaring one path (every 5th a new file); "
                          "gitcli: add -A + commit; hermes: new_turn() + ensure_checkpoint()")
        return self.figure_row(times, {**extra, **rss})

    # ------------------------------------------------------------------ P2
    def p2(self) -> dict:
        workers = self.open_workers("P2")
        names = self.comparators()
        times = {n: [] for n in names}
        post, partial, ks = [], 0, []
        extra: dict = {}
        modes: dict = {}
        try:
            total = self.plan.warmup + self.plan.calls + (1 if self.profile else 0)
            for i in range(total):
                measured = self.plan.warmup <= i < self.plan.warmup + self.plan.calls
                prof = i == self.plan.warmup + self.plan.calls
                k = self.rng.randint(1, 10)
                expect = {}
                for rel in self.rng.sample(self.pool, k):
                    data = self.read(rel) + f"\n/* bench terminal edit {i} */\n".encode()
                    self.write(rel, data)
                    expect[rel] = blob_id(data)
                if measured:
                    ks.append(k)
                res = self._round(workers, names, i, "pre_terminal", {"expect": expect}, expect,
                                  measured=measured, prof=prof, times=times, extra=extra, modes=modes)
                partial += bool(res.get("partial")) and measured
                res = workers["chronos"].call("post_terminal")
                if measured:
                    post.append(res["ms"])
        finally:
            rss = self.close_workers(workers)
        extra.update(summary(post, "chronos_finish"))
        extra.update(chronos_partial=partial, files_changed_per_call=ks, chronos_scan_modes=modes,
                     chronos_host=dict(self.host_info),
                     note="k<=10 random files modified before each call; chronos: begin() of a terminal call "
                          "(full scan); gitcli: add -A + commit; hermes: new_turn() + ensure_checkpoint()")
        return self.figure_row(times, {**extra, **rss})

    # ------------------------------------------------------------------ P4
    def p4(self) -> dict:
        large = self.plan.large_events
        cfix = journals.ensure_chronos(self.cache, self.repo, large)
        gfix = journals.ensure_gitcli(self.cache, large)
        out: dict = {"events_small": None, "events_large": None}
        settings = {**CHRONOS_SETTINGS, "auto_snapshot": False}
        for size in ("small", "large"):
            if size == "small":
                cstore = self.rundir / "p4-small" / "store"
                gdir = self.rundir / "p4-small.git"
                seed = 10
            else:
                cstore = journals.copy_chronos(cfix, self.rundir / "p4-large")
                gdir = journals.copy_gitcli(gfix, self.rundir / "p4-large.git")
                seed = 0
            os.sync()
            cw = self.spawn("chronos", f"P4-{size}")
            gw = self.spawn("gitcli", f"P4-{size}")
            workers = {"chronos": cw, "gitcli": gw}
            t = {k: [] for k in ("append_c", "append_g", "admit_c", "admit_g", "begin_c", "visible_c")}
            try:
                r = cw.call("journal_open", store_dir=str(cstore), ws=str(self.ws), settings=settings,
                            seed_events=seed)
                gw.call("journal_open", git_dir=str(gdir), seed_events=seed)
                out[f"events_{size}"] = r["events"]
                out[f"chronos_open_{size}_ms"] = round(r["open_ms"], 1)
                for w in workers.values():
                    w.mark_baseline()
                for i in range(2 + self.plan.p4_reps):
                    measured = i >= 2
                    for name in rotate(["chronos", "gitcli"], i):
                        os.sync()
                        res = cw.call("append") if name == "chronos" else gw.call("jappend")
                        if measured:
                            t["append_c" if name == "chronos" else "append_g"].append(res["ms"])
                            if name == "chronos":
                                t["visible_c"].append(res["visible_ms"])
                    for name in rotate(["chronos", "gitcli"], i + 1):
                        res = cw.call("gate") if name == "chronos" else gw.call("jadmit")
                        if measured:
                            t["admit_c" if name == "chronos" else "admit_g"].append(res["ms"])
                    os.sync()
                    res = cw.call("begin_nosnap")
                    if measured:
                        t["begin_c"].append(res["ms"])
            finally:
                rss = self.close_workers(workers)
            label = "10" if size == "small" else "large"
            for fig, c_key, g_key in (("append", "append_c", "append_g"), ("admission", "admit_c", "admit_g")):
                row = {**summary(t[c_key], "chronos"), **summary(t[g_key], "gitcli"),
                       "hermes_p50_ms": None, "hermes_refused": NO_JOURNAL, **rss}
                row["ratio"] = ratio(row["chronos_p50_ms"], row["gitcli_p50_ms"])
                out[f"{fig}_{label}"] = row
            out[f"begin_nosnap_{label}"] = {**summary(t["begin_c"], "chronos"), **rss}
            out[f"append_visible_{label}"] = summary(t["visible_c"], "chronos")
        a, g = out["append_large"], out["admission_large"]
        out.update({
            "chronos_p50_ms": a["chronos_p50_ms"], "chronos_p95_ms": a["chronos_p95_ms"],
            "gitcli_p50_ms": a["gitcli_p50_ms"], "gitcli_p95_ms": a["gitcli_p95_ms"],
            "hermes_p50_ms": None, "hermes_refused": NO_JOURNAL, "ratio": a["ratio"],
            "chronos_admission_p50_ms": g["chronos_p50_ms"], "chronos_admission_p95_ms": g["chronos_p95_ms"],
            "gitcli_admission_p50_ms": g["gitcli_p50_ms"],
            "chronos_peak_rss_mb": a.get("chronos_peak_rss_mb"), "gitcli_peak_rss_mb": a.get("gitcli_peak_rss_mb"),
            "chronos_visible_p50_ms": out["append_visible_large"]["chronos_p50_ms"],
            "note": ("append: Journal.append('started', defer=True) as begin() does, until the event is durable "
                     "(witness fsynced; after each untimed outcome the witness's objects are synced once it "
                     "carries more than SYNC_AFTER_OBJECTS, as the idle outcome writer does); visible: until "
                     "the background publisher wrote its objects and moved the ref; vs hash-object+mktree+commit-tree+update-ref; "
                     "admission: Chronos.gate() vs `git cat-file blob <ref>:state.json`; "
                     "headline fields are the large journal's"),
        })
        return out

    # ------------------------------------------------------------------ P5
    def p5(self) -> dict:
        workers = self.open_workers("P5")
        names = self.comparators()
        out: dict = {}
        try:
            targets = {name: workers[name].call("checkpoint") for name in names}
            for kind, nfiles in (("one_file", 1), ("ten_files", 10)):
                times = {n: [] for n in names}
                for i in range(self.plan.warmup + self.plan.p5_reps):
                    measured = i >= self.plan.warmup
                    rels = self.rng.sample(self.pool, nfiles)
                    orig = {rel: self.read(rel) for rel in rels}
                    for name in rotate(names, i):
                        for rel in rels:
                            self.write(rel, orig[rel] + f"\n/* bench edit {kind} {i} by {name} */\n".encode())
                        os.sync()
                        if name == "chronos":
                            res = workers[name].call(
                                "restore", checkpoint=targets[name], expect_changed=nfiles,
                                paths=[os.path.join(self.ws, rels[0])] if nfiles == 1 else None)
                        elif name == "gitcli":
                            res = workers[name].call("restore", commit=targets[name],
                                                     rels=rels if nfiles == 1 else None)
                        else:
                            res = workers[name].call("restore", commit=targets[name],
                                                     rel=rels[0] if nfiles == 1 else None)
                        wrong = [rel for rel in rels if self.read(rel) != orig[rel]]
                        if wrong:
                            msg = f"{name}: restore left {len(wrong)} of {nfiles} files modified ({wrong[0]})"
                            if name == "chronos":
                                raise RuntimeError("CHECK FAILED: " + msg)
                            out.setdefault(f"{name}_errors", []).append(msg)
                            for rel in rels:
                                self.write(rel, orig[rel])
                        if measured:
                            times[name].append(res["ms"])
                out[kind] = self.figure_row(times)
                if self.profile:            # one more chronos restore under cProfile (not counted)
                    rels = self.rng.sample(self.pool, nfiles)
                    orig = {rel: self.read(rel) for rel in rels}
                    for rel in rels:
                        self.write(rel, orig[rel] + f"\n/* bench edit {kind} profiled */\n".encode())
                    os.sync()
                    pr = workers["chronos"].call("profile", target="restore", kwargs=dict(
                        checkpoint=targets["chronos"], expect_changed=nfiles,
                        paths=[os.path.join(self.ws, rels[0])] if nfiles == 1 else None))
                    if any(self.read(rel) != orig[rel] for rel in rels):
                        raise RuntimeError("CHECK FAILED: chronos: profiled restore left files modified")
                    out[f"chronos_profile_{kind}"] = pr["profile"]
        finally:
            rss = self.close_workers(workers)
        for kind in ("one_file", "ten_files"):
            out[kind].update(rss)
        head = out["one_file"]
        out.update({k: v for k, v in head.items()})
        out["chronos_ten_files_p50_ms"] = out["ten_files"]["chronos_p50_ms"]
        out["chronos_ten_files_p95_ms"] = out["ten_files"]["chronos_p95_ms"]
        out["note"] = ("restore including the safety checkpoint. chronos: restore(paths=[f]) / restore(checkpoint); "
                       "gitcli: add -A + commit, then `checkout <c> -- f` / `read-tree -u --reset <c>`; "
                       "hermes: CheckpointManager.restore(file_path=f) / restore() (pre-rollback snapshot + "
                       "`checkout <c> -- .`); headline fields are the one-file restore's")
        return out

    # ------------------------------------------------------------------ P6
    def p6(self) -> dict:
        workers = self.open_workers("P6")
        try:
            os.sync()
            c = workers["chronos"].call("compact", store_dir=str(self.chronos_store))
            os.sync()
            g = workers["gitcli"].call("gc")
            h = None
            if self.hermes is None:
                os.sync()
                h = workers["hermes"].call("gc")
        finally:
            rss = self.close_workers(workers)
        out = {
            "chronos_p50_ms": round(c["ms"], 1), "chronos_p95_ms": round(c["ms"], 1), "chronos_n": 1,
            "gitcli_p50_ms": round(g["ms"], 1), "gitcli_p95_ms": round(g["ms"], 1), "gitcli_n": 1,
            "chronos_bytes": c["bytes_after"], "gitcli_bytes": g["bytes_after"],
            "chronos_bytes_before": c["bytes_before"], "gitcli_bytes_before": g["bytes_before"],
            "chronos_objects_bytes": c["objects_bytes_after"], "gitcli_objects_bytes": g["objects_bytes_after"],
            "ratio": ratio(c["bytes_after"], g["bytes_after"]),
            "ratio_objects": ratio(c["objects_bytes_after"], g["objects_bytes_after"]),
            "time_ratio": ratio(c["ms"], g["ms"]),
            "chronos_journal_events": c.get("journal_events"),
            "chronos_compact_peak_rss_mb": c.get("compact_peak_rss_mb"),
            "note": ("store bytes (sum of file sizes, whole store dir incl. index) after chronos compact(grace_s=0) "
                     "vs `git gc --prune=now` of the git-CLI shadow repo that saw the same workspace states; "
                     "chronos' store also holds the journal (with pre/post images). p50/p95 = the single "
                     "compaction/gc time"),
            **rss,
        }
        if h is not None:
            out.update({"hermes_p50_ms": round(h["ms"], 1), "hermes_p95_ms": round(h["ms"], 1),
                        "hermes_bytes": h["bytes_after"], "hermes_objects_bytes": h["objects_bytes_after"]})
        else:
            out.update({"hermes_p50_ms": None, "hermes_p95_ms": None, "hermes_refused": self.hermes})
        out["incremental"] = self._p6_incremental()
        return out

    def _p6_incremental(self, rounds: int = 10) -> dict:
        """The routine case: ten more checkpoints, then compaction again (fresh workers: own RSS)."""
        workers = {"chronos": self.spawn("chronos", "P6i"), "gitcli": self.spawn("gitcli", "P6i")}
        try:
            workers["chronos"].call("open", store_dir=str(self.chronos_store), ws=str(self.ws),
                                    settings=CHRONOS_SETTINGS, host="cli")
            workers["gitcli"].call("open", git_dir=str(self.git_dir), ws=str(self.ws))
            for w in workers.values():
                w.mark_baseline()
            for i in range(rounds):
                for rel in self.rng.sample(self.pool, min(3, len(self.pool))):
                    self.write(rel, self.read(rel) + f"\nP6i round {i}\n".encode())
                for name in rotate(list(workers), i):
                    workers[name].call("checkpoint")
            os.sync()
            c = workers["chronos"].call("compact", store_dir=str(self.chronos_store))
            os.sync()
            g = workers["gitcli"].call("gc")
        finally:
            rss = self.close_workers(workers)
        return {"checkpoints": rounds, "chronos_ms": round(c["ms"], 1), "gitcli_ms": round(g["ms"], 1),
                "time_ratio": ratio(c["ms"], g["ms"]), "chronos_objects_packed": c.get("objects_packed"),
                "chronos_bytes": c["bytes_after"], "gitcli_bytes": g["bytes_after"],
                "ratio": ratio(c["bytes_after"], g["bytes_after"]),
                "chronos_compact_peak_rss_mb": c.get("compact_peak_rss_mb"), **rss}
