"""The chronos-git demo: a real Hermes session with a scripted model.

Edits, a crash in the middle of a tool call, evidence-based recovery, the
recovery gate, a rollback and its undo; then where to look.  Everything lives
in one temporary folder (HERMES_HOME, workspace, store), printed at the end.

    bash scripts/demo.sh            (sets up .venv first)
    python scripts/demo.py [--dir DIR]
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
from hermes_env import HermesEnv, hermes_bin  # noqa: E402

BOLD, DIM, OFF = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def say(title: str) -> None:
    print(f"\n{BOLD}== {title}{OFF}", flush=True)


def show(text: str, limit: int = 40) -> None:
    lines = text.rstrip("\n").splitlines()
    for line in lines[:limit]:
        print(f"   {line}")
    if len(lines) > limit:
        print(f"   {DIM}... ({len(lines) - limit} more lines){OFF}")


def chronos(env: HermesEnv, *args) -> str:
    r = env.chronos(*args)
    return (r.stdout + r.stderr).strip()


def chronos_json(env: HermesEnv, *args) -> dict:
    return json.loads(env.chronos(*args, "--json").stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="folder to use (default: a new temporary folder)")
    opts = ap.parse_args()
    root = Path(opts.dir or tempfile.mkdtemp(prefix="chronos-git-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    env = HermesEnv(root)
    t0 = time.time()
    with env:
        ws = env.ws
        (ws / "app.py").write_text("def greet(name):\n    return 'hello ' + name\n")
        (ws / "README.md").write_text("# demo project\n")
        print(f"workspace {ws}\nHERMES_HOME {env.home} (chronos-git installed as a user plugin)\n"
              f"scripted model on 127.0.0.1:{env.port}")

        say("1. A normal session: write_file, patch and terminal, each checkpointed and journaled")
        env.set_script([{"match": "*", "steps": [
            {"tool_calls": [{"name": "write_file", "id": "call_feature", "arguments": {
                "path": "__WS__/feature.py", "content": "from app import greet\nprint(greet('chronos'))\n"}}]},
            {"tool_calls": [{"name": "patch", "id": "call_patch", "arguments": {
                "mode": "replace", "path": "__WS__/app.py", "old_string": "'hello '", "new_string": "'Hello, '"}}]},
            {"tool_calls": [{"name": "terminal", "id": "call_run", "arguments": {
                "command": f"cd {ws} && python3 feature.py > output.txt"}}]},
            {"content": "Added feature.py, capitalised the greeting and ran it."}]}])
        r = env.chat("add a feature")
        show(r.stdout)
        show(chronos(env, "log", "--workspace", ws), 12)

        say("2. A crash: Hermes is SIGKILLed after write_file landed, before its outcome was recorded")
        env.set_script([{"match": "*", "steps": [
            {"tool_calls": [{"name": "write_file", "id": "call_config", "arguments": {
                "path": "__WS__/config.json", "content": "{\"greeting\": \"Hello\"}\n"}}]},
            {"content": "never reached"}]}])
        r = env.chat("write the config", env={"CHRONOS_GIT_FAULT": "after_dispatch"})
        died = r.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
        print(f"   hermes exit status {r.returncode} ({'killed by SIGKILL' if died else 'unexpected'}); "
              f"config.json on disk: {(ws / 'config.json').read_text().strip()!r}")

        say("3. The next session settles it by evidence: the file is at its post-image -> completed, not rewritten")
        env.set_script([{"match": "*", "steps": [{"content": "Understood: config.json is already written."}]}])
        r = env.chat("continue where we left off")
        alert = next((m for m in env.user_messages_seen() if "[chronos-git recovery alert]" in m), "")
        print("   what the model was told on its first turn:")
        show(alert[alert.find("[chronos-git recovery alert]"):], 8)
        ev = [e for e in chronos_json(env, "journal", "log", "--limit", "5")["events"] if e["kind"] == "recovered"]
        if ev:
            print(f"   journal: recovered outcome={ev[0]['outcome']} ({ev[0]['note']})")

        say("4. A crashed shell command cannot be settled by evidence: the recovery gate closes")
        env.set_script([
            {"match": "DEPLOY", "steps": [{"tool_calls": [{"name": "terminal", "id": "call_deploy", "arguments": {
                "command": f"echo deployed > {ws}/deploy.log"}}]}, {"content": "never reached"}]},
            {"match": "*", "steps": [
                {"tool_calls": [{"name": "write_file", "id": "call_more", "arguments": {
                    "path": "__WS__/more.txt", "content": "more\n"}}]},
                {"content": "The write was blocked; waiting for the operator."}]}])
        env.chat("DEPLOY it", env={"CHRONOS_GIT_FAULT": "after_dispatch"})
        env.chat("next task")
        blocked = [t for t in env.tool_results_seen() if "chronos_blocked" in t]
        print(f"   the model's write_file was refused: {'yes' if blocked else 'NO'}; "
              f"more.txt exists: {(ws / 'more.txt').exists()}")
        status = chronos_json(env, "journal", "status")
        op = status["unresolved"][0]["operation_id"] if status["unresolved"] else None
        show(chronos(env, "journal", "status"), 12)
        if op:
            print(f"   operator: hermes chronos-git journal resolve {op[:12]} --outcome completed --evidence ...")
            show(chronos(env, "journal", "resolve", op, "--outcome", "completed",
                         "--evidence", "deploy.log shows the command ran"), 6)

        say("5. Rollback: the model asks (Hermes approval; --yolo approves here), a safety checkpoint makes it undoable")
        target = chronos_json(env, "log", "--workspace", ws, "--limit", "50")["checkpoints"][-1]["id"]
        env.set_script([{"match": "*", "steps": [
            {"tool_calls": [{"name": "chronos_rollback", "id": "call_rollback",
                             "arguments": {"checkpoint_id": target}}]},
            {"content": "Rolled back to the first checkpoint."}]}])
        env.chat("roll everything back", yolo=True)
        print(f"   after rollback: files = {sorted(p.name for p in ws.iterdir())}")
        rb = [e for e in chronos_json(env, "journal", "log", "--limit", "10")["events"]
              if e["kind"] == "started" and e.get("tool") == "chronos_rollback"]
        if rb:
            safety = rb[0]["pre_checkpoint"]
            print(f"   undo with the safety checkpoint {safety[:8]}:")
            show(chronos(env, "restore", safety, "--workspace", ws), 4)
            print(f"   after undo: files = {sorted(p.name for p in ws.iterdir())}")

        say("6. Verify the journal and the store")
        show(chronos(env, "journal", "verify"), 6)
        print(f"\n{BOLD}Where to look{OFF} (everything is under {root}):")
        hermes = hermes_bin()
        print(textwrap.dedent(f"""\
            # the audit trail, and every checkpoint and event, in plain git:
            git --git-dir {env.store} log --oneline refs/chronos/journal | head
            git --git-dir {env.store} log --all --format='%h %s' | head
            # the journal through the plugin's CLI, and /chronos in a REPL (the scripted model is gone,
            # so only slash commands work there):
            HERMES_HOME={env.home} {hermes} chronos-git journal log
            cd {ws} && HERMES_HOME={env.home} {hermes} chat
            # when done:
            rm -rf {root}"""))
        print(f"\ndemo finished in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
