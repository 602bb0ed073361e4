"""`chronos-git windtunnel`: run the suites in worker processes, print a line per suite,
write the JSON (and the copy `chronos-git report` shows)."""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path

from .scenario import INVARIANTS
from .suites import SUITES, build, run_case

LAST_RUN = "windtunnel-last.json"
DESCRIPTION = ("Crash, power-cut, I/O-error, tamper, concurrency, hostile-input and adversary suites against "
               "throwaway stores; exit status 1 on any breach.")
CASE_TIMEOUT = 180.0       # seconds; a case that gives no verdict by then has hung: a breach
                           # (a case may set a longer "deadline" in its spec)


def _child(case, conn) -> None:
    """One case in its own process group, so a hang (libgit2 looping on a damaged object) or a
    leftover victim can be killed whole without taking the run down."""
    os.setpgrp()
    os.environ.pop("CHRONOS_GIT_FAULT", None)   # only victims are armed, never the checker
    conn.send(run_case(case))
    conn.close()


def run_isolated(ctx, case, timeout: float = CASE_TIMEOUT) -> dict:
    """run_case in a fresh process; a hang or a dead checker is reported as a breach, never waited on."""
    t0 = time.monotonic()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(case, send), daemon=True)
    proc.start()
    send.close()
    result = why = None
    try:
        if recv.poll(timeout):
            result = recv.recv()
        else:
            why = f"hang: no verdict within {timeout:.0f} s"
    except (EOFError, OSError):
        why = "the checker process died"
    finally:
        proc.join(5 if result is not None else 0.1)
        if proc.is_alive() or why:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.join()
        recv.close()
    if result is None:
        why = why if proc.exitcode in (None, 0, -signal.SIGKILL) else f"{why} (exit code {proc.exitcode})"
        result = {"case": asdict(case), "reached": False, "note": why, "counts": {"hangs": 1},
                  "breaches": [why], "seconds": round(time.monotonic() - t0, 2)}
    return result


def _say_breach(r: dict, out) -> None:
    if r["breaches"]:
        print(f"  BREACH {r['case']['suite']} {r['case']['name']} seed {r['case']['seed']}: "
              f"{r['breaches'][0]}" + (f" (kept in {r['kept']})" if r.get("kept") else ""), file=out, flush=True)


def _unreached(case, results: dict[str, list[dict]]) -> bool:
    """A crash or I/O fault point no run of this pass reached."""
    if case.suite not in ("crash", "io") or case.name == "random kill":
        return False
    runs = [r for r in results[case.suite] if r["case"]["name"] == case.name]
    return bool(runs) and not any(r["reached"] for r in runs) and case.seed == max(r["case"]["seed"] for r in runs)


def summarize(suite: str, results: list[dict]) -> dict:
    counts = dict.fromkeys(INVARIANTS, 0)
    breaches = []
    for r in results:
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + v
        evidence = {k: r[k] for k in ("kept", "fault_hits") if r.get(k)}
        breaches += [{"case": r["case"]["name"], "seed": r["case"]["seed"], "breach": b, **evidence}
                     for b in r["breaches"]]
    reached = sum(1 for r in results if r["reached"])
    if suite in ("crash", "io"):
        # a fault point that no seed reached proves nothing: that is a breach of the tunnel
        by_point: dict[str, bool] = {}
        for r in results:
            name = r["case"]["name"]
            if name != "random kill":
                by_point[name] = by_point.get(name, False) or r["reached"]
        for name, hit in sorted(by_point.items()):
            if not hit:
                counts["unreached"] += 1
                breaches.append({"case": name, "seed": None, "breach": f"unreached: no seed reached {name}"})
    return {"cases": len(results), "reached": reached, "counts": counts, "breaches": breaches,
            "seconds": round(sum(r["seconds"] for r in results), 1), "line": _line(suite, results, counts, reached)}


def _line(suite: str, results: list[dict], counts: dict, reached: int) -> str:
    names = [r["case"]["name"] for r in results]
    if suite == "crash":
        plain = [r for r in results if r["case"]["name"] != "random kill" and not r["case"]["spec"].get("timeop")]
        timeops = [r for r in results if r["case"]["spec"].get("timeop")]
        points = len({r["case"]["name"] for r in plain})
        seeds = len({r["case"]["seed"] for r in plain})
        kills = sum(1 for r in results if r["case"]["name"] == "random kill" and r["reached"])
        what = f"{points} points × {seeds} seeds"
        if timeops:
            ops = {r["case"]["spec"]["timeop"] for r in timeops}
            at = {r["case"]["spec"]["point"] for r in timeops}
            what += f" + {len(ops)} time-machine operations × {len(at)} points"
        what += f" + {kills} random kills = {reached:,} crashes"
    elif suite == "power":
        what = f"{len(set(names))} kinds of power-cut damage × seeds = {reached:,} cuts"
    elif suite == "io":
        slow = [r for r in results if r["case"]["name"].startswith("slow_remote")]
        errors = [r for r in results if r not in slow]
        what = (f"{len({r['case']['name'] for r in errors})} injected I/O errors = "
                f"{sum(1 for r in errors if r['reached']):,} failed writes")
        if slow:
            what += f", {len(slow)} slow remotes cut off = {sum(1 for r in slow if r['reached'])} reached"
    elif suite == "tamper":
        what = f"{len(set(names))} kinds of tampering = {len(results)} attempts, {reached} detected"
    elif suite == "concurrency":
        what = f"{len(results)} races"
    elif suite == "adversary":
        what = f"{len(set(names))} attacks by the agent's own calls = {len(results)} attempts, {reached} refused or detected"
    else:
        what = f"{len(results)} hostile-input classes"
    shown = ("lost_events", "duplicate_effects", "fsck_errors", "litter", "stuck_locks", "resets",
             "integrity", "torn_paths", "unsettled", "unclear_errors", "escapes", "hangs",
             "unreached")
    tail = ", ".join(f"{counts.get(k, 0)} {k.replace('_', ' ')}" for k in shown)
    return f"{suite}: {what}: {tail}"


