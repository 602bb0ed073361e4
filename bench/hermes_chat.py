"""P0: the latency chronos-git adds to a real `hermes chat` session, as a user sees it.

Two Hermes homes with the same scripted model on 127.0.0.1 (tests/support: the
end-to-end harness), one with the plugin enabled and one without, each on its
own copy of the corpus.  Sessions alternate between the two (plugin, bare,
plugin, ...); each session makes `calls` tool calls, write_file and terminal in
turn.  A call's latency is the time from the model request that asked for it
to the next model request (which carries its result): Hermes' own work, the
tool and, in the plugin arm, the middleware, the pre-call snapshot, the intent
and outcome appends and the result transform.  The scripted model answers at
once (the worst case for the outcomes written while Hermes waits on its
model); `think_ms` makes it wait that long before each answer, as a real
model's response time does (the same in both arms, so it cancels in the pairs).  Calls are paired by (session,
step) across the arms; P0 is the median of the paired differences.

The first plugin session of a fresh store also takes the workspace's first
snapshot in the background: its calls are reported apart as P0f (against the
first bare session), and not counted in P0.  The consolidation that first
snapshot starts is then finished (untimed) before the P0 sessions, as a
long-lived host would have finished it.
"""
from __future__ import annotations

import time
from pathlib import Path
from statistics import median

from . import use_test_support
from .corpora import Corpus, make_workspace, say
from .stats import summary

TOOLS = ("write_file", "terminal")


def _script(ws: Path, session: int, calls: int, think_s: float = 0.0) -> list[dict]:
    steps = []
    for k in range(calls):
        if k % 2 == 0:
            steps.append({"tool_calls": [{"name": "write_file", "id": f"call_w{session}_{k}", "arguments": {
                "path": str(ws / "p0-bench" / f"s{session}-{k}.txt"), "content": f"session {session} call {k}\n" * 20}}]})
        else:
            steps.append({"tool_calls": [{"name": "terminal", "id": f"call_t{session}_{k}", "arguments": {
                "command": f"echo {session}-{k} >> {ws}/p0-bench/log.txt"}}]})
    steps.append({"content": "done"})
    if think_s:
        steps = [{**st, "think_s": think_s} for st in steps]
    return [{"match": f"P0 session {session}", "steps": steps}]


def _latencies(env, session: int, calls: int) -> list[float]:
    """Per step: ms from the request that asked for the call to the next request."""
    t = [r["t"] for r in env.requests() if r["has_tools"] and any(
        f"P0 session {session}" in str(m.get("content")) for m in r["messages"] or [] if m.get("role") == "user")]
    if len(t) != calls + 1:
        raise RuntimeError(f"session {session}: {len(t)} model requests, expected {calls + 1}")
    return [(t[k + 1] - t[k]) * 1000 for k in range(calls)]


def run(corpus: Corpus, rundir: Path, *, sessions: int, calls: int, think_ms: int = 0) -> dict:
    use_test_support()
    from support.hermes_env import HermesEnv          # the end-to-end harness: one way to drive Hermes

    arms = {}
    for name, plugin in (("plugin", True), ("bare", False)):
        root = rundir / f"p0-{name}"
        root.mkdir()
        ws = make_workspace(corpus, root / "ws")
        (ws / "p0-bench").mkdir()
        arms[name] = HermesEnv(root, plugin=plugin, ws=ws).start()
    per: dict[str, dict[int, list[float]]] = {"plugin": {}, "bare": {}}
    out_first: dict = {}
    walls: dict[str, list[float]] = {"plugin": [], "bare": []}
    try:
        for s in range(sessions + 1):                 # session 0: the plugin's first snapshot (P0f)
            for name in (("plugin", "bare") if s % 2 == 0 else ("bare", "plugin")):
                env = arms[name]
                env.set_script(_script(env.ws, s, calls, think_ms / 1000))
                t0 = time.monotonic()
                proc = env.chat(f"P0 session {s}", toolsets="file,terminal", timeout=900)
                walls[name].append(time.monotonic() - t0)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} session {s}: hermes chat exited {proc.returncode}: "
                                       f"{(proc.stderr or proc.stdout)[-400:]}")
                per[name][s] = _latencies(env, s, calls)
            say(f"{corpus.name}: P0 session {s} of {sessions}: plugin {walls['plugin'][-1]:.1f} s, "
                f"bare {walls['bare'][-1]:.1f} s")
            if s == 0:
                # what a long-lived host finishes in the background after its first snapshot
                # (a one-shot `hermes chat -q` resumes it run after run): done, untimed, before P0
                t0 = time.monotonic()
                _consolidated(arms["plugin"].store)
                out_first = {"consolidated_after_first_session_s": round(time.monotonic() - t0, 2)}
        store = arms["plugin"].store
        checked = _journal_has(store, sessions + 1, calls)
    finally:
        for env in arms.values():
            env.stop()
    out: dict = {"sessions": sessions, "calls_per_session": calls, "model_think_ms": think_ms,
                 "journal_checked": checked, **out_first}
    for i, tool in enumerate(TOOLS):
        pick = lambda lat: [v for k, v in enumerate(lat) if k % 2 == i]      # noqa: E731
        steady = [(p, b) for s in range(1, sessions + 1)
                  for p, b in zip(pick(per["plugin"][s]), pick(per["bare"][s]))]
        first = list(zip(pick(per["plugin"][0]), pick(per["bare"][0])))
        out[tool] = {**summary([p for p, _ in steady], "plugin"), **summary([b for _, b in steady], "bare"),
                     "added_p50_ms": round(median([p - b for p, b in steady]), 3) if steady else None,
                     "first_session_added_p50_ms": round(median([p - b for p, b in first]), 3) if first else None}
    out["chronos_p50_ms"] = out["write_file"]["added_p50_ms"]            # headline: write_file
    out["terminal_added_p50_ms"] = out["terminal"]["added_p50_ms"]
    out["first_session_wall_s"] = {k: round(v[0], 2) for k, v in walls.items()}
    # every call's latency (session -> call step, write_file and terminal in turn), for a closer look
    out["per_call_ms"] = {name: {str(s): [round(v, 1) for v in lat] for s, lat in sessions_.items()}
                          for name, sessions_ in per.items()}
    out["session_wall_p50_s"] = {k: round(median(v[1:]), 2) for k, v in walls.items() if len(v) > 1}
    return out


def _consolidated(store: Path) -> None:
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    Chronos(store, Settings(), create=False).consolidate()


def _journal_has(store: Path, sessions: int, calls: int) -> int:
    """Every plugin-arm call must be journaled (a started and a returned event each)."""
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    svc = Chronos(store, Settings(), create=False)
    svc.start()
    started = sum(1 for e in svc.core.journal.events(None) if e.get("kind") == "started")
    returned = sum(1 for e in svc.core.journal.events(None) if e.get("kind") == "returned")
    if started < sessions * calls or returned < sessions * calls:
        raise RuntimeError(f"the plugin arm journaled {started} started / {returned} returned events for "
                           f"{sessions * calls} calls")
    return started

