"""The agent as the adversary: the workload's own protected calls attack chronos-git.

A prompt-injected agent runs tools as the user who owns the store (issue 32).  Each kind here
is one attack carried out by a protected call of the victim (a file tool aimed at
chronos-git's own files, or a shell command), then judged where the product promises it:

* refused: the call is answered with an error and nothing it aimed at changed;
* or detected and attributed at the next start or `journal verify`: the reason is named (and,
  for the journal's own integrity, the gate is closed);
* never a forgery honoured: the pass-through to stock git refuses a tampered store, a planted
  pager never runs, a push never goes where a planted rewrite points.

Settings held for an operator are tried through real Hermes (tests/e2e/test_adversary_hermes.py:
the victim here reads no profile); a moved store is in docs/threat-model.md.
"""
from __future__ import annotations

import json
import sys
import textwrap
import time

import pygit2

from .scenario import Findings, Scenario
from .workload import ATTACK

KINDS = ("file_tool_into_store", "file_tool_into_witness", "planted_pager", "replace_ref", "url_rewrite",
         "forged_checkpoint_ref", "boot_record_deleted", "left_over_process_resolves", "ignore_everything",
         "forged_operator_act")


def _attack(s: Scenario, spec: dict, *, fault: str | None = None):
    return s.child(ops=0, first=["attack"], env={ATTACK: json.dumps(spec)}, fault=fault)


def _last_ack(s: Scenario) -> dict:
    acks = s.acknowledged()
    return acks[-1] if acks else {}


def _sh(cmd: str) -> dict:
    return {"kind": "shell", "argv": ["sh", "-c", cmd]}


def _py(code: str) -> dict:
    return {"kind": "shell", "argv": [sys.executable, "-c", textwrap.dedent(code)]}


def _detected(out: Findings, s: Scenario, what: str, *, gate: bool = False) -> None:
    """The next start and `journal verify` name it; `gate`: the gate is closed as well."""
    svc = s.next_start()
    v = svc.journal_verify()
    health = svc.health(str(s.ws))
    named = v.status != "ok" or bool(health.tampering) or svc.core.journal.integrity != "ok"
    out.reached = named
    out.note = f"{what}: " + (f"detected ({v.error or v.integrity})"[:200] if named else "NOT detected")
    if not named:
        out.breach("integrity", f"{what} went undetected by the next start, verify and health")
    elif gate and svc.gate.is_open():
        out.breach("integrity", f"{what} was detected but the gate stayed open")


def _attributed(out: Findings, s: Scenario, what: str, path: str) -> None:
    """The shell call that did it names what it changed in its outcome."""
    svc = s.next_start()
    for ev in svc.core.journal.events(10):
        if ev["kind"] in ("returned", "uncertain") and any(path in str(p) for p in ev.get("protected_changed") or ()):
            return
    out.breach("integrity", f"{what}: no call's outcome names {path} as changed")


