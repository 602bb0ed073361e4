"""The chronos-git demo: a real Hermes session with a scripted model, told as a story.

Eight steps, each a numbered headline, what happened and why it matters, then a
short excerpt of real output as evidence: a normal session, a SIGKILL in the
middle of a tool call and its recovery by evidence, a crashed shell call that
closes the recovery gate and the operator who resolves it, a rollback by the
model and its undo, and a final verification.  Every claim is checked against
the CLI's --json output (or the disk) before it is printed; if one does not
hold, the demo stops with "demo FAILED at step N" and exits 1.

Everything lives in one folder (HERMES_HOME, workspace, store, transcripts of
each `hermes chat`), printed at the end with commands to look around.

    bash scripts/demo.sh            (sets up .venv first)
    python scripts/demo.py [--dir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
from hermes_env import ANSI, HermesEnv, hermes_bin  # noqa: E402

BOLD, DIM, OFF = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() and not os.environ.get("NO_COLOR") \
    else ("", "", "")
STANDALONE = Path(sys.executable).parent / "chronos-git"
WIDTH = 100          # prose is wrapped to this; excerpt lines are clipped at CLIP
CLIP = 160

STEPS = [
    "A normal session: write_file, patch and terminal, each checkpointed and journaled",
    "A crash: Hermes is SIGKILLed in the middle of a write_file call",
    "Recovery by evidence: the next session settles the cut-off write as completed",
    "A crashed shell command cannot be settled by evidence: the recovery gate closes",
    "The operator resolves the shell call with evidence: the gate opens",
    "The model rolls back to the first checkpoint (approved by --yolo)",
    "Undo: restoring the rollback's safety checkpoint brings everything back",
    "Verification: journal verify and git fsck are clean",
]

APP = "def greet(name):\n    return 'hello ' + name\n"
FEATURE = "from app import greet\nprint(greet('chronos'))\n"
CONFIG = '{"greeting": "Hello"}\n'


class DemoFailure(Exception):
    """A step did not behave as the story claims."""


def check(cond, claim: str) -> None:
    if not cond:
        raise DemoFailure(claim)


# ---------------------------------------------------------------- output
def step(n: int) -> None:
    global CURRENT
    CURRENT = n
    print(f"\n{BOLD}[{n}/{len(STEPS)}] {STEPS[n - 1]}{OFF}", flush=True)


CURRENT = 0


def say(text: str) -> None:
    for line in textwrap.wrap(text, WIDTH - 3):
        print(f"   {line}")


def clip(line: str) -> str:
    return line if len(line) <= CLIP else line[:CLIP - 1] + "…"


def evidence(command: str, output: str, limit: int = 12, *, label: str | None = None) -> None:
    """`$ command` (or a label) and the first `limit` lines of what it printed."""
    print(f"   {DIM}${OFF} {command}" if label is None else f"   {label}:")
    lines = output.rstrip("\n").splitlines()
    for line in lines[:limit]:
        print(f"     {clip(line)}".rstrip())
    if len(lines) > limit:
        print(f"     {DIM}... ({len(lines) - limit} more lines){OFF}")


def fact(text: str) -> None:
    """A checked fact, wrapped (never cut: the end of a fact is often its point)."""
    lines = textwrap.wrap(text, WIDTH - 5) or [""]
    print(f"   {DIM}>{OFF} {lines[0]}")
    for line in lines[1:]:
        print(f"     {line}")


def when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------- running things
class Demo:
    def __init__(self, env: HermesEnv, root: Path):
        self.env, self.root = env, root
        self.transcripts = root / "transcripts"
        self.transcripts.mkdir(parents=True, exist_ok=True)
        self.chats = 0

    def chat(self, message: str, *, name: str, fault: str | None = None, yolo: bool = False):
        """One `hermes chat -q`; its raw output goes to transcripts/, never to the story."""
        self.chats += 1
        r = self.env.chat(message, env={"CHRONOS_GIT_FAULT": fault} if fault else None, yolo=yolo)
        path = self.transcripts / f"{self.chats:02d}-{name}.txt"
        path.write_text(f"$ hermes chat -Q -q {message!r}{' --yolo' if yolo else ''}"
                        f"{f'   (CHRONOS_GIT_FAULT={fault})' if fault else ''}\n"
                        f"exit status {r.returncode}\n--- stdout\n{ANSI.sub('', r.stdout)}\n"
                        f"--- stderr\n{ANSI.sub('', r.stderr)}\n")
        return r, path

    def text(self, *args, ok=(0,)) -> str:
        """`hermes chronos-git ARGS` (text output, for people)."""
        r = self.env.chronos(*args)
        out = (r.stdout + r.stderr).strip("\n")
        check(r.returncode in ok, f"`hermes chronos-git {' '.join(map(str, args))}` exited {r.returncode}: {out}")
        return out

    def facts(self, *args) -> dict:
        """`chronos-git --json ARGS`: one JSON document, for deciding.  The standalone operator CLI
        is the same code as `hermes chronos-git` and starts in half the time."""
        if STANDALONE.exists():
            r = subprocess.run([str(STANDALONE), "--store", str(self.env.store), "--json", *map(str, args)],
                               cwd=self.env.ws, env=self.env.env(), capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
        else:
            r = self.env.chronos("--json", *args)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            raise DemoFailure(f"`hermes chronos-git --json {' '.join(map(str, args))}` printed no JSON "
                              f"(exit {r.returncode}): {(r.stdout + r.stderr).strip()[:500]}")
        check(doc.get("status") != "error", f"`hermes chronos-git --json {' '.join(map(str, args))}` "
                                            f"failed: {doc.get('error')}")
        return doc

    def events(self) -> list[dict]:
        """Every journal event, oldest first."""
        return list(reversed(self.facts("journal", "log", "--limit", "10000")["events"]))

    def plain_git(self, *args) -> subprocess.CompletedProcess:
        """Stock git over the store, not through chronos-git: every chronos-git command (its
        `git` too) starts the service first, which settles a call cut off by a crash."""
        return subprocess.run(["git", "--git-dir", str(self.env.store), *args], capture_output=True, text=True,
                              env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})

    def git(self, *args) -> subprocess.CompletedProcess:
        """Stock git over the store as the README says to run it: `chronos-git git ARGS` (the
        store examined first, no pager or hook of the store's obeyed)."""
        cli = [str(STANDALONE)] if STANDALONE.exists() else [sys.executable, "-m", "chronos_git.cli"]
        return subprocess.run([*cli, "--store", str(self.env.store), "git", *args], cwd=self.env.ws,
                              env=self.env.env(), capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)


def files_of(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}


def killed(rc: int) -> bool:
    return rc in (-signal.SIGKILL, 128 + signal.SIGKILL)


def started_by_call(events: list[dict], call_id: str) -> list[dict]:
    return [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == call_id]


def contradictions(text: str, op: str) -> list[str]:
    """Lines of `text` that show `op`, which waits for an operator, as settled."""
    return [l for l in text.splitlines() if "needs_operator" in l or "needs operator" in l or (
        op[:12] in l and "--outcome" not in l and any(w in l for w in ("completed", "not applied", "partial")))]


def outcome_of(events: list[dict], op: str) -> dict | None:
    return next((e for e in events if e.get("operation_id") == op and e["kind"] not in ("started", "maintenance")), None)


# ---------------------------------------------------------------- the story
def run(demo: Demo) -> dict:
    env, ws = demo.env, demo.env.ws
    said: dict = {}

    # ------------------------------------------------------------ 1
    step(1)
    env.set_script([{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "id": "call_feature", "arguments": {
            "path": "__WS__/feature.py", "content": FEATURE}}]},
        {"tool_calls": [{"name": "patch", "id": "call_patch", "arguments": {
            "mode": "replace", "path": "__WS__/app.py", "old_string": "'hello '", "new_string": "'Hello, '"}}]},
        {"tool_calls": [{"name": "terminal", "id": "call_run", "arguments": {
            "command": f"cd {ws} && python3 feature.py > output.txt"}}]},
        {"content": "Added feature.py, capitalised the greeting and ran it."}]}])
    r, log = demo.chat("add a feature", name="normal-session")
    check(r.returncode == 0, f"hermes chat exited {r.returncode} (see {log})")
    check((ws / "feature.py").read_text() == FEATURE, "write_file did not create feature.py")
    check("'Hello, '" in (ws / "app.py").read_text(), "patch did not change app.py")
    check((ws / "output.txt").read_text() == "Hello, chronos\n", "terminal did not write output.txt")
    events = demo.events()
    calls = {}
    for tool, call_id in (("write_file", "call_feature"), ("patch", "call_patch"), ("terminal", "call_run")):
        st = started_by_call(events, call_id)
        check(len(st) == 1 and st[0]["tool"] == tool, f"{tool} ({call_id}) was not journaled exactly once")
        out = outcome_of(events, st[0]["operation_id"])
        check(out and out["kind"] == "returned" and out.get("status") == "ok",
              f"{tool} has no outcome 'returned ok' in the journal: {out}")
        check(st[0].get("pre_checkpoint") and out.get("post_checkpoint"),
              f"{tool} has no checkpoint before and after it")
        calls[tool] = (st[0], out)
    first = calls["write_file"][0]["pre_checkpoint"]
    checkpoints = demo.facts("log", "--limit", "1000")["checkpoints"]
    by_id = {c["id"]: c for c in checkpoints}
    for tool, (_, out) in calls.items():
        check(by_id.get(out["post_checkpoint"], {}).get("description") == f"after {tool}",
              f"no checkpoint 'after {tool}' in `log`")
    check(first in by_id, f"the checkpoint before the first call ({first[:12]}) is not in `log`")
    said["first"] = by_id[first]
    say("The agent (a scripted model driving a real `hermes chat`) wrote feature.py, patched app.py "
        "('hello ' -> 'Hello, ') and ran `python3 feature.py > output.txt`.")
    say("Each call got a checkpoint and two journal entries: an intent (fsynced) before the tool ran and "
        "its outcome after, so every change can be inspected and undone.")
    evidence("hermes chronos-git log", demo.text("log"))
    evidence("hermes chronos-git git log --oneline -6 refs/chronos/journal",
             demo.git("log", "--oneline", "-6", "refs/chronos/journal").stdout)
    a, b = calls["write_file"][1]["post_checkpoint"], calls["patch"][1]["post_checkpoint"]
    evidence(f"hermes chronos-git diff {a[:12]} {b[:12]}      # what the patch call changed",
             demo.text("diff", a[:12], b[:12]))

    # ------------------------------------------------------------ 2
    step(2)
    env.set_script([{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "id": "call_config", "arguments": {
            "path": "__WS__/config.json", "content": CONFIG}}]},
        {"content": "never reached"}]}])
    r, log = demo.chat("write the config", name="crash-mid-write", fault="after_dispatch")
    check(killed(r.returncode), f"hermes was expected to die by SIGKILL, exit status {r.returncode} (see {log})")
    check((ws / "config.json").read_text() == CONFIG, "config.json was not written before the crash")
    st = (ws / "config.json").stat()
    before = (st.st_ino, st.st_mtime_ns)
    # read the journal with plain git: any chronos-git command would settle the call itself
    head = demo.plain_git("log", "-1", "--format=%H%n%b", "refs/chronos/journal").stdout.split("\n", 1)
    last = json.loads(head[1].strip())
    check(last["kind"] == "started" and last.get("tool") == "write_file" and last.get("tool_call_id") == "call_config",
          f"the journal should end with the intent of the write, it ends with {last.get('kind')} {last.get('tool')}")
    crash_op = last["operation_id"]
    say("The agent asked to write config.json. A fault hook (CHRONOS_GIT_FAULT=after_dispatch) killed Hermes "
        "with SIGKILL after the file landed on disk, before the call's outcome was journaled.")
    say("The journal now ends with an intent and no outcome: on its own, nobody can tell whether the "
        "write happened. Running it again blindly could do it twice.")
    fact(f"hermes exit status {r.returncode} (SIGKILL); config.json on disk: {CONFIG.strip()}")
    evidence("git --git-dir $STORE log --oneline -1 refs/chronos/journal   # plain git: a chronos-git "
             "command would settle the call first", demo.plain_git("log", "--oneline", "-1", "refs/chronos/journal").stdout)

    # ------------------------------------------------------------ 3
    step(3)
    env.set_script([{"match": "*", "steps": [{"content": "Understood: config.json is already written."}]}])
    r, log = demo.chat("continue where we left off", name="recovery")
    check(r.returncode == 0, f"hermes chat exited {r.returncode} (see {log})")
    events = demo.events()
    rec = outcome_of(events, crash_op)
    check(rec and rec["kind"] == "recovered" and rec.get("outcome") == "completed",
          f"the cut-off write should be recovered as completed, the journal says {rec}")
    writes = [e for e in events if e["kind"] == "started" and e.get("tool") == "write_file"
              and any(d["path"].endswith("/config.json") for d in e.get("declared") or [])]
    check(len(writes) == 1, f"config.json should be written once, the journal has {len(writes)} writes of it")
    st = (ws / "config.json").stat()
    check((st.st_ino, st.st_mtime_ns) == before and (ws / "config.json").read_text() == CONFIG,
          "config.json was touched again after the crash")
    alert = next((m for m in env.user_messages_seen() if "[chronos-git recovery alert]" in m
                  and "config.json" in m), "")
    check("do NOT repeat it" in alert, "the model was not told that the write had completed")
    ev = next((x for x in rec.get("evidence") or [] if x["path"].endswith("/config.json")), {})
    check(ev.get("at_post") is True, f"the evidence does not show config.json at its post-image: {ev}")
    say("At the next start chronos-git compared config.json with the call's pre-image (no file) and its "
        "expected post-image: the file is at the post-image, so the call is settled as completed.")
    say("The model is told not to repeat it, and nothing wrote config.json twice (same inode and mtime).")
    fact(f"evidence: config.json before the call: {'absent' if ev.get('pre') is None else ev['pre'][:12]}, "
         f"expected after: {ev['post'][:12]}, on disk: {ev['now'][:12]} -> {rec['outcome']} ({rec.get('note')})")
    text = alert[alert.find("[chronos-git recovery alert]"):]
    evidence("", text, 4, label="what the model was told on its first turn")
    evidence(f"hermes chronos-git journal show {crash_op[:12]}", demo.text("journal", "show", crash_op[:12]))

    # ------------------------------------------------------------ 4
    step(4)
    env.set_script([
        {"match": "DEPLOY", "steps": [{"tool_calls": [{"name": "terminal", "id": "call_deploy", "arguments": {
            "command": f"echo deployed > {ws}/deploy.log"}}]}, {"content": "never reached"}]},
        {"match": "*", "steps": [
            {"tool_calls": [{"name": "write_file", "id": "call_more", "arguments": {
                "path": "__WS__/more.txt", "content": "more\n"}}]},
            {"content": "The write was blocked; waiting for the operator."}]}])
    r, log = demo.chat("DEPLOY it", name="crash-mid-shell", fault="after_dispatch")
    check(killed(r.returncode), f"hermes was expected to die by SIGKILL, exit status {r.returncode} (see {log})")
    r, log = demo.chat("next task", name="gate-closed")
    check(r.returncode == 0, f"hermes chat exited {r.returncode} (see {log})")
    blocked = next((t for t in env.tool_results_seen() if "chronos_blocked" in t), None)
    check(blocked is not None, "the model's write_file was not refused while the gate was closed")
    check(not (ws / "more.txt").exists(), "more.txt exists: the refused write_file ran anyway")
    status = demo.facts("journal", "status")
    check(status["gate"] == "closed", f"the recovery gate should be closed, it is {status['gate']}")
    shell = [op for op in status["unresolved"] if op.get("tool") == "terminal"]
    check(len(status["unresolved"]) == 1 and shell, f"exactly the shell call should wait for an operator: "
                                                   f"{[(o['operation_id'][:12], o.get('tool')) for o in status['unresolved']]}")
    gate_op = shell[0]["operation_id"]
    check(shell[0].get("tool_call_id") == "call_deploy" and shell[0].get("state") == "pending",
          f"the operation waiting for the operator is not the crashed shell call: {shell[0]}")
    status_text = demo.text("journal", "status", ok=(0, 3))
    check(not contradictions(status_text, gate_op),
          f"`journal status` shows the waiting operation as settled too:\n{status_text}")
    check(gate_op[:12] in status_text and "CLOSED" in status_text,
          f"`journal status` does not show {gate_op[:12]} waiting and the gate closed:\n{status_text}")
    try:
        message = json.loads(json.loads(blocked)["error"])["message"]
    except (ValueError, KeyError, TypeError):
        message = blocked
    say(f"The agent ran `echo deployed > deploy.log` and Hermes was SIGKILLed again, mid-call. A shell command "
        f"declares no paths, so no evidence can say whether (or how far) it ran: operation {gate_op[:12]} "
        f"waits for an operator.")
    say("Until then the recovery gate is closed: in the next session the agent's write_file of more.txt was "
        "refused (the file does not exist); read-only tools still work.")
    fact(f"the refused call's result: {message.split('. ')[0]}.")
    evidence("hermes chronos-git journal status", status_text)

    # ------------------------------------------------------------ 5
    step(5)
    deployed = (ws / "deploy.log").read_text() if (ws / "deploy.log").exists() else None
    check(deployed == "deployed\n", f"deploy.log should hold 'deployed', it holds {deployed!r}")
    proof = "deploy.log holds 'deployed': the command ran to the end"
    resolved = demo.text("journal", "resolve", gate_op[:12], "--outcome", "completed", "--evidence", proof)
    status = demo.facts("journal", "status")
    check(status["gate"] == "open" and not status["unresolved"],
          f"after the resolve the gate should be open with nothing unresolved: gate {status['gate']}, "
          f"{len(status['unresolved'])} unresolved")
    res = outcome_of(demo.events(), gate_op)
    check(res and res["kind"] == "resolved" and res.get("outcome") == "completed" and res.get("evidence") == proof,
          f"the journal does not record the operator's resolution with its evidence: {res}")
    say("The operator looked: deploy.log holds 'deployed', so the command did run. They record that as the "
        "outcome, with the evidence, in the journal; the model has no tool that can do this.")
    say("Nothing is unresolved any more, so protected calls run again.")
    evidence("cat deploy.log", deployed)
    evidence(f'hermes chronos-git journal resolve {gate_op[:12]} --outcome completed --evidence "{proof}"',
             resolved)

    # ------------------------------------------------------------ 6
    step(6)
    target = said["first"]
    before_rollback = files_of(ws)
    env.set_script([{"match": "*", "steps": [
        {"tool_calls": [{"name": "chronos_rollback", "id": "call_rollback",
                         "arguments": {"checkpoint_id": target["id"], "mode": "full"}}]},
        {"content": "Rolled back to the first checkpoint."}]}])
    r, log = demo.chat("roll everything back", name="rollback", yolo=True)
    check(r.returncode == 0, f"hermes chat exited {r.returncode} (see {log})")
    result = next((json.loads(t) for t in reversed(env.tool_results_seen()) if '"restored_checkpoint"' in t), None)
    check(result is not None and result.get("status") == "ok",
          f"chronos_rollback did not succeed (see {log}): {result}")
    check(result["restored_checkpoint"] == target["id"],
          f"chronos_rollback restored {result['restored_checkpoint'][:12]}, not {target['id'][:12]}")
    safety = result["safety_checkpoint"]
    events = demo.events()
    rb = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos_rollback"]
    check(len(rb) == 1, f"the rollback should be journaled once, found {len(rb)}")
    rb_out = outcome_of(events, rb[0]["operation_id"])
    check(rb[0]["args"]["checkpoint"] == target["id"] and rb[0]["pre_checkpoint"] == safety,
          "the journal's rollback entry names another target or safety checkpoint than the tool result")
    check(rb_out and rb_out.get("status") == "ok" and rb_out.get("post_checkpoint") == target["id"],
          f"after the rollback the workspace is not at {target['id'][:12]}: {rb_out}")
    check(files_of(ws) == {"README.md": b"# demo project\n", "app.py": APP.encode()},
          f"after the rollback the workspace holds {sorted(files_of(ws))}")
    cps = {c["id"]: c for c in demo.facts("log", "--all", "--limit", "1000")["checkpoints"]}
    check(safety in cps, f"the safety checkpoint {safety[:12]} is not in `log`")
    sc = cps[safety]
    said["safety"] = sc
    plan = result.get("plan") or []
    by_action: dict[str, list[str]] = {}
    for item in plan:
        by_action.setdefault(item["action"], []).append(item["path"])
    say("The agent called chronos_rollback. That tool always goes through Hermes' approval prompt; this demo "
        "runs `hermes chat --yolo`, which approves it without asking (in a normal session you are asked).")
    say(f'It went back to checkpoint {target["id"][:12]} ("{target["description"]}", {when(target["time"])}): '
        f"the workspace before the agent's first call. Just before, it saved the workspace as the safety "
        f"checkpoint {safety[:12]}"
        + (f' (nothing had changed since checkpoint "{sc["description"]}" of {when(sc["time"])}, so that '
           f"checkpoint is reused as the safety checkpoint)." if sc.get("kind") != "safety" else ".")
        + " That is what makes the rollback undoable.")
    fact(f"tool result: restored {result['restored_checkpoint'][:12]}, safety checkpoint {safety[:12]}; "
         + "; ".join(f"{a} {', '.join(p)}" for a, p in by_action.items()))
    fact(f"journal: operation {rb[0]['operation_id'][:12]}, actor \"{rb[0].get('actor')}\" "
         "(here the approval came from --yolo), returned ok")
    evidence(f"hermes chronos-git diff {target['id'][:12]}      # that checkpoint against the workspace now",
             demo.text("diff", target["id"][:12]))
    evidence("ls", "  ".join(sorted(files_of(ws))))

    # ------------------------------------------------------------ 7
    step(7)
    undo = demo.text("restore", safety[:12])
    check(files_of(ws) == before_rollback, "after the undo the workspace differs from before the rollback")
    events = demo.events()
    und = [e for e in events if e["kind"] == "started" and e.get("tool") == "chronos.restore"]
    check(len(und) == 1 and und[0]["args"]["checkpoint"] == safety,
          "the undo is not journaled as a restore of the safety checkpoint")
    und_out = outcome_of(events, und[0]["operation_id"])
    check(und_out and und_out.get("status") == "ok", f"the undo's outcome is not ok: {und_out}")
    again = und[0]["pre_checkpoint"]
    check(again != safety, "the undo took no safety checkpoint of its own")
    say(f"The operator restored the safety checkpoint {safety[:12]}: feature.py, config.json, deploy.log and "
        f"output.txt are back and app.py is patched again, byte for byte as before the rollback.")
    say(f"This restore is undoable too: it took its own safety checkpoint {again[:12]} (the rolled-back state)"
        + (", which its `undo:` line names" if again[:12] in undo else "")
        + f". To undo the rollback, {safety[:12]} is the one that counts.")
    evidence(f"hermes chronos-git restore {safety[:12]}", undo)

    # ------------------------------------------------------------ 8
    step(8)
    verify = demo.facts("journal", "verify")
    check(verify.get("integrity") == "ok" and not verify.get("problems"),
          f"journal verify: integrity {verify.get('integrity')}, problems {verify.get('problems')}")
    check(not (verify.get("checkpoint_trees") or {}).get("problems"),
          f"journal verify: checkpoint trees {verify['checkpoint_trees']['problems']}")
    verify_text = demo.text("journal", "verify")
    fsck = demo.git("fsck", "--full", "--no-progress")
    fsck_out = (fsck.stdout + fsck.stderr).strip()
    problems = [l for l in fsck_out.splitlines() if l.strip() and "unborn branch" not in l]
    check(fsck.returncode == 0 and not problems, f"git fsck --full exited {fsck.returncode}: {fsck_out}")
    say(f"journal verify re-hashed and replayed all {verify['events']} journal events and checked every "
        "checkpoint tree; git fsck checked every object in the store. Nothing was edited, lost or broken.")
    evidence("hermes chronos-git journal verify", verify_text)
    evidence("hermes chronos-git git fsck --full", "\n".join(
        [f"{l}   (expected: the store has no branch, only refs/chronos/*)" if "unborn branch" in l else l
         for l in fsck_out.splitlines()] + ["(exit status 0, no errors)"]))
    return said