def run(suites, *, quick: bool, seeds: int, seed: int | None, workers: int, kills: int | None = None,
        out=sys.stdout, names: list[str] | None = None) -> dict:
    cases = build(suites, quick=quick, seeds=seeds, only_seed=seed, kills=kills)
    if names:
        cases = [c for c in cases if any(n in c.name for n in names)]
    t0 = time.monotonic()
    results: dict[str, list[dict]] = {s: [] for s in suites}
    print(f"wind tunnel: {len(cases)} cases in {', '.join(suites)} on {workers} worker(s)"
          + (" (quick)" if quick else ""), file=out, flush=True)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["chronos_git.windtunnel.suites"])     # each case forks a warm process
    with ThreadPoolExecutor(workers) as pool:
        done = 0
        futures = [pool.submit(run_isolated, ctx, c, c.spec.get("deadline", CASE_TIMEOUT)) for c in cases]
        for fut in as_completed(futures):
            r = fut.result()
            done += 1
            results[r["case"]["suite"]].append(r)
            _say_breach(r, out)
            if done % 25 == 0 or done == len(cases):
                print(f"  {done}/{len(cases)} cases, {time.monotonic() - t0:.0f} s", file=out, flush=True)
        # a fault point that no seed reached proves nothing (summarize: a breach); a case whose
        # setup did not get there is run once more with the next seed, and both runs count
        again = [replace(c, seed=c.seed + 1) for c in cases if _unreached(c, results)]
        for c in again:
            print(f"  {c.suite} {c.name}: not reached, once more with seed {c.seed}", file=out, flush=True)
        for fut in as_completed([pool.submit(run_isolated, ctx, c, c.spec.get("deadline", CASE_TIMEOUT))
                                 for c in again]):
            r = fut.result()
            results[r["case"]["suite"]].append(r)
            _say_breach(r, out)
    report = {"time": time.time(), "quick": quick, "seeds": seeds, "kills": kills,
              "seconds": round(time.monotonic() - t0, 1),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()},
              "suites": {s: summarize(s, rs) for s, rs in results.items()}}
    report["breaches"] = sum(len(v["breaches"]) for v in report["suites"].values())
    for s in suites:
        print(report["suites"][s]["line"], file=out)
    print(f"{report['breaches']} breach(es) in {report['seconds']:.0f} s", file=out)
    return report


def configure(p: argparse.ArgumentParser) -> None:
    """The options, for `python -m chronos_git.windtunnel` and `chronos-git windtunnel` alike."""
    p.add_argument("--quick", action="store_true", help="one seed per case, a few random kills (< 3 min)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per case (default 1 quick, 50 full)")
    p.add_argument("--suite", action="append", choices=SUITES, help="run only these suites (repeatable)")
    p.add_argument("--seed", type=int, default=None, help="replay only the cases of this seed")
    p.add_argument("--case", action="append", metavar="TEXT",
                   help="run only the cases whose name contains TEXT (repeatable), e.g. 'undo at'")
    p.add_argument("--kills", type=int, default=None,
                   help="random-time kills in the crash suite (default 8 quick, 500 full)")
    p.add_argument("--json", dest="windtunnel_json", metavar="PATH",
                   help="write the full result as JSON ('-' for stdout)")
    p.add_argument("--workers", type=int, default=max(1, min(os.cpu_count() or 1, 4)))


def main(argv=None, *, store: str | None = None) -> int:
    p = argparse.ArgumentParser(prog="chronos-git windtunnel", description=DESCRIPTION)
    configure(p)
    return run_from_args(p.parse_args(argv), store=store, error=p.error)


def run_from_args(a: argparse.Namespace, *, store: str | None = None, error=None) -> int:
    """Run as `a` says; exit status 1 when anything was breached, 2 for bad options."""
    seeds = a.seeds if a.seeds is not None else (1 if a.quick else 50)
    bad = ("--seeds must be at least 1" if seeds < 1 else "--workers must be at least 1" if a.workers < 1
           else None)
    if bad:
        if error:
            error(bad)
        print(f"error: {bad}", file=sys.stderr)
        return 2
    suites = a.suite or list(SUITES)
    seeds = max(seeds, (a.seed + 1) if a.seed is not None and a.seed < 10_000 else seeds)
    to_json = a.windtunnel_json == "-"
    kills = a.kills if a.kills is not None else (8 if a.quick else 500)
    report = run(suites, quick=a.quick, seeds=seeds, seed=a.seed, workers=a.workers, kills=max(kills, 0),
                 out=sys.stderr if to_json else sys.stdout, names=getattr(a, "case", None))
    text = json.dumps(report, indent=2)
    if to_json:
        print(text)
    elif a.windtunnel_json:
        Path(a.windtunnel_json).write_text(text + "\n")
    _keep_last(text, store)
    return 1 if report["breaches"] else 0


def _keep_last(text: str, store: str | None) -> None:
    """The newest result in the store's meta folder (when the store exists), for `chronos-git report`."""
    try:
        from .. import settings
        meta = settings.store_location(settings.load().settings, store) / "chronos"
        if meta.is_dir():
            (meta / LAST_RUN).write_text(text + "\n")
    except Exception:
        pass
