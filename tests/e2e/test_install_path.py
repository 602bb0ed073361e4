"""The user's install path: `hermes plugins install <url> --enable`, then `hermes chronos-git setup`.

Fast tests (no network): register() never raises and never leaves the plugin
silently off; the OFF shell with a stub ctx; setup_deps with throwaway venvs.
The slow test repeats exactly what a user does, in a FRESH venv with
hermes-agent from PyPI (which has no pygit2), against a git clone of the
current working tree.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import chronos_git
from chronos_git.cli import deps as setup_deps
from chronos_git.hermes import shell as hermes_shell

REPO = Path(__file__).resolve().parents[2]
SCRIPTED_MODEL = REPO / "tests" / "support" / "scripted_model.py"
OFF = "chronos-git protection is OFF"


class StubCtx:
    """Records register_* calls the way Hermes' PluginContext receives them."""

    def __init__(self):
        self.tools, self.hooks, self.middleware, self.commands, self.cli = {}, {}, {}, {}, {}

    def register_tool(self, name, toolset, schema, handler, **kw):
        self.tools[name] = {"toolset": toolset, "schema": schema, "handler": handler, **kw}

    def register_hook(self, name, callback):
        self.hooks.setdefault(name, []).append(callback)

    def register_middleware(self, kind, callback):
        self.middleware.setdefault(kind, []).append(callback)

    def register_command(self, name, handler, description="", args_hint=""):
        self.commands[name] = handler

    def register_cli_command(self, name, help, setup_fn, handler_fn=None, description=""):
        self.cli[name] = (setup_fn, handler_fn)


class RaisingCtx(StubCtx):
    def __getattribute__(self, name):
        if name.startswith("register_"):
            def boom(*a, **k):
                raise RuntimeError(f"host refused {name}")
            return boom
        return object.__getattribute__(self, name)


