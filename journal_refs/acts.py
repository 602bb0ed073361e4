"""Operator acts in the journal: which events are one, and what an operator's signature covers.

Once an operator key is registered (a Maintenance `operator_key` event), every operator act
after it carries a `signature`: {"key": fingerprint, "nonce": hex, "sig": armored SSH
signature}.  The signature covers the journal's id, the act's claim (`claim`: what the operator
decided) and the nonce, so it cannot be moved to another journal, another operation or a second
copy of the same act.
Checking it needs ssh-keygen: service/operator_key.py does that; this module only knows the
format.
"""
from __future__ import annotations

import re

from ..engine.codec import canonical

OPERATOR_KEY = "operator_key"        # the Maintenance action that registers (or replaces) the key
SIGNED_ACTIONS = frozenset({OPERATOR_KEY, "remote_added", "remote_removed", "countersigned", "capture_accepted"})
SIGNED_KINDS = frozenset({"resolved", "replayed"})     # only ever an operator's
PREFIX = b"chronos-git operator act v1\n"
_PUBKEY = re.compile(r"^(ssh-[a-z0-9-]+|ecdsa-sha2-nistp(256|384|521)|sk-[a-z0-9@.-]+) [A-Za-z0-9+/]+={0,3}$")


def is_act(payload: dict) -> bool:
    """An event only an operator writes: a resolve, a replay, a key or remote change, an
    accepted setting (a settings record with the operator's record in it)."""
    kind = payload.get("kind")
    if kind in SIGNED_KINDS:
        return True
    if kind != "maintenance":
        return False
    action = payload.get("action")
    return action in SIGNED_ACTIONS or (action == "settings" and "operator" in payload)


def claim(payload: dict) -> dict:
    """What the operator's signature covers of an act: what the operator decided (which
    operation, which outcome, which remote, which settings), not what chronos-git computes while
    carrying it out (a rollback's restored paths), so the act is signed before it starts."""
    kind, action = payload.get("kind"), payload.get("action")
    out = {"kind": kind, "action": action, "operation_id": payload.get("operation_id")}
    if kind == "resolved":
        out["outcome"] = payload.get("outcome")
    elif action == "remote_added":
        out.update(remote=payload.get("remote"), url=payload.get("url"))
    elif action == "remote_removed":
        out["remote"] = payload.get("remote")
    elif action == OPERATOR_KEY:
        out.update(public_key=payload.get("public_key"), fingerprint=payload.get("fingerprint"))
    elif action == "countersigned":
        out["event"] = payload.get("event")
    elif action == "capture_accepted":
        out.update(workspace=payload.get("workspace"), seq_accepted=payload.get("seq_accepted"))
    elif action == "settings":
        out["accepted"] = accepted_keys(payload)
    return out


def accepted_keys(payload: dict) -> dict:
    """{key: value} of the changes a settings record says the operator accepted."""
    changes = payload.get("changes")
    if not isinstance(changes, list):
        return {}
    return {str(c.get("key")): c.get("to") for c in changes if isinstance(c, dict) and c.get("status") == "accepted"}


def message(journal_id: str | None, payload: dict, nonce: str) -> bytes:
    return PREFIX + canonical({"journal_id": journal_id, "claim": claim(payload), "nonce": nonce}).encode()


def valid_pubkey(text) -> bool:
    """A one-line `TYPE BASE64` public key and nothing else (it is written into an allowed
    signers file: no options, no second line)."""
    return isinstance(text, str) and len(text) < 16384 and bool(_PUBKEY.match(text))
