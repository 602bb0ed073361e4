"""Drive the real `hermes` (hermes-agent from PyPI) with chronos-git installed
as a user plugin, a scripted model on 127.0.0.1 and an isolated HERMES_HOME.

Used by the end-to-end tests and by the demo (scripts/demo.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TOOLSETS = "file,terminal,chronos"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\r")


def hermes_bin() -> str:
    cand = BIN / "hermes"
    return str(cand) if cand.exists() else (shutil.which("hermes") or "hermes")


class HermesEnv:
    def __init__(self, root: Path, settings: dict | None = None, *, plugin: bool = True, ws: Path | None = None):
        self.root = Path(root)
        self.home = self.root / "home"
        self.ws = Path(ws) if ws is not None else self.root / "ws"
        self.plugin = plugin                  # False: the same Hermes without chronos-git (the bench's baseline)
        self.script = self.root / "script.json"
        self.log = self.root / "model-requests.jsonl"
        self.settings = settings or {}
        self.model: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def store(self) -> Path:
        return self.home / "plugin-data" / "chronos-git"

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "HermesEnv":
        (self.home / "plugins").mkdir(parents=True, exist_ok=True)
        self.ws.mkdir(parents=True, exist_ok=True)
        link = self.home / "plugins" / "chronos-git"
        if not link.exists():
            link.symlink_to(REPO, target_is_directory=True)
        self.set_script([])
        self.model = subprocess.Popen(
            [sys.executable, str(HERE / "scripted_model.py"), "--port", "0", "--script", str(self.script),
             "--log", str(self.log)], stdout=subprocess.PIPE, text=True)
        line = self.model.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"scripted model did not start: {line!r}")
        self.port = int(line.split()[1])
        self.write_config()
        return self

    def write_config(self, extra_settings: dict | None = None) -> None:
        settings = {**self.settings, **(extra_settings or {})}
        cfg = {
            "model": {"provider": "custom", "base_url": f"http://127.0.0.1:{self.port}/v1",
                      "default": "scripted-model", "api_key": "sk-local-test"},
            "plugins": {"enabled": ["chronos-git"] if self.plugin else [],
                        "entries": {"chronos-git": {"settings": settings}}},
            "security": {"allow_lazy_installs": False, "tirith_enabled": False},
            "approvals": {"timeout": 5},
        }
        # JSON is valid YAML
        (self.home / "config.yaml").write_text(json.dumps(cfg, indent=2))

    def stop(self) -> None:
        if self.model and self.model.poll() is None:
            self.model.terminate()
            try:
                self.model.wait(5)
            except subprocess.TimeoutExpired:
                self.model.kill()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---------------------------------------------------------------- script
    def set_script(self, turns: list[dict]) -> None:
        text = json.dumps({"turns": turns}).replace("__WS__", str(self.ws))
        self.script.write_text(text)

    def requests(self) -> list[dict]:
        """Every request the scripted model has logged whole: a line it is still writing (no
        newline yet) is left for the next look (a poll can land mid-write)."""
        if not self.log.exists():
            return []
        lines = self.log.read_text().split("\n")[:-1]      # the part after the last newline: unfinished
        return [json.loads(l) for l in lines if l.strip()]

    def tool_results_seen(self) -> list[str]:
        """Contents of every tool message the model received (last request wins)."""
        reqs = [r for r in self.requests() if r["has_tools"]]
        if not reqs:
            return []
        return [m.get("content") or "" for m in reqs[-1]["messages"] if m.get("role") == "tool"]

    def user_messages_seen(self) -> list[str]:
        out = []
        for r in self.requests():
            for m in r.get("messages") or []:
                if m.get("role") == "user":
                    c = m.get("content")
                    out.append(c if isinstance(c, str) else json.dumps(c))
        return out

    # ----------------------------------------------------------------- runs
    def env(self, extra: dict | None = None) -> dict:
        e = dict(os.environ)
        for k in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_STORE", "CHRONOS_GIT_SETTINGS", "HERMES_YOLO_MODE",
                  "HERMES_SESSION_ID", "TERMINAL_CWD"):
            e.pop(k, None)
        e["HERMES_HOME"] = str(self.home)
        e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
        e.setdefault("NO_COLOR", "1")
        if extra:
            e.update(extra)
        return e

    def chat(self, message: str, *, env: dict | None = None, timeout: float = 180,
             toolsets: str = TOOLSETS, yolo: bool = False) -> subprocess.CompletedProcess:
        argv = [hermes_bin(), "chat", "-Q", "-t", toolsets, "-q", message]
        if yolo:
            argv.append("--yolo")
        return subprocess.run(argv, cwd=self.ws, env=self.env(env), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def hermes(self, *args, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([hermes_bin(), *map(str, args)], cwd=self.ws, env=self.env(env),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def chronos(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        """`hermes chronos-git ...` (the plugin's CLI subcommand)."""
        return self.hermes("chronos-git", *args, timeout=timeout)

    def journal(self) -> list[dict]:
        """The journal's events, oldest first."""
        r = self.chronos("journal", "log", "--limit", "1000", "--json")
        assert r.returncode == 0, r.stderr
        return list(reversed(json.loads(r.stdout)["events"]))

    def repl(self, steps: list[dict], *, toolsets: str = TOOLSETS, timeout: float = 240,
             env: dict | None = None) -> tuple[bool, str]:
        """Drive the interactive REPL in a pseudo-terminal.

        steps: {"wait": regex, "timeout": s} | {"send": text} | {"key": raw} | {"sleep": s}
        Returns (all waits matched, ANSI-stripped transcript).
        """
        from ptyprocess import PtyProcess
        proc = PtyProcess.spawn([hermes_bin(), "chat", "-t", toolsets], cwd=str(self.ws),
                                env=self.env(env), dimensions=(50, 200))
        chunks: list[str] = []
        lock = threading.Lock()

        def pump():
            while True:
                try:
                    data = proc.read(65536)
                except EOFError:
                    return
                with lock:
                    chunks.append(data.decode("utf-8", "replace"))

        threading.Thread(target=pump, daemon=True).start()

        def text() -> str:
            with lock:
                return ANSI.sub("", "".join(chunks))

        ok, pos, t_end = True, 0, time.time() + timeout
        for st in steps:
            if "send" in st:
                for ch in st["send"]:
                    proc.write(ch.encode())
                    time.sleep(0.01)
            elif "key" in st:
                proc.write(st["key"].encode())
            elif "sleep" in st:
                time.sleep(st["sleep"])
            elif "wait" in st:
                rx = re.compile(st["wait"])
                deadline = min(time.time() + st.get("timeout", 60), t_end)
                while time.time() < deadline:
                    m = rx.search(text(), pos)
                    if m:
                        pos = m.end()
                        break
                    time.sleep(0.1)
                else:
                    ok = False
                    break
        time.sleep(0.5)
        try:
            proc.terminate(force=True)
        except Exception:
            pass
        return ok, text()


def kill_tree(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
