"""The model's tools.  Each returns a JSON envelope {"status": "ok"|"error", ...}.

chronos_rollback is only reachable through Hermes' approval prompt (the
plugin's pre_tool_call hook returns an `approve` directive for it) and
always takes a safety checkpoint; no tool lets the model resolve operations.
"""
from __future__ import annotations

from ..engine.codec import dumps
from ..service.errors import envelope
from ..service.results import ToolStatus

TOOLSET = "chronos"

SCHEMAS = {
    "chronos_snapshot": {
        "description": "Take a chronos-git checkpoint of the workspace now (a restore point you can diff "
                       "against or roll back to).",
        "parameters": {"type": "object", "properties": {
            "description": {"type": "string", "description": "What this checkpoint marks."}},
            "required": ["description"]},
    },
    "chronos_list_checkpoints": {
        "description": "List the workspace's chronos-git checkpoints, newest first (index 1 = newest), "
                       "with the tool call that each one preceded.",
        "parameters": {"type": "object", "properties": {
            "limit": {"type": "integer", "description": "How many (default 20)."}}},
    },
    "chronos_diff": {
        "description": "Show what changed: from a checkpoint (default: the newest) to another checkpoint "
                       "or to the current files. Checkpoints are ids, 7+ hex prefixes, indexes (1 = newest) "
                       "or 'latest'.",
        "parameters": {"type": "object", "properties": {
            "from_checkpoint": {"type": "string"},
            "to_checkpoint": {"type": "string", "description": "Omit for the current working tree."},
            "paths": {"type": "array", "items": {"type": "string"}},
            "max_chars": {"type": "integer", "description": "Patch size limit (default 20000)."}}},
    },
    "chronos_rollback": {
        "description": "Restore the workspace (or some paths) to a checkpoint. The user must approve it; "
                       "a safety checkpoint of the current state is always taken first, so it can be undone.",
        "parameters": {"type": "object", "properties": {
            "checkpoint_id": {"type": "string"},
            "paths": {"type": "array", "items": {"type": "string"},
                      "description": "Only these files or directories."},
            "clean": {"type": "boolean",
                      "description": "Remove files absent from the checkpoint (default from settings)."}},
            "required": ["checkpoint_id"]},
    },
    "chronos_status": {
        "description": "chronos-git state: journal integrity, unresolved tool calls blocking protected "
                       "tools, store size, last snapshot.",
        "parameters": {"type": "object", "properties": {}},
    },
    "chronos_verify": {
        "description": "Verify the whole tool-call journal (hash chain, state, local checkpoint).",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _envelope(fn):
    def handler(args, **kwargs):
        try:
            result = fn(args or {}, **kwargs)
        except Exception as exc:            # the model gets the envelope, never a traceback
            result = envelope(exc)[0]
        return dumps(result.wire())
    handler.__name__ = fn.__name__
    return handler


def handlers(plugin) -> dict:
    def chronos_snapshot(args, **kw):
        return plugin.svc().snapshot(plugin.cwd(), args.get("description") or "checkpoint requested by the model",
                                     tool="chronos_snapshot", session_id=kw.get("session_id"))

    def chronos_list_checkpoints(args, **kw):
        limit = int(args.get("limit") or 20)
        return plugin.svc().log(plugin.cwd(), max(1, min(limit, 200)))

    def chronos_diff(args, **kw):
        return plugin.svc().diff(plugin.cwd(), args.get("from_checkpoint") or args.get("checkpoint_id"),
                                 args.get("to_checkpoint"), paths=args.get("paths"),
                                 max_chars=int(args.get("max_chars") or 20_000))

    def chronos_rollback(args, **kw):
        if not args.get("checkpoint_id"):
            raise ValueError("checkpoint_id is required")
        res = plugin.svc().restore(plugin.cwd(), str(args["checkpoint_id"]), paths=args.get("paths"),
                                   clean=args.get("clean"), actor="model (through Hermes' approval)",
                                   session_id=kw.get("session_id"), tool="chronos_rollback")
        res.undo = (f"chronos_rollback with checkpoint_id={res.safety_checkpoint} restores the state before "
                    "this rollback")
        return res

    def chronos_status(args, **kw):
        svc = plugin.svc()
        st = svc.journal_status()
        h = svc.health(plugin.cwd())
        return ToolStatus(protection=h.protection, integrity=st.integrity, gate=st.gate, unresolved=st.unresolved,
                          running=st.running, events=st.events, workspace=h.workspace, store=h.store,
                          store_bytes=h.store_bytes, last_snapshot=h.last_snapshot)

    def chronos_verify(args, **kw):
        return plugin.svc().journal_verify()

    fns = [chronos_snapshot, chronos_list_checkpoints, chronos_diff, chronos_rollback, chronos_status,
           chronos_verify]
    return {f.__name__: _envelope(f) for f in fns}
