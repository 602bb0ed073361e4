"""Parent side of the worker pipe (see bench.worker)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


class WorkerError(RuntimeError):
    def __init__(self, msg: str, *, check: bool = False):
        super().__init__(msg)
        self.check = check


class Worker:
    def __init__(self, kind: str, *, repo: Path, log_dir: Path, env: dict | None = None, tag: str = ""):
        self.kind = kind
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{kind}{'-' + tag if tag else ''}.log"
        self._log = open(self.log_path, "ab")
        e = dict(os.environ)
        e["PYTHONPATH"] = str(repo) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
        e.pop("CHRONOS_GIT_FAULT", None)
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker", kind], cwd=str(repo),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=e, text=True, bufsize=1)
        self.ready = self._read()          # {"ready": True, vmrss...}
        self.base_rss_mb = None
        self.final: dict | None = None

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            raise WorkerError(f"{self.kind} worker died (exit {rc}); log {self.log_path}:\n{self._tail()}")
        resp = json.loads(line)
        if not resp.get("ok"):
            raise WorkerError(f"{self.kind}: {resp.get('error')}\n{resp.get('trace', '')}",
                              check=bool(resp.get("check")))
        return resp.get("result")

    def call(self, op: str, **args):
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def mark_baseline(self) -> None:
        """Resident memory after setup, before the first measured call."""
        self.base_rss_mb = self.call("rss").get("vmrss_mb")

    def close(self) -> dict:
        if self.final is None:
            try:
                self.final = self.call("exit")
            finally:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
                self.proc.wait(timeout=60)
                self._log.close()
        return self.final

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
