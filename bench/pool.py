"""`python -m bench.pool RUN.json ...`: P0 over several benchmark runs of the same code.

On this VM one P0 run's median moves by ±15 ms from run to run (the bare arm's own
p50 with it), so a verdict on a few milliseconds needs many runs.  This pools the
steady sessions' paired per-call differences (`per_call_ms` in each run's JSON) of
every run given and prints, per tool, each run's median, the median of the run
medians and the median of all pairs; P0f (the first session) per run beside them.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .hermes_chat import TOOLS
from .stats import median


def _p0_runs(doc) -> list[tuple[str, dict]]:
    if not isinstance(doc, dict):
        raise ValueError("not the JSON of `python -m bench --json`")
    runs = doc.get("runs") or [doc]
    return [(r.get("corpus", "?"), r["P0"]) for r in runs
            if isinstance(r, dict) and isinstance(r.get("P0"), dict) and r["P0"].get("per_call_ms")]


def _steady_diffs(p0: dict, i: int) -> list[float]:
    per = p0["per_call_ms"]
    steady = [s for s in per["plugin"] if s != "0" and s in per["bare"]]
    return [float(p) - float(b) for s in steady for p, b in zip(per["plugin"][s][i::2], per["bare"][s][i::2])]


def pool(paths: list[str]) -> dict:
    rows, pairs = [], {t: [] for t in TOOLS}
    for path in paths:
        try:
            for corpus, p0 in _p0_runs(json.loads(Path(path).read_text())):
                row = {"run": Path(path).stem, "corpus": corpus, "think_ms": p0.get("model_think_ms", 0)}
                for i, tool in enumerate(TOOLS):
                    diffs = _steady_diffs(p0, i)
                    pairs[tool] += diffs
                    row[tool] = median(diffs)
                    row[f"{tool}_first"] = (p0.get(tool) or {}).get("first_session_added_p50_ms")
                rows.append(row)
        except ValueError as exc:                  # not JSON, or not the benchmark's
            raise ValueError(f"{path}: {exc}") from None
        except (KeyError, TypeError, AttributeError):
            raise ValueError(f"{path}: its P0 per_call_ms is not as python -m bench writes it") from None
    if not rows:
        raise ValueError("no P0 run with per-call latencies (per_call_ms) in the files given")
    out = {"runs": rows}
    for tool in TOOLS:
        out[tool] = {"pairs": len(pairs[tool]), "pooled_p50_ms": median(pairs[tool]),
                     "median_of_runs_ms": median([r[tool] for r in rows])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pool", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN.json", help="JSON written by `python -m bench --json`")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    try:
        res = pool(args.runs)
    except (OSError, ValueError) as exc:
        print(f"python -m bench.pool: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    f = lambda v: "-" if v is None else f"{v:+.1f}"      # noqa: E731
    print(f"{'run':34} {'corpus':16} think  " + "  ".join(f"{t:>10} {'first':>6}" for t in TOOLS))
    for r in res["runs"]:
        print(f"{r['run']:34} {r['corpus']:16} {r['think_ms']:5}  "
              + "  ".join(f"{f(r[t]):>10} {f(r[t + '_first']):>6}" for t in TOOLS))
    for t in TOOLS:
        s = res[t]
        print(f"{t}: median of {len(res['runs'])} run medians {f(s['median_of_runs_ms'])} ms, "
              f"all {s['pairs']} pairs pooled {f(s['pooled_p50_ms'])} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
