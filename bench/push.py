"""`python -m bench.push`: pushing to a remote, next to `git push` of the same refs, and
what a remote that is down or hangs costs a protected call.

Both pushes go from the same store over the git protocol to a `git daemon` on
127.0.0.1 (one bare repository each), alternating which goes first:

  R1  one event: one protected write, then an incremental push (journal anchor and
      the workspace's checkpoints) / `git push` of the same two refs
  R2  N new checkpoints (1,000; 100 with --quick), then one incremental push / `git push`
  R3  protected write_file latency in the process that pushes in the background
      (as in Hermes: a push is kicked after every call, push_interval_s = 1):
      no remote / remote up / remote stopped (connection refused) / remote hanging
      (accepts and never answers); interleaved call by call

Medians (p50) and p95 in ms; ratios are chronos / git push (R1, R2) and each remote
state / no remote (R3).  Nothing here is asserted: it is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .corpora import say
from .stats import ratio, summary


def _daemon(base: Path) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", f"--base-path={base}", "--export-all",
                             "--enable=receive-pack", "--listen=127.0.0.1", f"--port={port}", str(base)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("git daemon did not start")


class _Hang:
    """A server that accepts connections and never answers (a remote that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def run(quick: bool) -> dict:
    from chronos_git.engine.remote import IO_TIMEOUT_MS
    from chronos_git.journal_refs import anchor
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings

    reps = 5 if quick else 20
    n_checkpoints = 100 if quick else 1000
    r2_reps = 1 if quick else 3
    calls = 10 if quick else 40
    root = Path(tempfile.mkdtemp(prefix="chronos-bench-push-"))
    procs = []
    try:
        base = root / "srv"
        base.mkdir()
        _bare(base / "chronos.git")
        _bare(base / "git.git")
        daemon, port = _daemon(base)
        procs.append(daemon)
        ws = root / "ws"
        ws.mkdir()
        for i in range(200):
            (ws / f"src{i // 20}").mkdir(exist_ok=True)
            (ws / f"src{i // 20}" / f"f{i}.py").write_text(f"# file {i}\n" + "x = 1\n" * 50)
        settings = Settings(max_checkpoints=0, size_budget_mb=0, host_id="bench", push_interval_s=1)
        svc = Chronos.get(root / "store", settings)
        svc.snapshot(str(ws), "first")
        svc.remote_add("bench", f"git://127.0.0.1:{port}/chronos.git", snapshots=True)
        git_url = f"git://127.0.0.1:{port}/git.git"
        ws_obj = svc.core.store.workspace(str(ws))
        refs = [f"{anchor.ANCHOR_REF}:refs/chronos/hosts/bench/journal",
                f"{ws_obj.ref}:refs/chronos/hosts/bench/snapshots/{ws_obj.id}"]

        def chronos_push() -> float:
            t = time.perf_counter()
            svc.push("bench")
            return (time.perf_counter() - t) * 1000

        def git_push() -> float:
            anchor.extend(svc.core.store)                       # the refs it pushes must exist (untimed)
            t = time.perf_counter()
            subprocess.run(["git", f"--git-dir={svc.core.store.root}", "push", "-q", git_url, *refs], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return (time.perf_counter() - t) * 1000

        chronos_push()
        git_push()                                         # both remotes start from the same state
        out: dict = {"quick": quick, "transport": "git:// (git daemon on 127.0.0.1)"}

        say(f"R1: {reps} x (one protected write, then push)")
        a, b = [], []
        for i in range(reps):
            svc.write_file(str(ws), f"src0/f{i % 20}.py", f"# edit {i}\n".encode())
            order = [(chronos_push, a), (git_push, b)]
            for fn, into in (order if i % 2 == 0 else order[::-1]):
                into.append(fn())
        out["R1"] = {**summary(a, "chronos"), **summary(b, "gitpush")}
        out["R1"]["ratio"] = ratio(out["R1"]["chronos_p50_ms"], out["R1"]["gitpush_p50_ms"])

        say(f"R2: {r2_reps} x ({n_checkpoints} new checkpoints, then one push)")
        a, b = [], []
        for rep in range(r2_reps):
            for k in range(n_checkpoints):
                p = ws / f"src{k % 10}" / f"f{(k % 10) * 20}.py"
                p.write_text(f"# rep {rep} checkpoint {k}\n")
                svc.snapshot(str(ws), f"bench {rep}/{k}", paths=[str(p)])
            order = [(chronos_push, a), (git_push, b)]
            for fn, into in (order if rep % 2 == 0 else order[::-1]):
                into.append(fn())
        out["R2"] = {"checkpoints": n_checkpoints, **summary(a, "chronos"), **summary(b, "gitpush")}
        out["R2"]["ratio"] = ratio(out["R2"]["chronos_p50_ms"], out["R2"]["gitpush_p50_ms"])

        say(f"R3: {calls} protected writes per remote state, interleaved")
        hang = _Hang()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]                     # closed again: connection refused
        states = {"none": None, "up": f"git://127.0.0.1:{port}/chronos.git",
                  "stopped": f"git://127.0.0.1:{dead}/x.git", "hanging": f"git://127.0.0.1:{hang.port}/x.git"}
        services = {}
        for name, url in states.items():
            w = root / f"ws-{name}"
            shutil.copytree(ws, w)
            s = Chronos.get(root / f"store-{name}", Settings(max_checkpoints=0, size_budget_mb=0,
                                                              host_id=f"bench-{name}", push_interval_s=1))
            s.background = True
            s.snapshot(str(w), "first")
            if url:
                s.remote_add("r", url, snapshots=True)
            services[name] = (s, w)
        times: dict[str, list[float]] = {n: [] for n in states}
        for i in range(calls):
            names = list(states)
            names = names[i % len(names):] + names[:i % len(names)]
            for name in names:
                s, w = services[name]
                t = time.perf_counter()
                s.write_file(str(w), "src1/f20.py", f"# call {i}\n".encode())
                times[name].append((time.perf_counter() - t) * 1000)
                s.remotes.kick()                          # what the Hermes hook does after a turn
            time.sleep(0.05)
        out["R3"] = {n: summary(v, "write") for n, v in times.items()}
        base_p50 = out["R3"]["none"]["write_p50_ms"]
        for n in states:
            out["R3"][n]["ratio_to_none"] = ratio(out["R3"][n]["write_p50_ms"], base_p50)
        out["R3"]["push_io_timeout_s"] = IO_TIMEOUT_MS / 1000
        out["R3"]["remote_state"] = {n: (services[n][0].remote_list().remotes or [None])[0] and
                                     services[n][0].remote_list().remotes[0].wire() for n in states}
        return out
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)


