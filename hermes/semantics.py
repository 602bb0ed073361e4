"""What Hermes tools mean to the journal: declared paths, expected
post-images and how to read a result.  Pure functions, no Hermes imports.
"""
from __future__ import annotations

import json
import os
import re

from ..service.calls import UNKNOWN, Declared, Outcome, sha256_hex

_V4A_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.M)
_V4A_MOVE = re.compile(r"^\*\*\* Move to: (.+?)\s*$", re.M)


def resolve_path(path: str, cwd: str) -> str:
    p = os.path.expanduser(str(path))
    if not os.path.isabs(p):
        p = os.path.join(cwd, p)
    return os.path.normpath(p)


def declared_paths(tool: str, args: dict, cwd: str) -> list[Declared] | None:
    """Paths a file tool will change and what they should hold afterwards.

    None means "not a file tool" (the caller takes a full snapshot).  A post
    image is only claimed when it can be computed exactly before the call;
    otherwise it is UNKNOWN and recovery can only tell "not applied" apart.
    """
    args = args or {}
    if tool == "write_file":
        if not args.get("path"):
            return None
        content = args.get("content")
        post = content.encode("utf-8") if isinstance(content, str) else UNKNOWN
        return [Declared(resolve_path(args["path"], cwd), post)]
    if tool == "patch":
        mode = args.get("mode") or ("patch" if args.get("patch") else "replace")
        if mode == "replace" and args.get("path"):
            path = resolve_path(args["path"], cwd)
            return [Declared(path, _replace_post_image(path, args))]
        if mode == "patch" and isinstance(args.get("patch"), str):
            out = []
            for kind, name in _V4A_FILE.findall(args["patch"]):
                out.append(Declared(resolve_path(name, cwd), None if kind == "Delete" else UNKNOWN))
            for name in _V4A_MOVE.findall(args["patch"]):
                out.append(Declared(resolve_path(name, cwd), UNKNOWN))
            return out or None
    return None


def target_paths(tool: str, args: dict, cwd: str) -> list[str]:
    """The paths a file tool names, as `declared_paths` resolves them, without reading anything
    (the pre_tool_call hook's protected-path check)."""
    args = args or {}
    if tool not in ("write_file", "patch"):
        return []
    if isinstance(args.get("patch"), str) and (args.get("mode") or "patch") == "patch":
        names = [n for _, n in _V4A_FILE.findall(args["patch"])] + _V4A_MOVE.findall(args["patch"])
        return [resolve_path(n, cwd) for n in names]
    return [resolve_path(args["path"], cwd)] if isinstance(args.get("path"), str) and args["path"] else []


def _replace_post_image(path: str, args: dict):
    """Exact result of an old_string -> new_string replacement, when unambiguous."""
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str) or not old:
        return UNKNOWN
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return UNKNOWN
    count = text.count(old)
    if count == 0:
        return UNKNOWN            # Hermes may fuzzy-match; we cannot predict that
    if count > 1 and not args.get("replace_all"):
        return UNKNOWN            # Hermes refuses ambiguous replacements
    return text.replace(old, new).encode("utf-8")


_UNCERTAIN_MARKERS = (
    ("[tool_error] tool execution failed", "exception"),
    ("timed out", "timeout"),
    ("timeout", "timeout"),
    ("interrupted", "cancelled"),
    ("cancelled", "cancelled"),
    ("canceled", "cancelled"),
)


def classify(result) -> Outcome:
    """Hermes tools never raise: read the result JSON.

    An error the tool *returned* is a known outcome (status error); handler
    exceptions, timeouts and interruptions leave the effect unknown.
    """
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    rh = sha256_hex(text)
    data = None
    if isinstance(result, dict):
        data = result
    elif isinstance(result, str):
        try:
            data = json.loads(result)
        except ValueError:
            data = None
    if not isinstance(data, dict):
        return Outcome(status="ok", result_hash=rh)
    err = data.get("error")
    exit_code = data.get("exit_code") if isinstance(data.get("exit_code"), int) else None
    failed = (bool(err) or data.get("success") is False or data.get("ok") is False
              or data.get("isError") is True
              or str(data.get("status", "")).lower() in ("error", "failed", "cancelled", "unknown")
              or (exit_code is not None and exit_code != 0))
    if not failed:
        return Outcome(status="ok", result_hash=rh, exit_code=exit_code)
    reason = None
    if isinstance(err, str):
        low = err.lower()
        for marker, label in _UNCERTAIN_MARKERS:
            if marker in low:
                reason = label
                break
    return Outcome(status="error", result_hash=rh, exit_code=exit_code, uncertain_reason=reason)


def failed(result) -> bool:
    return classify(result).status == "error"
