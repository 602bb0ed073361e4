"""`python -m bench`: command line, corpus loop, output."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from . import CORPORA, corpora, report
from .corpora import say
from .figures import CorpusRun, plan_for
from .machine import fsync_latency_ms, info as machine_info

REPO = Path(__file__).resolve().parent.parent
QUICK = ("synthetic-1k", "synthetic-1k-git", "synthetic-20k")
# opt-in (--corpus only; the default run leaves them out): 1,000,000 files each, see bench/mono.py
LARGE = ("mono-1m-lite", "mono-1m-lite-git", "mono-1m", "mono-1m-git")
ALL = (*CORPORA, *LARGE)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench",
                                 description="chronos-git vs the git CLI (shadow-git plugin) vs Hermes' "
                                             "built-in checkpoints, interleaved call by call.")
    ap.add_argument("--quick", action="store_true",
                    help=f"{' and '.join(QUICK)} only, few repetitions, a 10k-event journal for P4 (CI)")
    ap.add_argument("--corpus", action="append", choices=ALL, metavar="NAME",
                    help=f"run only this corpus (repeatable): {', '.join(CORPORA)}; "
                         f"opt-in only: {', '.join(LARGE)}")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--cache", metavar="DIR", default=str(REPO / ".bench-cache"),
                    help="corpora, fixtures and temporary run directories (default: <repo>/.bench-cache)")
    ap.add_argument("--calls", type=int, metavar="N", help="measured calls per figure (overrides the mode)")
    ap.add_argument("--journal-events", type=int, metavar="N",
                    help="size of P4's large journal (default 100000; 10000 with --quick)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile one extra chronos P1 and P2 call (not counted) and print the top entries")
    ap.add_argument("--chronos-host", choices=("hermes", "cli"), default="hermes",
                    help="run the chronos service as inside Hermes (default: background=True, i.e. the inotify "
                         "watcher, plus a turn checkpoint at the start of each figure) or as the CLI does")
    ap.add_argument("--figures", metavar="LIST",
                    help="comma-separated subset of P0,P1,P2,P4,P5,P6,P7,P8,P9 (P3 always runs: it sets up the stores)")
    ap.add_argument("--keep", action="store_true", help="keep each corpus' run directory")
    ap.add_argument("--p0-think-ms", type=int, default=0, metavar="MS",
                    help="P0: the scripted model waits MS before each answer, as a real model's response "
                         "time does (default 0: it answers at once, the figure the P0 targets are set for)")
    args = ap.parse_args(argv)
    if not 0 <= args.p0_think_ms <= 60_000:
        ap.error("--p0-think-ms must be between 0 and 60000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # SIGTERM unwinds like Ctrl-C, so run directories are removed and workers see EOF
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cache = Path(os.path.abspath(args.cache))
    cache.mkdir(parents=True, exist_ok=True)
    names = args.corpus or (list(QUICK) if args.quick else list(CORPORA))
    names = [n for n in ALL if n in names]              # always smallest first
    figures = None
    if args.figures:
        figures = {f.strip().upper() for f in args.figures.split(",") if f.strip()}
        bad = figures - {"P0", "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P8S"}
        if bad:
            raise SystemExit(f"unknown figure(s): {', '.join(sorted(bad))}")
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.monotonic()
    machine = machine_info(cache, REPO)
    say(f"corpora: {', '.join(names)}{' (quick)' if args.quick else ''}; cache {cache}")
    runs = []
    failures = []
    for name in names:
        corpus = corpora.ensure(name, cache)
        plan = plan_for(name, args.quick, args.calls, args.journal_events)
        plan.p0_think_ms = args.p0_think_ms
        run = CorpusRun(corpus, plan, repo=REPO, cache=cache, keep=args.keep, profile=args.profile,
                        host=args.chronos_host, figures=figures).run()
        run["targets"] = report.targets(run)
        runs.append(run)
        failures += run["failures"]
    wall = round(time.monotonic() - t0, 1)
    machine["durable_write_median_ms_at_end"] = fsync_latency_ms(cache)

    print()
    print(f"chronos-git benchmark  ({'quick' if args.quick else 'full'} mode, {wall:.0f}s wall)")
    print(f"command: {cmd}")
    m = machine
    print(f"machine: {m['cpu_model']} x{m['cores']}, {m['ram_gib']} GiB, Linux {m['kernel']}, "
          f"{m['bench_dir_filesystem'].get('type')} ({m['bench_dir_filesystem'].get('options', '')}); "
          f"Python {m['python']}, pygit2 {m['pygit2']} / libgit2 {m['libgit2']}, {m['git']}, "
          f"hermes-agent {m['hermes_agent']}")
    print(f"disk: create + write 200 B + fsync + fsync(dir), median {m['durable_write_median_ms_at_start']} ms "
          f"at start, {m['durable_write_median_ms_at_end']} ms at end (this VM's disk latency is uneven)")
    print("chronos service: " + ("as inside Hermes (background=True: inotify watcher, background first snapshot; "
                                 "a turn checkpoint starts each figure)" if args.chronos_host == "hermes"
                                 else "as the CLI runs it (no watcher)"))
    print("times are p50 / p95 per call; ratio = chronos p50 / gitcli p50 (P6: bytes); "
          "RSS: chronos worker VmHWM / largest git process / Hermes (see --json rss_method)")
    print()
    print(report.table(runs))
    for run in runs:
        note = (run.get("corpus_info") or {}).get("note")
        print(f"\n{run['corpus']}: {run['wall_s']:.0f}s wall; Hermes: {run['hermes']}"
              + (f"; corpus {note}" if note else ""))
        modes = {fig: (run.get(fig) or {}).get("chronos_scan_modes") for fig in ("P1", "P2")}
        if any(modes.values()):
            print("  chronos snapshot modes in measured calls: "
                  + "; ".join(f"{fig} {m}" for fig, m in modes.items() if m))
    focus = [r for r in runs if r["corpus"] in ("linux-6.1", "linux-6.1-git")] or runs[-1:]
    for run in focus:
        print()
        print(report.targets_text(run))
    if args.profile:
        for run in runs:
            for fig, key, what in (("P1", "chronos_profile", "begin()"), ("P2", "chronos_profile", "begin()"),
                                   ("P5", "chronos_profile_one_file", "restore() of one file"),
                                   ("P5", "chronos_profile_ten_files", "restore() of ten files"),
                                   ("P8", "chronos_profile_agent_only", "agent-only restore"),
                                   ("P9", "chronos_profile", "log(all=True)")):
                prof = (run.get(fig) or {}).get(key)
                if prof:
                    print(f"\n--- cProfile of one chronos {fig} {what} on {run['corpus']} ---")
                    print(prof.rstrip())
    if failures:
        print("\nFAILURES:")
        for f in failures:
            print("  " + f)

    if args.json:
        top = {"command": cmd, "argv": sys.argv[1:] if argv is None else argv,
               "mode": "quick" if args.quick else "full", "machine": machine, "rss_method": report.RSS_METHOD,
               "wall_s": wall, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "failures": failures}
        doc = dict(runs[-1]) if runs else {}
        if len(runs) > 1:
            doc["runs"] = runs
            doc["corpora"] = [r["corpus"] for r in runs]
        doc["corpus_wall_s"] = doc.pop("wall_s", None)
        doc.update(top)
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=str))
        print(f"\nJSON written to {path}")
    return 1 if failures else 0