@pytest.fixture
def no_pygit2(monkeypatch):
    real = hermes_shell.importlib.util.find_spec
    monkeypatch.setattr(hermes_shell.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pygit2" else real(name, *a))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))


def cli(ctx: StubCtx, *argv) -> tuple:
    setup_fn, handler = ctx.cli["chronos-git"]
    p = argparse.ArgumentParser(prog="hermes chronos-git")
    setup_fn(p)
    return p.parse_args(list(argv)), handler


def assert_shell(ctx: StubCtx, reason_part: str) -> None:
    assert set(ctx.tools) == {"chronos_status"} and ctx.tools["chronos_status"]["toolset"] == "chronos"
    assert set(ctx.hooks) == {"pre_llm_call"} and not ctx.middleware
    assert set(ctx.commands) == {"chronos"} and set(ctx.cli) == {"chronos-git"}
    status = json.loads(ctx.tools["chronos_status"]["handler"]({}, task_id="t", session_id="s"))
    assert status["status"] == "error" and status["protection"]["state"] == "off"
    assert reason_part in status["protection"]["reason"] and OFF in status["error"]
    assert OFF in ctx.commands["chronos"]("status") and reason_part in ctx.commands["chronos"]("")


# ----------------------------------------------------------------- register()
def test_full_plugin_registers_when_dependencies_import():
    assert hermes_shell.protection_problem() is None
    ctx = StubCtx()
    chronos_git.register(ctx)
    assert "tool_execution" in ctx.middleware and "pre_tool_call" in ctx.hooks
    assert "chronos_rollback" in ctx.tools


def test_missing_dependency_registers_the_off_shell(no_pygit2):
    reason = hermes_shell.protection_problem()
    assert reason.startswith("pygit2 is not installed in the Python that runs Hermes (")
    assert sys.executable in reason
    ctx = StubCtx()
    chronos_git.register(ctx)
    assert_shell(ctx, "pygit2 is not installed")
    status = json.loads(ctx.tools["chronos_status"]["handler"]({}))
    assert status["protection"]["fix"] == "hermes chronos-git setup"


def test_broken_and_too_old_dependencies_are_reasons(monkeypatch):
    real_import = hermes_shell.importlib.import_module

    def fake_import(name, *a):
        if name == "pygit2":
            raise ImportError("libgit2.so.1.9: cannot open shared object file")
        return real_import(name, *a)
    monkeypatch.setattr(hermes_shell.importlib, "import_module", fake_import)
    monkeypatch.setattr(hermes_shell.importlib.metadata, "version", lambda name: "1.10.2")
    problems = hermes_shell.dependency_problems()
    assert problems["pygit2"].startswith("installed but fails to import (ImportError: libgit2.so")
    assert problems["pydantic"] == "version 1.10.2 is too old (chronos-git needs >= 2)"
    ctx = StubCtx()
    chronos_git.register(ctx)
    assert_shell(ctx, "fails to import")


def test_glue_raising_halfway_leaves_only_the_shell(monkeypatch):
    from chronos_git.hermes import plugin as hermes_glue

    def half_register(ctx):
        ctx.register_tool(name="chronos_rollback", toolset="chronos", schema={}, handler=lambda a, **k: "")
        ctx.register_middleware("tool_execution", lambda **k: None)
        raise ImportError("No module named 'pygit2._libgit2'")
    monkeypatch.setattr(hermes_glue, "register", half_register)
    ctx = StubCtx()
    assert chronos_git.register(ctx) is None
    assert_shell(ctx, "the full plugin failed to load (ImportError: No module named 'pygit2._libgit2'")
    status = json.loads(ctx.tools["chronos_status"]["handler"]({}))
    assert status["protection"]["fix"] == "hermes plugins update chronos-git"


def test_host_without_middleware_api_gets_the_shell():
    class OldHost(StubCtx):
        register_middleware = None
    ctx = OldHost()
    chronos_git.register(ctx)
    assert_shell(ctx, "this Hermes has no ctx.register_middleware")


@pytest.mark.parametrize("missing", [False, True])
def test_register_never_raises(monkeypatch, missing):
    if missing:
        monkeypatch.setitem(hermes_shell.DEPENDENCIES, "chronos_no_such_module", (1,))
    assert chronos_git.register(RaisingCtx()) is None
    assert chronos_git.register(object()) is None


# ------------------------------------------------------------------ the shell
def test_notice_reaches_the_model_and_the_user_once_per_session():
    err = io.StringIO()
    shell = hermes_shell.Shell("pygit2 is not installed in the Python that runs Hermes (/x/python)", stream=err)
    first = shell.pre_llm_call(session_id="s1", is_first_turn=True, model="m", platform="cli")
    assert OFF in first["context"] and "hermes chronos-git setup" in first["context"]
    assert "/x/python" in first["context"] and err.getvalue().count(OFF) == 1
    assert shell.pre_llm_call(session_id="s1", is_first_turn=False) is None
    assert shell.pre_llm_call(session_id="s1", is_first_turn=True) is None
    assert shell.pre_llm_call(session_id="s2", is_first_turn=False)["context"]  # resumed in a new process
    assert shell.pre_llm_call(session_id=None, is_first_turn=False) is None
    assert err.getvalue().count(OFF) == 2


def test_shell_cli_health_and_unknown_commands(no_pygit2, capsys):
    ctx = StubCtx()
    chronos_git.register(ctx)
    for argv, as_json in ((["health", "--json"], True), (["--json", "health"], True), (["health"], False),
                          (["log", "--json"], True), (["frobnicate", "x"], False), ([], False)):
        args, handler = cli(ctx, *argv)
        with pytest.raises(SystemExit) as exc:
            handler(args)
        assert exc.value.code == 1, argv
        out, err = capsys.readouterr()
        if as_json:
            doc = json.loads(out)
            assert doc == {"status": "error", "protection": {
                "state": "off", "reason": hermes_shell.protection_problem(), "fix": "hermes chronos-git setup"}}
        else:
            assert OFF in err and "hermes chronos-git setup" in err and out == ""


@pytest.mark.process
def test_shell_setup_with_dependencies_present_does_nothing(capsys):
    shell = hermes_shell.Shell("pretend")
    assert shell.run_cli("setup", ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "ok" and doc["installed"] is False and doc["command"] == []


# ---------------------------------------------------------------- setup_deps
def test_pins_match_requirements_dev():
    pinned = {}
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            pinned[line.split("==")[0].lower()] = line
    assert setup_deps.PINS == {name: pinned[name] for name in ("pygit2", "pydantic")}
    assert set(setup_deps.PINS) == set(hermes_shell.DEPENDENCIES)


def run_setup(yes=False, python=None):
    out, err = io.StringIO(), io.StringIO()
    rc = setup_deps.run_setup(yes, True, out, err, python=python)
    docs = out.getvalue().splitlines()
    assert len(docs) == 1, out.getvalue()
    return rc, json.loads(docs[0]), err.getvalue()


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> str:
    """A Python without pygit2, pydantic and pip (made offline in a fraction of a second)."""
    d = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    return str(d / "bin" / "python")


@pytest.mark.process
def test_setup_already_satisfied():
    rc, doc, _ = run_setup(yes=True)
    assert rc == 0 and doc["status"] == "ok" and doc["installed"] is False
    assert doc["python"] == sys.executable and doc["versions"]["pygit2"] == "1.21.0"


@pytest.mark.process
def test_setup_without_tty_or_yes_only_says_what_it_would_do(bare_venv):
    rc, doc, err = run_setup(python=bare_venv)
    assert rc == 2 and doc["status"] == "error" and doc["installed"] is False
    assert doc["packages"] == ["pygit2==1.21.0", "pydantic==2.13.4"]
    assert doc["command"] == [bare_venv, "-m", "pip", "install", "pygit2==1.21.0", "pydantic==2.13.4"]
    assert bare_venv in err and "pip install pygit2==1.21.0 pydantic==2.13.4" in err and "--yes" in doc["error"]


@pytest.mark.process
def test_setup_answer_no_installs_nothing(bare_venv, monkeypatch):
    monkeypatch.setattr(setup_deps, "_confirm", lambda err: False)
    rc, doc, _ = run_setup(python=bare_venv)
    assert rc == 2 and doc["error"] == "Nothing installed."


@pytest.mark.process
def test_setup_without_pip_is_a_clear_error(bare_venv):
    rc, doc, err = run_setup(yes=True, python=bare_venv)
    assert rc == 1 and doc["installed"] is False
    assert doc["error"].startswith(f"pip is not available in {bare_venv}") and "ensurepip" in doc["error"]
    assert "Traceback" not in err


@pytest.mark.process
def test_setup_pip_failure_offline_is_a_clear_error(tmp_path, monkeypatch):
    venv = tmp_path / "pipvenv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")           # no network: pip fails finding the pins
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    rc, doc, err = run_setup(yes=True, python=str(venv / "bin" / "python"))
    assert rc == 1 and doc["installed"] is False and doc["error"].startswith("pip install failed (exit code")
    assert doc["pip_output"] and "Traceback" not in doc["error"]


@pytest.mark.process
def test_setup_with_unrunnable_python_is_a_clear_error(tmp_path):
    rc, doc, _ = run_setup(yes=True, python=str(tmp_path / "nope" / "python"))
    assert rc == 1 and doc["error"].startswith("setup failed: could not run")


# ------------------------------------------------------- the user's real path
NETWORK_ERRORS = ("NewConnectionError", "Failed to establish", "Name or service not known",
                  "Temporary failure in name resolution", "Network is unreachable", "ConnectTimeout")


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HERMES_", "CHRONOS_GIT_", "PYTHON", "VIRTUAL_ENV")) and k != "TERMINAL_CWD"}
    env.update(NO_COLOR="1", **extra)
    return env


@pytest.fixture(scope="session")
def fresh_hermes(tmp_path_factory):
    """A new venv with only `pip install hermes-agent==0.19.0`: what a user has before chronos-git."""
    venv = tmp_path_factory.mktemp("fresh-hermes") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "hermes-agent==0.19.0"],
                       capture_output=True, text=True, timeout=1500, env=_clean_env(), stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        if any(s in r.stdout + r.stderr for s in NETWORK_ERRORS):
            pytest.skip(f"PyPI is unreachable, cannot build a fresh Hermes venv: {r.stderr.strip()[-300:]}")
        pytest.fail(f"pip install hermes-agent==0.19.0 failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    yield venv / "bin"
    shutil.rmtree(venv, ignore_errors=True)      # ~230 MB


def snapshot_of_worktree(dest: Path) -> Path:
    """A git repo holding exactly the current working tree (uncommitted changes included)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    git = ["git", "-C", str(dest), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "working tree under test"], check=True)
    return dest


class User:
    """One user's machine: the fresh Hermes venv, an isolated HERMES_HOME, a scripted model."""

    def __init__(self, root: Path, bin_dir: Path):
        self.root, self.bin = root, bin_dir
        self.home, self.ws = root / "home", root / "ws"
        self.script, self.log = root / "script.json", root / "model-requests.jsonl"
        self.home.mkdir(parents=True)
        self.ws.mkdir(parents=True)
        self.set_script([{"match": "*", "steps": [{"content": "ok"}]}])
        self.model = subprocess.Popen([sys.executable, str(SCRIPTED_MODEL), "--port", "0", "--script",
                                       str(self.script), "--log", str(self.log)], stdout=subprocess.PIPE, text=True)
        port = int(self.model.stdout.readline().split()[1])
        # The config a user has before installing (JSON is valid YAML); no plugin enabled yet.
        (self.home / "config.yaml").write_text(json.dumps({
            "model": {"provider": "custom", "base_url": f"http://127.0.0.1:{port}/v1",
                      "default": "scripted-model", "api_key": "sk-local-test"},
            "plugins": {"enabled": []},
            "security": {"allow_lazy_installs": False, "tirith_enabled": False},
            "approvals": {"timeout": 5}}))

    def stop(self):
        if self.model.poll() is None:
            self.model.terminate()
            try:
                self.model.wait(5)
            except subprocess.TimeoutExpired:
                self.model.kill()

    def set_script(self, turns):
        self.script.write_text(json.dumps({"turns": turns}).replace("__WS__", str(self.ws)))

    def run(self, *argv, timeout=300) -> subprocess.CompletedProcess:
        env = _clean_env(HERMES_HOME=str(self.home), PATH=f"{self.bin}:{os.environ.get('PATH', '')}")
        return subprocess.run([str(self.bin / "hermes"), *map(str, argv)], cwd=self.ws, env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def chat(self, message):
        return self.run("chat", "-Q", "-t", "file,terminal,chronos", "-q", message, timeout=240)

    def first_model_request(self) -> str:
        reqs = [json.loads(l) for l in self.log.read_text().splitlines() if l.strip()]
        req = next(r for r in reqs if r["has_tools"])
        return "\n".join(m["content"] for m in req["messages"] if m["role"] == "user" and isinstance(m["content"], str))


@pytest.mark.hermes
@pytest.mark.slow
def test_user_install_path_end_to_end(fresh_hermes, tmp_path):
    src = snapshot_of_worktree(tmp_path / "src")
    user = User(tmp_path / "user", fresh_hermes)
    try:
        # 1. install + enable exactly as documented
        r = user.run("plugins", "install", f"file://{src}", "--enable")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "hermes chronos-git setup" in r.stdout          # after-install.md was shown
        assert (user.home / "plugins" / "chronos-git" / "plugin.yaml").exists()
        listed = json.loads(user.run("plugins", "list", "--json", "--user").stdout)
        assert {"name": "chronos-git", "status": "enabled"}.items() <= listed[0].items()
        no_pygit2 = subprocess.run([str(fresh_hermes / "python"), "-c", "import pygit2"], capture_output=True)
        assert no_pygit2.returncode != 0                         # the situation the user is in

        # 2. health says OFF and names the fix
        r = user.run("chronos-git", "health")
        assert r.returncode == 1 and OFF in r.stdout + r.stderr and "hermes chronos-git setup" in r.stderr
        r = user.run("chronos-git", "health", "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 1 and doc["protection"]["state"] == "off"
        assert doc["protection"]["fix"] == "hermes chronos-git setup" and "pygit2" in doc["protection"]["reason"]
        r = user.run("chronos-git", "setup")                    # no TTY, no --yes: only says what it would do
        assert r.returncode == 2 and "-m pip install pygit2==1.21.0" in r.stdout and "--yes" in r.stderr

        # 3. a session: the model and the user are told
        user.set_script([{"match": "*", "steps": [{"content": "hello from the model"}]}])
        t0 = time.time()
        r = user.chat("hello")
        assert r.returncode == 0, r.stderr[-3000:]
        assert "hello from the model" in r.stdout
        assert OFF in r.stderr and "hermes chronos-git setup" in r.stderr
        seen = user.first_model_request()
        assert OFF in seen and "hermes chronos-git setup" in seen and "pygit2 is not installed" in seen
        print(f"chat before setup: {time.time() - t0:.1f}s")

        # 4. setup installs into Hermes' own Python, verifies, asks for a restart
        t0 = time.time()
        r = user.run("chronos-git", "setup", "--yes", timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "Installed and verified" in r.stdout and "Restart Hermes" in r.stdout
        print(f"setup --yes: {time.time() - t0:.1f}s")
        r = user.run("chronos-git", "health", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)                               # the full plugin's health (cli.py) now
        assert doc["status"] == "ok" and doc["protection"]["state"] == "ready"     # no store until the first call

        # 5. protection works: a write_file makes a checkpoint
        user.set_script([{"match": "*", "steps": [
            {"tool_calls": [{"name": "write_file", "id": "call_after_setup",
                             "arguments": {"path": "__WS__/hello.txt", "content": "protected\n"}}]},
            {"content": "written"}]}])
        r = user.chat("write the file")
        assert r.returncode == 0, r.stderr[-3000:]
        assert (user.ws / "hello.txt").read_text() == "protected\n" and OFF not in r.stderr
        r = user.run("chronos-git", "log", "--workspace", user.ws, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        checkpoints = json.loads(r.stdout)["checkpoints"]
        assert checkpoints and any(c.get("tool_call_id") == "call_after_setup" for c in checkpoints)
        r = user.run("chronos-git", "health", "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 0 and doc["status"] == "ok" and doc["protection"] == {"state": "on"}
    finally:
        user.stop()
