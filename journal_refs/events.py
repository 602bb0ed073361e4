"""Event payloads: canonical JSON, hashes and the commit message format."""
from __future__ import annotations

import hashlib
import json

from ..engine.codec import canonical, display

SCHEMA = "chronos-git.journal.v1"
STATE_SCHEMA = "chronos-git.journal-state.v1"
CHECKPOINT_SCHEMA = "chronos-git.journal-checkpoint.v1"

KINDS = ("genesis", "started", "returned", "uncertain", "recovered", "resolved", "replayed",
         "maintenance")
OUTCOMES = ("completed", "not_applied", "rolled_back")


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()


def args_hash(args) -> str:
    return sha256_hex(canonical(args))


def fingerprint(tool: str, args) -> str:
    return sha256_hex(canonical({"tool": tool, "args": args}))


def message(payload: dict) -> str:
    """`git log` shows the first line; the canonical JSON follows a blank line."""
    kind = payload["kind"]
    bits = [f"journal #{payload['seq']} {kind}"]
    if payload.get("tool"):
        bits.append(display(str(payload["tool"])))
    if payload.get("operation_id"):
        bits.append(f"op={payload['operation_id'][:12]}")
    if payload.get("outcome"):
        bits.append(f"outcome={payload['outcome']}")
    if payload.get("status"):
        bits.append(f"status={payload['status']}")
    if payload.get("tool_call_id"):
        bits.append(display(f"call={payload['tool_call_id']}"))
    return " ".join(bits).replace("\n", " ") + "\n\n" + canonical(payload) + "\n"


def parse_message(text: str) -> tuple[dict, str]:
    """(payload, raw json text) of an event commit message."""
    try:
        _, raw = text.split("\n\n", 1)
    except ValueError:
        raise ValueError("event commit has no payload") from None
    raw = raw.rstrip("\n")
    return json.loads(raw), raw
