"""Tampering with a journal that is at rest, and whether the next start notices.

Each kind edits the store the way someone with write access to the disk
could.  Detection is looked for where the product promises it: at the next
start (incremental verification from the last verified head, the witness,
the ref) and, for damage below the verified head, by the daily full
verification a long-lived host runs in the background (simulated here by
ageing its record by a day).  A local attacker who rewrites the ref and the
witness consistently is outside this suite: only a checkpoint kept off the
machine catches that (`journal verify --checkpoint`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pygit2

from ..journal_refs.journal import REF
from ..journal_refs.witness import read_doc, witness_path_for, write_doc
from .scenario import Findings, Scenario

KINDS = ("event_edited_loose", "event_edited_in_pack", "pack_deleted", "ref_rolled_back", "ref_forged_chain",
         "witness_deleted", "witness_edited", "witness_moved_back", "store_deleted")


def _chain(store: Path) -> list[str]:
    repo = pygit2.Repository(str(store))
    cid = repo.references.get(REF).target
    out = []
    while True:
        out.append(str(cid))
        c = repo[cid]
        if not c.parent_ids:
            return out[::-1]                 # oldest first
        cid = c.parent_ids[0]


def _edit_loose(store: Path, cid: str) -> bool:
    path = store / "objects" / cid[:2] / cid[2:]
    if not path.exists():
        return False
    raw = zlib.decompress(path.read_bytes())
    edited = raw.replace(b'"status": "ok"', b'"status": "no"', 1)
    if edited == raw:                              # any event: change one digit of its timestamp
        i = raw.rindex(b"timestamp_ns") if b"timestamp_ns" in raw else len(raw) - 2
        j = next(k for k in range(i, len(raw)) if raw[k:k + 1].isdigit())
        edited = raw[:j] + (b"1" if raw[j:j + 1] != b"1" else b"2") + raw[j + 1:]
    os.chmod(path, 0o644)
    path.write_bytes(zlib.compress(edited))
    return True


def _edit_in_pack(store: Path, cid: str) -> bool:
    for idx in (store / "objects" / "pack").glob("*.idx"):
        out = subprocess.run(["git", "verify-pack", "-v", str(idx)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if f and f[0] == cid and len(f) >= 5:
                offset, size = int(f[4]), int(f[3])
                pack = idx.with_suffix(".pack")
                os.chmod(pack, 0o644)
                with open(pack, "r+b") as fh:
                    fh.seek(offset + size // 2)
                    b = fh.read(1)
                    fh.seek(offset + size // 2)
                    fh.write(bytes([b[0] ^ 0x20]))
                return True
    return False


def _forge(store: Path, chain: list[str]) -> None:
    """A chain that forks two events back: the same events, then invented ones."""
    repo = pygit2.Repository(str(store))
    base = repo[chain[-3]]
    sig = pygit2.Signature("chronos-git", "chronos-git@localhost", base.commit_time + 1, 0)
    forged = repo.create_commit(None, sig, sig, base.message, base.tree_id, [base.id])
    forged = repo.create_commit(None, sig, sig, base.message, base.tree_id, [forged])
    repo.references.get(REF).set_target(forged)


def tamper(s: Scenario, kind: str, older_witness: bytes) -> str:
    store = s.store
    chain = _chain(store)
    witness = witness_path_for(store)
    if kind == "event_edited_loose":
        victim = next((c for c in chain[1:-1] if (store / "objects" / c[:2] / c[2:]).exists()), None)
        if victim is None or not _edit_loose(store, victim):
            return ""
        return f"event {victim[:12]} edited (loose)"
    if kind == "event_edited_in_pack":
        subprocess.run(["git", f"--git-dir={store}", "repack", "-a", "-d", "-q"], check=True)
        victim = chain[len(chain) // 2]
        return f"event {victim[:12]} edited inside its pack" if _edit_in_pack(store, victim) else ""
    if kind == "pack_deleted":
        subprocess.run(["git", f"--git-dir={store}", "repack", "-a", "-d", "-q"], check=True)
        packs = list((store / "objects" / "pack").glob("*.pack"))
        for p in packs:
            p.unlink()
            p.with_suffix(".idx").unlink(missing_ok=True)
        return f"{len(packs)} pack(s) deleted" if packs else ""
    if kind == "ref_rolled_back":
        pygit2.Repository(str(store)).references.get(REF).set_target(pygit2.Oid(hex=chain[-3]))
        return f"{REF} moved back two events"
    if kind == "ref_forged_chain":
        _forge(store, chain)
        return f"{REF} moved to a forged chain"
    if kind == "witness_deleted":
        witness.unlink()
        return "witness deleted"
    if kind == "witness_edited":
        w = json.loads(read_doc(witness))
        w["seq"] = int(w.get("seq", 0)) + 5
        write_doc(witness, json.dumps(w).encode())      # sealed again, as a careful editor would
        return "witness sequence number edited"
    if kind == "witness_moved_back":
        witness.write_bytes(older_witness)
        return "witness replaced by an older copy"
    if kind == "store_deleted":
        shutil.rmtree(store)
        return "store deleted"
    raise ValueError(kind)


def run(s: Scenario, kind: str, rng) -> Findings:
    out = Findings()
    s.child(ops=4, first=["write", "write"])
    older = witness_path_for(s.store).read_bytes()
    if kind == "event_edited_loose":           # packed history, then loose events after it
        s.child(ops=0, first=["write", "shell", "compact", "write", "write", "write"])
    else:
        s.child(ops=4, first=["write", "write"])
    s.next_start()                               # a clean start: everything so far verified
    done = tamper(s, kind, older)
    if not done:
        out.reached = False
        out.breach("unreached", f"{kind}: nothing to tamper with")
        return out
    svc = s.next_start()
    where = "at the next start"
    if svc.core.journal.integrity == "ok":
        # damage below the verified head: the daily full verification of a long-lived host
        marker = s.store / "chronos" / "journal-verified.json"
        if marker.exists():
            m = json.loads(marker.read_text())
            m["full_at"] = 0
            marker.write_text(json.dumps(m))
        svc = s.next_start(background=True)
        svc.wait_for_full_verify(60)
        where = "by the daily full verification"
    found = svc.core.journal.integrity
    out.reached = found != "ok"
    out.note = f"{done}: " + (f"detected {where}: {found}" if out.reached else "NOT detected")
    if not out.reached:
        out.breach("integrity", f"{done} went undetected")
    elif svc.gate.is_open():
        out.breach("integrity", f"{done} was detected but the gate stayed open")
    return out
