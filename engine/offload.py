"""Long background work of a long-lived host, run in a child process at low priority.

Why a process and not a thread: in the host's process, a thread that imports a big
tree or consolidates its packs shares the GIL with the agent.  Every time Hermes'
thread lets the GIL go (a read, a socket, an fsync) it waits behind the busy threads
to get it back: on the kernel tree that added ~100 ms to each call of a workspace's
first session.  A child has an interpreter of its own, and at nice 10 the kernel
gives the agent the cores first.  The store is already shared safely between
processes (flock locks, an index file re-read when its stamp changes), as it is when
an operator runs the CLI beside Hermes.

Work that talks to a network runs here for another reason: it can be stopped.  With
`limits`, the child is killed when it passes a total deadline, or when it moves fewer
bytes than a minimum rate over a window (it reports bytes moved as progress phase
"bytes"); `CutOff` says which.  libgit2's own timeout is per read, so a server that
trickles a byte now and then never trips it, and a thread cannot be stopped inside it.

The child dies with the thread that started it (PR_SET_PDEATHSIG), as the thread
died with its process: a job cut off is one of the crash points the store recovers
from (see docs/design.md).  It runs in a session of its own, so a Ctrl-C meant for
the agent does not reach it.  When no child can be started (no usable interpreter,
the package does not load there within READY_S), `Unavailable` says so and the caller
runs the job in-process as before.

Protocol, on a pipe of the child's own: one JSON document a line, `{"ready": true}`
once the package is loaded, `{"progress": [phase, done, total]}` now and then, and
last `{"result": {...}}` or `{"error": "..."}`.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .config import EngineConfig
from .consolidate import BACKGROUND_NICE
from .packers import die_with_parent

READY_S = 30.0                   # a child that has not loaded the package by then never will
PROGRESS_EVERY_S = 0.1
WATCH_EVERY_S = 0.2              # how often the limits of a job are checked
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_CHILD_PACKAGE = "_chronos_git_offload"

# Loads the package from its folder under a private name (Hermes loads it as
# hermes_plugins.chronos_git, pip as chronos_git; the child needs neither), then runs
# `child()` below.  argv: package folder, the host's sys.path as JSON, the job as JSON.
# The interpreter runs isolated (-I: no working folder, PYTHON* variables or user site
# on the path), in "/": a file in the agent's workspace is never imported.
_BOOT = (
    "import importlib.util, json, sys\n"
    "where = sys.argv[1]\n"
    "sys.path[:0] = [p for p in json.loads(sys.argv[2]) if p not in sys.path]\n"
    f"spec = importlib.util.spec_from_file_location({_CHILD_PACKAGE!r}, where + '/__init__.py',"
    " submodule_search_locations=[where])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    f"sys.modules[{_CHILD_PACKAGE!r}] = mod\n"
    "spec.loader.exec_module(mod)\n"
    f"importlib.import_module({_CHILD_PACKAGE!r} + '.engine.offload').child(sys.argv[3])\n"
)


class Unavailable(Exception):
    """No child could run the job: the caller runs it in this process."""


class Failed(Exception):
    """The job ran in the child and failed, or the child died while running it."""


class CutOff(Failed):
    """The child was killed at one of its limits: `limit` is "deadline" or "rate"."""

    def __init__(self, limit: str, message: str):
        super().__init__(message)
        self.limit = limit


@dataclasses.dataclass(frozen=True)
class Limits:
    """Kill the job past `deadline_s` (from its start), or when, over any `window_s`, it
    moved fewer than `min_rate_bps` bytes a second (0: no minimum)."""
    deadline_s: float
    min_rate_bps: float = 0.0
    window_s: float = 60.0


class _Watch:
    """The limits of one job, checked every WATCH_EVERY_S against the bytes the child reported."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.start = time.monotonic()
        self.moved = 0
        self.samples = collections.deque([(self.start, 0)])   # (when, bytes moved by then)
        self.why: tuple[str, str] | None = None

    def over(self) -> tuple[str, str] | None:
        now, lim = time.monotonic(), self.limits
        if now - self.start >= lim.deadline_s:
            return "deadline", f"not finished within {lim.deadline_s:.3g} s"
        self.samples.append((now, self.moved))
        while len(self.samples) > 1 and self.samples[1][0] <= now - lim.window_s:
            self.samples.popleft()          # the oldest sample left is the one a window ago
        then, before = self.samples[0]
        if lim.min_rate_bps and now - then >= lim.window_s and self.moved - before < lim.min_rate_bps * lim.window_s:
            return "rate", (f"{self.moved - before} bytes moved in the last {lim.window_s:.3g} s, fewer than "
                            f"{lim.min_rate_bps:.0f} a second")
        return None

    def run(self, proc: subprocess.Popen, done: threading.Event) -> None:
        while not done.wait(WATCH_EVERY_S):
            why = self.over()
            if why:
                self.why = why
                _kill(proc)
                return


