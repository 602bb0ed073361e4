"""P8S: issue 37's scale rows (~1,000,000 files), one corpus at a time; opt-in.

    python -m bench --corpus mono-1m-git --figures P8S   (once cli.py accepts P8S)
    python -m bench.scale --corpus mono-1m-lite-git [--calls N] [--json PATH] [--keep]

Warm page cache: each tree walk follows an untimed pass reading every file; `os.sync()` before
each timed call.  Nothing is asserted on time; a failed correctness check fails the figure.
* P8a first snapshot: chronos (worker `first`: Chronos.snapshot into an empty store; its
  consolidation timed apart) vs the git CLI as a shadow-git plugin (add -A + commit into a
  shadow GIT_DIR) vs Hermes (refused above 50,000 entries).  P8d store: that chronos store,
  consolidated, vs `git gc --prune=now` of the git CLI's (on a git corpus also P8b's store).
* P8b untracked (a git corpus' .git is moved out of the workspace), as inside Hermes
  (background = True), from Chronos.get: the turn checkpoint starts the first snapshot in the
  background (a child process); a write_file call at once is protected when begin() returns
  (its journaled pre-image is checked; the file is put back); shell calls are protected once
  the baseline is done (background state polled; checked with a shell call).  Rate = corpus
  bytes / baseline time.
* P8c after the baseline, same process: write_file pre-call, shell call with the watcher (one
  file changed before each), log (limit 20), diff of a checkpoint of ten changed files, the
  dashboard's first view in a fresh process (dashboard/dist/index.js on load: /workspaces,
  /checkpoints?limit=50&all=true, /journal/status, /journal/log?limit=15, /health; TestClient).
* P8d RSS: the host's VmHWM (P8b + P8c) and, apart, RUSAGE_CHILDREN (the baseline child)."""
from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .gitcli import blob_id, dir_bytes
from .stats import ratio, summary

if TYPE_CHECKING:
    from .figures import CorpusRun

API = "/api/plugins/chronos-git"
HOST = {"Host": "127.0.0.1"}
MAX_POOL_BYTES = 256 * 1024
BASELINE_TIMEOUT_S = 1800


# ================================================================ worker side
def _timed(fn) -> tuple:
    t0 = time.perf_counter()
    res = fn()
    return res, (time.perf_counter() - t0) * 1000.0