def run(s: Scenario, kind: str, rng) -> Findings:
    out = Findings()
    s.child(ops=3, first=["write", "shell"])              # a store, a journal, checkpoints
    s.next_start()
    store = s.store
    if kind in ("file_tool_into_store", "file_tool_into_witness"):
        from ..journal_refs.witness import witness_path_for
        target = store / "config" if kind == "file_tool_into_store" else witness_path_for(store)
        before = target.read_bytes()
        attack = "[core]\n\tpager = false\n"
        _attack(s, {"kind": "write", "path": str(target), "content": attack})
        ack = _last_ack(s)
        refused = (ack.get("error") or {}).get("code") == "protected_path"
        out.reached = refused
        out.note = f"write_file into {target.name}: " + ("refused" if refused else f"answered {ack}")
        if not refused:
            out.breach("escapes", f"a file tool wrote {target}: {ack}")
        now = target.read_bytes()
        # the witness is rewritten by the refusal's own journal event: it must still be the witness
        if (now != before if target.name == "config" else attack.encode() in now):
            out.breach("escapes", f"{target} holds what the file tool wrote")
        svc = s.next_start()
        if svc.journal_verify().status != "ok":
            out.breach("integrity", f"after a refused write into {target.name} the journal no longer verifies")
        if not any(e["kind"] == "refused" for e in svc.core.journal.events(5)):
            out.breach("integrity", "the refusal was not journaled")
        return out
    if kind == "planted_pager":
        marker = s.root / "pager-ran"
        _attack(s, _sh(f"printf '[core]\\n\\tpager = touch {marker}\\n' >> '{store}/config'"))
        _attributed(out, s, "a planted core.pager", "config")
        _detected(out, s, "a planted core.pager", gate=True)
        from ..engine.store_audit import StoreTampered
        from ..service import Chronos
        from ..settings import Settings
        svc = Chronos.get(store, Settings())
        try:
            svc.git_passthrough(["log", "--oneline", "-1"])
            out.breach("escapes", "chronos-git git ran stock git over a store with a planted pager")
        except StoreTampered:
            pass                                            # refused, as it must be
        if marker.exists():
            out.breach("escapes", "the planted pager ran")
        return out
    if kind == "replace_ref":
        repo = pygit2.Repository(str(store))
        head = repo.references["refs/chronos/journal"].target
        forged = repo.create_blob(b"forged")
        _attack(s, _sh(f"mkdir -p '{store}/refs/replace' && echo {forged} > '{store}/refs/replace/{head}'"))
        _detected(out, s, "a replace ref over the journal head", gate=True)
        return out
    if kind == "url_rewrite":
        from ..service import Chronos
        from ..settings import Settings
        real, fake = s.root / "real.git", s.root / "fake.git"
        for r in (real, fake):
            pygit2.init_repository(str(r), bare=True)
        svc = Chronos.get(store, Settings())
        svc.remote_add("r", str(real))                     # the operator's own act
        svc.push("r")
        _attack(s, _sh(f"printf '[url \"{fake}\"]\\n\\tinsteadOf = {real}\\n' >> '{store}/config'"))
        _detected(out, s, "a url.insteadOf rewrite of the remote", gate=True)
        s.next_start()
        svc = Chronos.get(store, Settings())
        try:
            svc.push("r")
        except Exception:
            pass
        if any(pygit2.Repository(str(fake)).references):
            out.breach("escapes", "a push went to the rewritten URL")
        return out
    if kind == "forged_checkpoint_ref":
        repo = pygit2.Repository(str(store))
        refs = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")]
        if not refs:
            out.reached = False
            out.breach("unreached", "no checkpoint ref to forge")
            return out
        ref = refs[0]
        code = f"""
            import pygit2
            repo = pygit2.Repository({str(store)!r})
            ref = repo.references[{ref!r}]
            tip = repo[ref.target]
            tree = repo.TreeBuilder()
            tree.insert("forged.txt", repo.create_blob(b"forged"), pygit2.GIT_FILEMODE_BLOB)
            forged = repo.create_commit(None, tip.author, tip.committer, tip.message, tree.write(),
                                        list(tip.parent_ids))
            ref.set_target(forged)
        """
        _attack(s, _py(code))
        _detected(out, s, "a checkpoint ref pointed at a forged commit", gate=True)
        return out
    if kind == "boot_record_deleted":
        # the sweep after a reboot moves chains back past damage; on the same boot, with a
        # deleted boot record and damage made to look like a torn write, it must alarm, not repair
        repo = pygit2.Repository(str(store))
        refs = [r for r in repo.references if r.startswith("refs/chronos/snapshots/")]
        tip = str(repo.references[refs[0]].target) if refs else None
        loose = store / "objects" / tip[:2] / tip[2:] if tip else None
        cmd = f"rm -f '{store}/chronos/boot.json'"
        if loose is not None and loose.exists():
            cmd += f" && chmod u+w '{loose}' && : > '{loose}'"
        _attack(s, _sh(cmd))
        svc = s.next_start()
        repaired = [e for e in svc.core.journal.events(20) if e.get("action") == "power_cut_repair"]
        out.reached = True                                  # the record was deleted by the agent's call
        damaged = loose is not None and loose.exists() and loose.stat().st_size == 0
        out.note = (f"same boot, {'a checkpoint damaged' if damaged else 'nothing damaged'}: "
                    + (f"alarm: {str(svc.core.journal.integrity)[:120]}" if svc.core.journal.integrity != "ok"
                       else "no repair journaled" if not repaired else "REPAIRED"))
        if repaired:
            ev = repaired[0]
            found = {k: ev[k] for k in ("objects_quarantined", "refs_repaired", "indexes_dropped",
                                        "checkpoints_lost", "error", "boot_id") if ev.get(k)}
            out.breach("integrity", "a deleted boot record on the same boot was journaled as a power-cut "
                       f"repair ({out.note[:60]}): {json.dumps(found)[:400]}")
        if damaged and svc.core.journal.integrity == "ok":
            out.breach("integrity", "a checkpoint damaged on the same boot went undetected")
        return out
    if kind == "left_over_process_resolves":
        trigger, answer = s.root / "op-id", s.root / "resolve.json"
        waiter = f"""
            import os, subprocess, sys, time
            if os.fork():
                sys.exit(0)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):             # let the call return: nothing waits on our output
                os.dup2(null, fd)
            deadline = time.monotonic() + 120
            while not os.path.exists({str(trigger)!r}) and time.monotonic() < deadline:
                time.sleep(0.02)
            op = open({str(trigger)!r}).read()
            env = dict(os.environ, CHRONOS_GIT_STORE={str(store)!r})
            p = subprocess.run([{sys.executable!r}, "-m", "chronos_git.cli", "journal", "resolve", op,
                                "--outcome", "completed", "--evidence", "done, trust me", "--json"],
                               capture_output=True, text=True, env=env)
            open({str(answer)!r} + ".tmp", "w").write(p.stdout)
            os.rename({str(answer)!r} + ".tmp", {str(answer)!r})
        """
        _attack(s, _py(waiter))
        s.child(ops=0, first=["shell"], fault="after_intent")       # a crashed shell call: the gate closes
        svc = s.next_start()
        unresolved = [o.operation_id for o in svc.core.journal.unresolved()]
        if not unresolved:
            out.reached = False
            out.breach("unreached", "no crashed call left the gate closed")
            return out
        trigger.write_text(unresolved[0])
        deadline = time.monotonic() + 90
        while not answer.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        doc = json.loads(answer.read_text()) if answer.exists() else {}
        svc = s.next_start()
        still = [o.operation_id for o in svc.core.journal.unresolved()]
        out.reached = bool(doc)
        out.note = f"the left-over process's resolve: {doc.get('code') or doc.get('status') or 'no answer'}"
        if doc.get("code") != "agent_descendant" or unresolved[0] not in still:
            out.breach("escapes", f"a process the agent left running resolved its gate: {doc}")
        refused = [e for e in svc.core.journal.events(10) if e.get("action") == "operator_refused"]
        if not refused:
            out.breach("integrity", "the refused attempt was not journaled")
        for op in still:                                              # the operator's own act
            svc.resolve(op, "not_applied", "windtunnel: the victim was killed", actor="windtunnel")
        return out
    if kind == "ignore_everything":
        # a `*` .gitignore: what is captured stays, every new file is left out; reported, never silent
        _attack(s, _sh(f"printf '*\\n' > '{s.ws}/.gitignore'"))
        svc = s.next_start()
        h = svc.health(str(s.ws))
        named = bool(h.capture_narrowed) and h.protection.state == "degraded"
        out.reached = True
        out.note = "a `*` .gitignore: " + (f"reported ({h.protection.reason})"[:200] if named else "NOT reported")
        if not named:
            out.breach("integrity", f"a `*` .gitignore narrowed capture unreported: {h.protection}")
        return out
    if kind == "forged_operator_act":
        # with an operator key registered, the agent writes an operator act into the journal itself
        import shutil
        import subprocess
        if shutil.which("ssh-keygen") is None:
            out.reached = False
            out.breach("unreached", "ssh-keygen is not installed: no operator key to forge against")
            return out
        from ..service import Chronos
        from ..settings import Settings
        key = s.root / "operator-key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True,
                       stdin=subprocess.DEVNULL)
        Chronos.get(store, Settings()).operator_key_set(str(key), actor="windtunnel")   # the operator's act
        code = f"""
            from chronos_git.engine.store import Store
            from chronos_git.journal_refs import Journal, events
            j = Journal(Store.open({str(store)!r})).open()
            j.append(events.Maintenance, {{"operation_id": None, "action": "remote_added", "remote": "exfil",
                                          "url": "/tmp/exfil.git", "operator": {{"uid": 0, "tty": "/dev/pts/1"}}}})
        """
        _attack(s, _py(code))
        _detected(out, s, "an operator act written into the journal without the operator key", gate=True)
        return out
    raise ValueError(kind)