def _sweep_host_leftovers(home: Path) -> None:
    """Hermes writes a snapshot of the environment to /tmp/hermes-snap-*.sh for each terminal
    session and removes it when it exits; the two sessions the demo SIGKILLs cannot. Those
    files (the demo's environment, the user's exported variables with it) are removed here,
    so the demo leaves nothing outside its folder."""
    for tmp in {Path("/tmp"), Path(tempfile.gettempdir())}:
        for p in tmp.glob("hermes-snap-*.sh"):
            try:
                if str(home) in p.read_text(errors="replace"):
                    p.unlink()
            except OSError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="folder to use (default: a new temporary folder)")
    opts = ap.parse_args()
    if shutil.which(hermes_bin()) is None and not Path(hermes_bin()).exists():
        print("demo FAILED: `hermes` (hermes-agent) is not installed; run `bash scripts/demo.sh`", file=sys.stderr)
        return 2
    root = Path(opts.dir or tempfile.mkdtemp(prefix="chronos-git-demo-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    env = HermesEnv(root)
    t0 = time.time()
    try:
        from importlib.metadata import version
        hv = f"hermes-agent {version('hermes-agent')}"
    except Exception:
        hv = "hermes-agent"
    with env:
        demo = Demo(env, root)
        ws = env.ws
        (ws / "app.py").write_text(APP)
        (ws / "README.md").write_text("# demo project\n")
        print(f"{BOLD}chronos-git demo{OFF}: a real `hermes chat` ({hv}) with chronos-git as a user plugin; the "
              f"model is a script\non 127.0.0.1:{env.port}, so every run tells the same story.")
        print(f"  workspace    {ws}   (app.py, README.md)\n"
              f"  HERMES_HOME  {env.home}\n"
              f"  STORE        {env.store}   (the shadow git repository)\n"
              "`hermes chronos-git ...` below runs in the workspace with that HERMES_HOME.")
        try:
            said = run(demo)
        except DemoFailure as exc:
            print(f"\ndemo FAILED at step {CURRENT} ({STEPS[CURRENT - 1] if CURRENT else 'setup'}):\n  {exc}\n"
                  f"transcripts of each hermes chat: {demo.transcripts}", file=sys.stderr)
            return 1
        except subprocess.TimeoutExpired as exc:
            print(f"\ndemo FAILED at step {CURRENT}: timed out: {exc}", file=sys.stderr)
            return 1
        _sweep_host_leftovers(env.home)
        bin_dir = Path(hermes_bin()).parent
        path = "" if shutil.which("hermes") == hermes_bin() else f" PATH={bin_dir}:$PATH"
        target = said["first"]
        print(f"\n{BOLD}Where everything is{OFF} (all under {root}; nothing outside it):")
        print(f"  workspace    {ws}\n"
              f"  HERMES_HOME  {env.home}   (chronos-git is linked into plugins/)\n"
              f"  store        {env.store}   (checkpoints and the journal, one git repository)\n"
              f"  transcripts  {demo.transcripts}   (raw output of each hermes chat)")
        print(f"\n{BOLD}Look around{OFF} (each prints text):")
        print(f"  cd {ws} && export HERMES_HOME={env.home}{path}")
        follow = [("hermes chronos-git log", "every checkpoint, newest first"),
                  ("hermes chronos-git journal status", "recovery gate, integrity, anything unresolved"),
                  ("hermes chronos-git journal log", "every journal event, newest first"),
                  (f"hermes chronos-git show {target['id'][:12]}", "the checkpoint the rollback went back to"),
                  ("hermes chronos-git git log --oneline refs/chronos/journal", "the audit trail in stock git")]
        pad = max(len(c) for c, _ in follow[:-1])
        for cmd, why in follow:
            print(f"  $ {cmd.ljust(pad)}   # {why}")
        print(f"When done: rm -rf {root}")
        print(f"\ndemo finished in {time.time() - t0:.0f} s: every step behaved as described")
    return 0


if __name__ == "__main__":
    sys.exit(main())