def text(out: dict) -> str:
    f = lambda v: "-" if v is None else f"{v:.1f}"      # noqa: E731
    lines = [f"chronos-git push benchmark ({'quick' if out['quick'] else 'full'}; {out['transport']})",
             f"{'figure':<44} {'chronos p50/p95 ms':>20} {'git push p50/p95 ms':>20} {'ratio':>7}"]
    for key, what in (("R1", "R1 one event, incremental"),
                      ("R2", f"R2 {out['R2']['checkpoints']} checkpoints, incremental")):
        r = out[key]
        lines.append(f"{what:<44} {f(r['chronos_p50_ms']) + ' / ' + f(r['chronos_p95_ms']):>20} "
                     f"{f(r['gitpush_p50_ms']) + ' / ' + f(r['gitpush_p95_ms']):>20} {r['ratio'] or '-':>7}")
    lines.append(f"{'R3 protected write_file, remote …':<44} {'p50/p95 ms':>20} {'ratio to none':>20}")
    for n in ("none", "up", "stopped", "hanging"):
        r = out["R3"][n]
        lines.append(f"{'   ' + n:<44} {f(r['write_p50_ms']) + ' / ' + f(r['write_p95_ms']):>20} "
                     f"{r['ratio_to_none'] or '-':>20}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 100 checkpoints (CI smoke)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    out = run(args.quick)
    out["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(text(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
        print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