class ScaleOps:
    """Mixed into bench.worker.ChronosHandler (self.c: the service, self.ws: the workspace)."""

    @staticmethod
    def _scale_fail(msg: str):
        from .worker import BenchCheck
        return BenchCheck(msg)

    def op_scale_session(self, store_dir: str, ws: str, settings: dict, probe_rel: str, probe_b64: str) -> dict:
        """P8b: start as Hermes does, a write_file call at once, then wait for the baseline."""
        from .worker import rss_stats
        wall0, t0 = time.time(), time.perf_counter()
        ms = lambda: (time.perf_counter() - t0) * 1000.0    # noqa: E731
        self.c, self.ws = self._get(store_dir, settings), ws
        self.c.start()
        self.c.background = True
        out: dict = {"open_ms": ms()}
        self.c.turn_checkpoint(ws, session_id="bench")      # hermes_glue at the turn's start: the baseline starts
        out["turn_checkpoint_ms"] = ms()
        path, data = os.path.join(ws, probe_rel), base64.b64decode(probe_b64)
        orig = Path(path).read_bytes()
        self.n += 1
        call = self.Call(tool="write_file", args={"path": path, "content": data.decode("utf-8", "replace")},
                         workspace=ws, session_id="bench", tool_call_id=f"bench-w{self.n}",
                         declared=[self.Declared(path, data)])
        ticket = self.c.begin(call)
        out["declared_protected_ms"] = ms()
        out["declared_snapshot"] = {k: ticket.snapshot.get(k) for k in ("kind", "pending_baseline", "checkpoint")}
        # protected = its pre-image is journaled and stored: check it (untimed from here on)
        j = self.c.core.journal
        ev = j.event(j.head)
        decl = ev.get("declared") or []
        if ev.get("kind") != "started" or ev.get("operation_id") != ticket.operation_id or not decl:
            raise self._scale_fail(f"chronos: the write_file call's intent is not the journal head: {ev.get('kind')}")
        repo = self.c.core.store.repo()
        try:
            pre = repo[decl[0]["pre"]].data
        except (KeyError, ValueError, TypeError):
            raise self._scale_fail(f"chronos: pre-image {decl[0].get('pre')} is not in the store") from None
        if pre != orig:
            raise self._scale_fail("chronos: the journaled pre-image differs from the file before the call")
        Path(path).write_bytes(data)
        rec = self.c.finish(ticket, self.Outcome(status="ok", result_hash=blob_id(data))).wire()
        if not rec.get("recorded"):
            raise self._scale_fail(f"chronos: finish() did not record the outcome: {rec}")
        out["declared_call_done_ms"] = ms()
        # the baseline runs in the background: poll it as a host would
        wsobj = self.c.core.store.workspace(ws)
        samples, last = [], -1.0
        while True:
            st = self.c.snapshots.background_state(wsobj) or {}
            if not st.get("running"):
                break
            if ms() - last >= 2000:
                last = ms()
                samples.append({"ms": round(last), "progress": st.get("progress")})
            if ms() > BASELINE_TIMEOUT_S * 1000:
                raise self._scale_fail(f"chronos: the background baseline ran over {BASELINE_TIMEOUT_S} s")
            time.sleep(0.01)
        out["baseline_seen_done_ms"] = ms()
        if st.get("error"):
            raise self._scale_fail(f"chronos: background baseline failed: {st['error']}")
        out["baseline"] = {k: st.get(k) for k in ("kind", "runs_in", "progress")}
        if st.get("finished") and st.get("started"):
            out["baseline_s"] = st["finished"] - st["started"]
            out["shell_protected_ms"] = (st["finished"] - wall0) * 1000.0
        else:
            out["shell_protected_ms"] = out["baseline_seen_done_ms"]
        out["progress_samples"] = samples
        out["rss_after_baseline"] = rss_stats()
        # take the write back: through revert (the call has no checkpoint), else from the pre-image
        try:
            r = self.c.revert(ws, ticket.operation_id, actor="bench").wire()
            out["revert"] = {k: r.get(k) for k in ("status", "files_changed", "conflicts", "error")}
        except Exception as exc:                # noqa: BLE001 - reported: what a user would be told
            out["revert"] = {"status": "refused", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        out["restored_from"] = "revert" if Path(path).read_bytes() == orig else "the journaled pre-image"
        Path(path).write_bytes(pre)
        if Path(path).read_bytes() != orig:
            raise self._scale_fail("chronos: the probe file is not back to its content before the call")
        out["watcher"] = wsobj.watcher_state() if hasattr(wsobj, "watcher_state") else None
        return out

    def op_scale_log(self, limit: int = 20) -> dict:
        r, ms = _timed(lambda: self.c.log(self.ws, limit).wire())
        if not r.get("checkpoints"):
            raise self._scale_fail("chronos: log listed no checkpoint")
        return {"ms": ms, "listed": len(r["checkpoints"])}

    def op_scale_diff(self, checkpoint: str, expect: list[str]) -> dict:
        """`diff <parent> <checkpoint>` (with the patch, as the CLI prints it) and `show`."""
        parent = str(self.c.core.store.repo()[checkpoint].parents[0].id)
        r, ms = _timed(lambda: self.c.diff(self.ws, parent, checkpoint).wire())
        _, show_ms = _timed(lambda: self.c.show(self.ws, checkpoint))
        got = {f["path"] for f in r.get("files") or []}
        if not set(expect) <= got:
            raise self._scale_fail(f"chronos: diff lists {len(got)} files, missing {sorted(set(expect) - got)[:3]}")
        return {"ms": ms, "show_ms": show_ms, "files": len(got)}

    def op_scale_consolidate(self, store_dir: str, ws: str, settings: dict) -> dict:
        """P8d: the consolidation the first import leaves to do (the CLI runs it in the foreground)."""
        self.c, self.ws = self._get(store_dir, settings), ws
        self.c.start()
        before = dir_bytes(store_dir)
        r, ms = _timed(lambda: self.c.consolidate().wire())
        return {"ms": ms, "bytes_before": before, "bytes_after": dir_bytes(store_dir),
                "report": {k: r.get(k) for k in ("packs", "objects", "bytes_before", "bytes_after")}}

    def op_scale_dashboard(self, store_dir: str, ws: str, settings: dict) -> dict:
        """The dashboard's first view in this (fresh) process: its load-time requests."""
        from fastapi import FastAPI
        from fastapi.testclient import TestClient

        from chronos_git.api.router import build_router
        app = FastAPI()
        app.include_router(build_router(lambda: self._get(store_dir, settings)), prefix=API)
        client = TestClient(app)
        times: dict = {}

        def get(path: str, **params) -> dict:
            t0 = time.perf_counter()
            r = client.get(API + path, params=params, headers=HOST)
            times[path] = round((time.perf_counter() - t0) * 1000.0, 1)
            if r.status_code != 200:
                raise self._scale_fail(f"dashboard: GET {path} answered {r.status_code}: {r.text[:200]}")
            return r.json()
        t0 = time.perf_counter()
        lst = get("/workspaces").get("workspaces") or []
        mine = [w for w in lst if w.get("root") == ws]
        if not mine:
            raise self._scale_fail(f"dashboard: /workspaces does not list {ws}")
        wsargs = {"workspace_b64": mine[0]["root_b64"]} if mine[0].get("root_b64") else {"workspace": ws}
        cps = get("/checkpoints", limit=50, all="true", **wsargs).get("checkpoints") or []
        get("/journal/status")
        get("/journal/log", limit=15)
        get("/health")
        total = (time.perf_counter() - t0) * 1000.0
        if not cps:
            raise self._scale_fail("dashboard: /checkpoints listed none")
        return {"ms": total, "requests_ms": times, "checkpoints": len(cps)}


# ================================================================ parent side
def _warm(ws) -> float:
    """Read every file of the workspace once (untimed): the rows are for a warm page cache."""
    t = time.monotonic()
    subprocess.run(["find", str(ws), "-type", "f", "-exec", "cat", "{}", "+"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return round(time.monotonic() - t, 1)


def _pool(ws, n: int, seed: str) -> list[str]:
    """n regular files (< 256 KiB, outside .git) picked at random from one walk."""
    files = []
    root = str(ws)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        for f in filenames:
            p = os.path.join(dirpath, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if st.st_size < MAX_POOL_BYTES and (st.st_mode & 0o170000) == 0o100000:
                files.append(os.path.relpath(p, root))
    files.sort()
    return random.Random(seed).sample(files, min(n, len(files)))


def p8_scale(run: CorpusRun) -> dict:
    from .corpora import say
    out: dict = {}
    try:
        _rows(run, out)
    except Exception as exc:             # noqa: BLE001 - keep the rows measured before the failure
        import traceback
        out["error"] = msg = f"{type(exc).__name__}: {exc}"
        run.failures.append(f"{run.corpus.name} P8S: {msg}")
        say(f"{run.corpus.name}: P8S FAILED: {msg}\n{traceback.format_exc()}")
    return out


def _rows(run: CorpusRun, out: dict) -> None:
    from .corpora import say
    from .figures import CHRONOS_SETTINGS, HERMES_MAX_SNAPSHOTS
    from .rpc import WorkerError
    ws, rd, c = run.ws, run.rundir, run.corpus
    out.update({"page_cache": "warm (every file read once, untimed, before each tree walk)",
                "files": c.files, "bytes": c.bytes, "calls": run.plan.calls})
    name = c.name
    # ------------------------------------------------------------------ P8a
    say(f"{name}: P8S warm pass {_warm(ws)}s; P8a first snapshot, chronos")
    cstore = rd / "scale-a" / "store"
    a, rss_a = _one(run, "chronos", "P8a", "first", store_dir=str(cstore), ws=str(ws), settings=CHRONOS_SETTINGS)
    chronos_bytes = dir_bytes(cstore)
    say(f"{name}: P8a chronos {a['ms']:.0f} ms; git CLI (warm pass {_warm(ws)}s)")
    gdir = rd / "scale-a.git"
    g = run.spawn("gitcli", "P8a")
    try:
        os.sync()
        ga = g.call("first", git_dir=str(gdir), ws=str(ws))
        say(f"{name}: P8a git CLI {ga['ms']:.0f} ms; P8d git gc")
        os.sync()
        gc = g.call("gc")
    finally:
        rss_g = run.close_workers({"gitcli": g})
    if a["files"] != ga["files"]:
        raise RuntimeError(f"CHECK FAILED: chronos' first checkpoint holds {a['files']} files, git's {ga['files']}")
    try:
        hr, _ = _one(run, "hermes", "P8a", "first", base=str(rd / "scale-hermes" / "checkpoints"), ws=str(ws),
                     max_snapshots=HERMES_MAX_SNAPSHOTS)
        hermes, hermes_ms = (f"refused: {hr['refused']}" if hr.get("refused") else None), hr["ms"]
    except WorkerError as exc:
        hermes, hermes_ms = f"unavailable: {str(exc).splitlines()[0]}", None
    tracked = (ws / ".git").is_dir()
    out["P8a"] = {"chronos_p50_ms": a["ms"], "chronos_p95_ms": a["ms"], "chronos_n": 1,
                  "gitcli_p50_ms": ga["ms"], "gitcli_p95_ms": ga["ms"], "gitcli_n": 1,
                  "hermes_p50_ms": None if hermes else hermes_ms, "hermes_p95_ms": None if hermes else hermes_ms,
                  "hermes_refused": hermes, "hermes_ms": hermes_ms,
                  "ratio": ratio(a["ms"], ga["ms"]), "tree": "git work tree" if tracked else "untracked",
                  "files": a["files"], "chronos_kind": a.get("kind"), "chronos_seed": a.get("seed"),
                  "chronos_phases_s": a.get("phases_s"), "chronos_consolidate_ms": a.get("consolidate_ms"),
                  **rss_a, **rss_g}
    out["P8d_store"] = {"chronos_bytes": chronos_bytes, "chronos_bytes_before_consolidation": a.get("store_bytes_fast"),
                        "gitcli_bytes": gc["bytes_after"], "gitcli_bytes_before_gc": gc["bytes_before"],
                        "gitcli_gc_ms": gc["ms"], "ratio": ratio(chronos_bytes, gc["bytes_after"])}
    shutil.rmtree(cstore.parent, ignore_errors=True)
    shutil.rmtree(gdir, ignore_errors=True)
    # ------------------------------------------------------------------ P8b
    aside = None
    if tracked:                          # untracked from here on: the same files without their .git
        aside = rd / "user-git-aside"
        os.rename(ws / ".git", aside)
    try:
        _session(run, say, out)
    finally:
        if aside is not None:
            os.rename(aside, ws / ".git")


def _session(run: CorpusRun, say, out: dict) -> None:
    from .figures import CHRONOS_SETTINGS
    ws, rd, c, calls, warmup = run.ws, run.rundir, run.corpus, run.plan.calls, run.plan.warmup
    tracked = (rd / "user-git-aside").exists()          # a git corpus, its .git moved out for now
    pool = _pool(ws, 4 * (calls + warmup) + 40, f"P8S {c.name}")
    probe = pool.pop()
    probe_data = (ws / probe).read_bytes() + b"\n/* P8b: the first write_file call */\n"
    say(f"{c.name}: P8b warm pass {_warm(ws)}s; start as in Hermes, background baseline")
    store = rd / "scale-b" / "store"
    w = run.spawn("chronos", "P8b")
    try:
        os.sync()
        s = w.call("scale_session", store_dir=str(store), ws=str(ws), settings=CHRONOS_SETTINGS,
                   probe_rel=probe, probe_b64=base64.b64encode(probe_data).decode())
        base_s = s.get("baseline_s") or s["baseline_seen_done_ms"] / 1000.0
        out["P8b"] = {**s, "declared_protected_p50_ms": s["declared_protected_ms"],
                      "shell_protected_p50_ms": s["shell_protected_ms"],
                      "baseline_mb_s": round(c.bytes / 1e6 / base_s, 1) if base_s else None,
                      "baseline_files_s": round(c.files / base_s) if base_s else None,
                      "tree": "untracked" + (" (the git corpus' .git moved out of the workspace)" if tracked else "")}
        say(f"{c.name}: P8b declared call protected at {s['declared_protected_ms']:.0f} ms, shell calls at "
            f"{s['shell_protected_ms']:.0f} ms; P8c per call")
        rel = pool.pop()       # the first shell call after the baseline: it must have a checkpoint
        data = _touch(ws, rel, "P8b shell check")
        first = w.call("pre_terminal", expect={rel: blob_id(data)})
        w.call("post_terminal")
        out["P8b"].update(first_shell_call_ms=first["ms"], first_shell_call_scan=first.get("scan"))
        out["P8c"] = _per_call(run, w, pool, calls, warmup)
        out["P8c"]["dashboard"] = _dashboard(run, store, min(calls, 3))
    finally:
        rss = run.close_workers({"chronos": w})
    out["P8d_rss"] = {"host_peak_rss_mb": rss.get("chronos_peak_rss_mb"),
                      "children_peak_rss_mb": rss.get("chronos_child_peak_rss_mb"),
                      "host_peak_rss_mb_at_baseline_end": (s.get("rss_after_baseline") or {}).get("vmhwm_mb")}
    if tracked:      # P8a's store was of a git work tree: the untracked one's, consolidated, beside git gc
        con, _ = _one(run, "chronos", "P8d", "scale_consolidate", store_dir=str(store), ws=str(ws),
                      settings=CHRONOS_SETTINGS)
        st = out["P8d_store"]
        st.update(untracked_chronos_bytes=con["bytes_after"], untracked_chronos_bytes_before=con["bytes_before"],
                  untracked_consolidate_ms=con["ms"], untracked_ratio=ratio(con["bytes_after"], st["gitcli_bytes"]))
    st = out["P8d_store"]
    st["store_ratio"] = st.get("untracked_ratio") or st.get("ratio")      # the target's: a store of its own
    shutil.rmtree(store.parent, ignore_errors=True)


def _one(run: CorpusRun, kind: str, tag: str, op: str, **args) -> tuple[dict, dict]:
    """One call in a fresh worker (os.sync() before it): its result and the worker's peak RSS."""
    w = run.spawn(kind, tag)
    try:
        os.sync()
        res = w.call(op, **args)
    except BaseException:
        run.close_workers({kind: w})
        raise
    return res, run.close_workers({kind: w})


def _touch(ws, rel: str, tag: str) -> bytes:
    data = Path(ws, rel).read_bytes() + f"\n/* {tag} */\n".encode()
    Path(ws, rel).write_bytes(data)
    return data


def _per_call(run: CorpusRun, w, pool: list[str], calls: int, warmup: int) -> dict:
    ws = run.ws
    t: dict = {k: [] for k in ("write_pre", "write_post", "shell_pre", "shell_post", "log", "diff", "show")}
    modes: dict = {}
    for i in range(warmup + calls):
        rel = pool.pop()
        p = os.path.join(ws, rel)
        old = Path(p).read_bytes()
        new = old + f"\n/* P8c write_file {i} */\n".encode()
        os.sync()
        r = w.call("pre_write", path=p, content_b64=base64.b64encode(new).decode(), expect={rel: blob_id(old)})
        q = w.call("post_write")
        if i >= warmup:
            t["write_pre"].append(r["ms"])
            t["write_post"].append(q["ms"])
    for i in range(warmup + calls):
        rel = pool.pop()
        data = _touch(ws, rel, f"P8c shell {i}")
        os.sync()
        r = w.call("pre_terminal", expect={rel: blob_id(data)})
        q = w.call("post_terminal")
        if i >= warmup:
            t["shell_pre"].append(r["ms"])
            t["shell_post"].append(q["ms"])
            modes[str(r.get("scan"))] = modes.get(str(r.get("scan")), 0) + 1
    for i in range(warmup + calls):
        os.sync()
        r = w.call("scale_log", limit=20)
        if i >= warmup:
            t["log"].append(r["ms"])
    ten = [pool.pop() for _ in range(10)]
    expect = {rel: blob_id(_touch(ws, rel, "P8c ten-file checkpoint")) for rel in ten}
    os.sync()
    cp = w.call("pre_terminal", expect=expect)["checkpoint"]
    w.call("post_terminal")
    nfiles = None
    for i in range(warmup + calls):
        os.sync()
        r = w.call("scale_diff", checkpoint=cp, expect=ten)
        nfiles = r["files"]
        if i >= warmup:
            t["diff"].append(r["ms"])
            t["show"].append(r["show_ms"])
    out = {"scan_modes": modes, "diff_files": nfiles, "watcher": w.call("watcher")}
    for k, v in t.items():
        out.update(summary(v, k))
    return out


def _dashboard(run: CorpusRun, store, reps: int) -> dict:
    """The dashboard's first view, each time in a fresh process (the host is still running)."""
    from .figures import CHRONOS_SETTINGS
    times, last = [], {}
    for i in range(max(1, reps)):
        last, rss = _one(run, "chronos", f"P8c-dashboard-{i}", "scale_dashboard", store_dir=str(store),
                         ws=str(run.ws), settings=CHRONOS_SETTINGS)
        times.append(last["ms"])
    return {**summary(times, "first_view"), "requests_ms": last.get("requests_ms"),
            "checkpoints": last.get("checkpoints"), "peak_rss_mb": rss.get("chronos_peak_rss_mb")}


# ================================================================ report
def rows(run: dict) -> list[list[str]]:
    """Table rows (bench/report.py's columns) of P8S."""
    from .report import fmt_bytes, fmt_ms
    s, name, out = run.get("P8S"), run["corpus"], []
    if not isinstance(s, dict) or not s:
        return []

    def add(fig, what, c, g="-", h="-", r=None, rss="-", n="1"):
        out.append([name, fig, what, c, g, h, "-" if r is None else f"{r:.3f}x", rss, str(n)])

    def pair(d: dict, key: str) -> str:
        return f"{fmt_ms(d.get(key + '_p50_ms'))} / {fmt_ms(d.get(key + '_p95_ms'))}"
    a, b, pc = s.get("P8a") or {}, s.get("P8b") or {}, s.get("P8c") or {}
    if a:
        add("P8a", f"first snapshot ({a.get('tree')}, {a.get('files'):,} files)", fmt_ms(a["chronos_p50_ms"]),
            fmt_ms(a["gitcli_p50_ms"]), (a.get("hermes_refused") or fmt_ms(a.get("hermes_p50_ms")))[:34],
            a.get("ratio"), f"{a.get('chronos_peak_rss_mb') or 0:.0f}/{a.get('gitcli_peak_rss_mb') or 0:.0f}/-")
    if b:
        add("P8b", "write_file call protected, from start", fmt_ms(b["declared_protected_ms"]))
        add("P8b", "shell calls protected (baseline done), from start", fmt_ms(b["shell_protected_ms"]))
        add("P8b", f"baseline rate ({(b.get('baseline') or {}).get('runs_in')})", f"{b.get('baseline_mb_s')} MB/s",
            n=f"{b.get('baseline_files_s') or 0:,} files/s")
    for key, what in (("write_pre", "write_file pre-call"), ("shell_pre", "shell pre-call (watcher, 1 file)"),
                      ("log", "log (limit 20)"), ("diff", f"diff of a {pc.get('diff_files')}-file checkpoint"),
                      ("show", "show of that checkpoint")):
        if f"{key}_p50_ms" in pc:
            add("P8c", what, pair(pc, key), n=pc.get(f"{key}_n", ""))
    d = pc.get("dashboard") or {}
    if d:
        add("P8c", "dashboard first view (fresh process)", pair(d, "first_view"),
            rss=f"{d.get('peak_rss_mb') or 0:.0f}/-/-", n=d.get("first_view_n", ""))
    r = s.get("P8d_rss") or {}
    if r:
        add("P8d", "peak RSS host / baseline child (MB)",
            f"{r.get('host_peak_rss_mb')} / {r.get('children_peak_rss_mb')}")
    st = s.get("P8d_store") or {}
    if st.get("gitcli_bytes"):
        add("P8d", f"store after consolidate / git gc ({a.get('tree')})", fmt_bytes(st["chronos_bytes"]),
            fmt_bytes(st["gitcli_bytes"]), r=st.get("ratio"))
        if st.get("untracked_chronos_bytes"):
            add("P8d", "  the same files untracked (P8b's store, consolidated)",
                fmt_bytes(st["untracked_chronos_bytes"]), fmt_bytes(st["gitcli_bytes"]), r=st.get("untracked_ratio"))
    if "error" in s:
        add("P8S", "ERROR: " + s["error"][:80], "", "", "", rss="", n="")
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.scale --corpus NAME`: P8S alone (what `python -m bench --figures P8S` runs)."""
    import argparse
    import json

    from . import corpora, report
    from .cli import REPO
    from .figures import CorpusRun, plan_for
    from .machine import info
    ap = argparse.ArgumentParser(prog="python -m bench.scale")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    cache, t0, load0 = REPO / ".bench-cache", time.monotonic(), os.getloadavg()
    m = info(cache, REPO)
    plan = plan_for(args.corpus, False, args.calls, None)
    res = CorpusRun(corpora.ensure(args.corpus, cache), plan, repo=REPO, cache=cache, keep=args.keep,
                    profile=False, figures={"P8S"}).run()
    res.update(targets=report.targets(res), machine=m, loadavg_start=load0, loadavg_end=os.getloadavg())
    print(f"\nP8S (issue 37 scale rows) on {args.corpus}, {time.monotonic() - t0:.0f}s wall; {m['cpu_model']} "
          f"x{m['cores']}, {m['ram_gib']} GiB, {m['bench_dir_filesystem'].get('type')}, {m['git']}; load average "
          f"{load0[0]:.1f} at start, {res['loadavg_end'][0]:.1f} at end\nwarm page cache: every file read once "
          f"(untimed) before each tree walk; os.sync() before each timed call; calls per row: {res['plan']['calls']}")
    print(report.table([res]) + "\n\n" + report.targets_text(res))
    if res["failures"]:
        print("\nFAILURES:\n  " + "\n  ".join(res["failures"]))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
