"""The demo (scripts/demo.py) end to end: it exits 0 and its story holds.

Runs `python scripts/demo.py --dir <tmp>` once against the real hermes-agent,
then checks the printed story against the store it left behind: every step
headline, the checkpoint the rollback went back to (id, description, time), no
operation shown as settled and waiting at once, no raw tool previews (`a//`
diff headers), no walls of JSON, and follow-up commands that run and print text.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.py"
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.hermes,
              pytest.mark.skipif(shutil.which("hermes", path=f"{BIN}:{os.environ.get('PATH', '')}") is None,
                                 reason="hermes-agent is not installed in this environment")]


def _steps() -> list[str]:
    spec = importlib.util.spec_from_file_location("chronos_demo", DEMO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.STEPS


def _env(home: Path) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_GIT_", "HERMES_"))}
    e.update(HERMES_HOME=str(home), NO_COLOR="1", PATH=f"{BIN}:{e.get('PATH', '')}")
    return e


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_GIT_", "HERMES_"))}
    env["NO_COLOR"] = "1"
    r = subprocess.run([sys.executable, str(DEMO), "--dir", str(root)], capture_output=True, text=True,
                       timeout=900, env=env, stdin=subprocess.DEVNULL)
    return root, r


def _facts(root: Path, *args) -> dict:
    r = subprocess.run([str(BIN / "hermes"), "chronos-git", "--json", *args], cwd=root / "ws",
                       env=_env(root / "home"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _blocks(out: str, steps: list[str]) -> dict[int, str]:
    """The text of each step, from its headline to the next one (the last up to `Where everything is`)."""
    starts = []
    for n, title in enumerate(steps, 1):
        head = f"[{n}/{len(steps)}] {title}"
        assert head in out, f"headline missing: {head}"
        starts.append(out.index(head))
    assert starts == sorted(starts), "the steps are not printed in order"
    ends = starts[1:] + [out.index("Where everything is")]
    return {n: out[s:e] for n, (s, e) in enumerate(zip(starts, ends), 1)}


def test_demo_exits_0_and_tells_every_step(demo):
    root, r = demo
    assert r.returncode == 0, f"demo failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "demo FAILED" not in r.stdout + r.stderr
    blocks = _blocks(r.stdout, _steps())
    for n, text in blocks.items():
        lines = [l for l in text.splitlines()[1:] if l.strip()]
        prose = [l for l in lines if l.startswith("   ") and not l.startswith("    ")
                 and not l.lstrip().startswith(("$", ">")) and not l.rstrip().endswith(":")]
        shown = [l for l in lines if l.lstrip().startswith(("$", ">")) or l.rstrip().endswith(":")]
        assert prose, f"step {n} says nothing about what happened:\n{text}"
        assert shown, f"step {n} shows no evidence:\n{text}"
    assert "--yolo" in blocks[6], "the rollback step does not say who approved it"
    # nothing outside its folder: not even what Hermes leaves of the sessions the demo kills
    left = [p for p in Path("/tmp").glob("hermes-snap-*.sh") if str(root / "home") in p.read_text(errors="replace")]
    assert not left, left


def test_demo_names_the_checkpoint_it_rolled_back_to(demo):
    root, r = demo
    assert r.returncode == 0, r.stderr[-3000:]
    events = _facts(root, "journal", "log", "--limit", "10000")["events"]
    rollback = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos_rollback"]
    assert len(rollback) == 1
    target = rollback[0]["args"]["checkpoint"]
    safety = rollback[0]["pre_checkpoint"]
    info = _facts(root, "show", target)["checkpoint"]
    when = datetime.fromtimestamp(info["time"]).strftime("%Y-%m-%d %H:%M:%S")
    blocks = _blocks(r.stdout, _steps())
    flat = " ".join(blocks[6].split())          # prose is wrapped: compare without line breaks
    assert f'{target[:12]} ("{info["description"]}", {when})' in flat, blocks[6]
    assert safety[:12] in blocks[6]
    # two safety checkpoints in the undo step: the one restored, and the undo's own, each explained
    undo = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos.restore"]
    assert len(undo) == 1 and undo[0]["args"]["checkpoint"] == safety
    ids = set(re.findall(r"\b[0-9a-f]{12}\b", blocks[7]))
    assert safety[:12] in ids and undo[0]["pre_checkpoint"][:12] in ids
    assert "its own safety checkpoint" in " ".join(blocks[7].split())
    ops = {e["operation_id"][:12] for e in events if e.get("operation_id")}    # named in descriptions
    assert ids - ops <= {safety[:12], undo[0]["pre_checkpoint"][:12]}, f"unexplained checkpoint ids in step 7: {ids}"


def test_demo_shows_no_contradictory_or_raw_output(demo):
    root, r = demo
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "a//" not in out and "b//" not in out, "raw tool diff previews leaked into the story"
    assert not re.search(r"needs.operator", out), "a waiting operation shown as settled (needs_operator)"
    events = _facts(root, "journal", "log", "--limit", "10000")["events"]
    shell = [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == "call_deploy"]
    assert len(shell) == 1
    op = shell[0]["operation_id"][:12]
    gate = _blocks(out, _steps())[4]
    assert op in gate and "pending" in gate
    for line in gate.splitlines():
        if op in line and "--outcome" not in line:
            assert not re.search(r"\b(completed|not.applied|needs.operator|partial)\b", line), f"settled and waiting: {line}"
    for line in out.splitlines():
        assert not (len(line) > 200 and re.search(r'[{\[]\s*"', line)), f"a wall of JSON: {line[:300]}"
        assert len(line) <= 240, f"an overlong line: {line}"


def test_demo_follow_up_commands_print_text(demo):
    root, r = demo
    assert r.returncode == 0, r.stderr[-3000:]
    tail = r.stdout[r.stdout.index("Where everything is"):]
    assert str(root / "ws") in tail and str(root / "home") in tail
    cd = next(l.strip() for l in tail.splitlines() if l.strip().startswith("cd "))
    commands = [l.strip()[2:].split("   #")[0].strip() for l in tail.splitlines() if l.strip().startswith("$ ")]
    assert 3 <= len(commands) <= 5, commands
    for cmd in commands:
        p = subprocess.run(["bash", "-c", f"{cd} && {cmd}"], capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_GIT_", "HERMES_"))})
        assert p.returncode == 0, f"{cmd}: {p.stderr}"
        assert p.stdout.strip(), f"{cmd} printed nothing"
        assert not p.stdout.lstrip().startswith(("{", "[")), f"{cmd} printed JSON"
        assert max(len(l) for l in p.stdout.splitlines()) < 300, f"{cmd} printed an overlong line"