def _kill(proc: subprocess.Popen) -> None:
    """The child and anything it started (its own session: its pid is the group's)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def run(job: str, store_dir: Path, config: EngineConfig, params: dict | None = None,
        progress=None, limits: Limits | None = None) -> dict:
    """Run `job` (a name in JOBS) on the store in a child process and return its result;
    `progress(phase, done, total)` hears the child's progress on this thread.  The child
    reports on a pipe of its own: a library printing to stdout cannot garble it.  With
    `limits`, a child past them is killed and `CutOff` raised."""
    if not sys.executable:
        raise Unavailable("this Python does not know its interpreter (sys.executable is empty)")
    spec = {"job": job, "store": os.fsdecode(store_dir), "parent": os.getpid(),
            "config": dataclasses.asdict(config), "params": params or {}}
    try:
        errors = tempfile.TemporaryFile()   # noqa: SIM115 (opened apart so an OSError is Unavailable; `with errors` closes it)
    except OSError as exc:
        raise Unavailable(f"no temporary file for the child's errors: {exc}") from None
    with errors:
        r, w = os.pipe()
        try:
            spec["fd"] = w
            argv = [os.fsdecode(sys.executable), "-I", "-c", _BOOT, os.fsdecode(_PACKAGE_DIR),
                    json.dumps([p for p in sys.path if isinstance(p, str) and p]), json.dumps(spec)]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                                    pass_fds=(w,), cwd="/", start_new_session=True)   # no Ctrl-C from the terminal
        except (OSError, TypeError, ValueError) as exc:
            os.close(r)
            raise Unavailable(f"cannot start {sys.executable}: {exc}") from None
        finally:
            os.close(w)
        ready = threading.Event()
        timer = threading.Timer(READY_S, lambda: ready.is_set() or proc.kill())   # type: ignore[func-returns-value]  # `or`: kill unless ready; the value is unused
        timer.daemon = True
        timer.start()
        watch, done = (_Watch(limits) if limits else None), threading.Event()
        if watch is not None:
            threading.Thread(target=watch.run, args=(proc, done), name="chronos-git-offload-watch",
                             daemon=True).start()
        answer = None
        try:
            with os.fdopen(r, "rb") as pipe:
                for line in pipe:
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(msg, dict):
                        continue
                    if msg.get("ready"):
                        ready.set()
                    elif "progress" in msg:
                        if watch is not None and msg["progress"][0] == "bytes":
                            watch.moved = int(msg["progress"][1])
                        if progress is not None:
                            progress(*msg["progress"])
                    elif "result" in msg or "error" in msg:
                        answer = msg
        except BaseException:
            proc.kill()                 # nobody reads its pipe any more: it must not wait on it
            raise
        finally:
            timer.cancel()
            done.set()
            code = proc.wait()
        if answer is not None and "result" in answer:
            return answer["result"]
        if watch is not None and watch.why is not None:
            raise CutOff(*watch.why)
        if answer is not None:
            raise Failed(str(answer["error"]))
        tail = _last_line(errors)
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if not ready.is_set():
            raise Unavailable(f"the child process did not load chronos-git within {READY_S:.0f} s ({how})"
                              + (f": {tail}" if tail else ""))
        raise Failed(f"the background process ended with {how} before it finished" + (f": {tail}" if tail else ""))


def _last_line(f) -> str:
    """The last line the child wrote on stderr (a traceback's says what went wrong)."""
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - 4000))
    lines = f.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


def _config(wire: dict) -> EngineConfig:
    """The host's EngineConfig (dataclasses.asdict, through JSON: the tuple came as a list)."""
    return EngineConfig(**{**wire, "ignored_patterns": tuple(wire["ignored_patterns"])})


# ------------------------------------------------------------------ the child
class _Report:
    """The child's end of the pipe: one JSON document a line; progress at most once per
    PROGRESS_EVERY_S unless the phase changes or it is done."""

    def __init__(self, fd: int):
        self.out = os.fdopen(fd, "w")
        self.last = 0.0
        self.phase: str | None = None

    def send(self, msg: dict) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase or done >= total or now - self.last >= PROGRESS_EVERY_S:
            self.last, self.phase = now, phase
            self.send({"progress": [phase, done, total]})


def _first_snapshot(store, params: dict, say) -> dict:
    from .checkpoint import CheckpointMeta
    ws = store.workspace(params["workspace"])
    res = ws.snapshot(CheckpointMeta(**params["meta"]), force_scan=True, progress=say)
    return {"checkpoint": res.checkpoint.id if res.checkpoint else None, "created": res.created,
            "partial": res.partial, "scan": res.report.get("scan"), "progress": ws.progress,
            "last_bulk": ws.last_bulk, "last_seed": ws.last_seed}


def _consolidate(store, params: dict, say) -> dict:
    from . import consolidate
    quiet = params.get("quiet")
    return consolidate.consolidate(store, progress=say,
                                   quiet=consolidate.quiet_for(store, Path(quiet)) if quiet else None)


def _remote(store, params: dict, say) -> dict:
    from . import remote
    return remote.job(store.root, params, say)


JOBS = {"first_snapshot": _first_snapshot, "consolidate": _consolidate, "remote": _remote}


def child(spec_json: str) -> None:
    """The child's side (see _BOOT): run one job and say how it went on the pipe."""
    spec = json.loads(spec_json)
    die_with_parent(spec.get("parent", 0))
    report = _Report(spec["fd"])
    try:
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)     # before any thread: they inherit it
    except OSError:
        pass
    report.send({"ready": True})
    code = 0
    try:
        from .store import Store
        store = Store.open(spec["store"], _config(spec["config"]), create=False)
        report.send({"result": JOBS[spec["job"]](store, spec["params"], report)})
    except Exception as exc:
        report.send({"error": f"{type(exc).__name__}: {exc}"})
        code = 1
    sys.exit(code)
