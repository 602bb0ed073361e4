"""The model's tools, built from the command table (commands/entries.py: the commands with a
`model` tool).  Each returns a JSON envelope {"status": "ok"|"error", ...}.

chronos_rollback is only reachable through Hermes' approval prompt (the plugin's
pre_tool_call hook returns an `approve` directive for it) and always takes a safety
checkpoint; no operator act is ever a model tool (the table refuses one), so no tool lets the
model resolve operations.
"""
from __future__ import annotations

from ..commands import COMMANDS, Context
from ..engine.codec import dumps
from ..service.errors import envelope

TOOLSET = "chronos"
MODEL_ACTOR = "model (through Hermes' approval)"

_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "maybe": "boolean"}


def _schema(cmd) -> dict:
    props: dict = {}
    required = []
    for a in cmd.args:
        if a.model is None:
            continue
        prop: dict = ({"type": "array", "items": {"type": "string"}} if a.kind in ("names", "words")
                      else {"type": _TYPES[a.kind]})
        if a.choices:
            prop["enum"] = list(a.choices)
        if a.model_help:
            prop["description"] = a.model_help
        props[a.model] = prop
        if a.required if a.model_required is None else a.model_required:
            required.append(a.model)
    params: dict = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    return {"description": cmd.model.description, "parameters": params}


def schemas(table=COMMANDS) -> dict:
    return {c.model.name: _schema(c) for c in table if c.model is not None}


SCHEMAS = schemas()


def _params(cmd, args: dict) -> dict:
    """The model's arguments by the table's names: defaults filled in, numbers clamped (a model
    asking for too much gets the most there is, not an error)."""
    out = {}
    for a in cmd.args:
        if a.model is None:
            continue
        value = next((args[k] for k in (a.model, *a.model_also) if args.get(k) not in (None, "")), None)
        if value is None:
            value = a.model_default if a.model_default is not None else a.default
            if (a.required if a.model_required is None else a.model_required) and value is None:
                raise ValueError(f"{a.model} is required")
        elif a.kind == "int":
            value = int(value)
            if a.ge is not None:
                value = max(a.ge, value)
            if (a.model_le or a.le) is not None:
                value = min(a.model_le or a.le, value)
        out[a.name] = value
    return out


def preview(plugin, tool: str, args: dict):
    """The dry run of a tool that changes files (what its approval prompt shows)."""
    cmd = next(c for c in COMMANDS if c.model is not None and c.model.name == tool)
    ctx = Context("model", actor=MODEL_ACTOR, user=MODEL_ACTOR, workspace=plugin.cwd())
    return cmd.run(plugin.svc(), ctx, {**_params(cmd, args or {}), "dry_run": True})


def handlers(plugin, table=COMMANDS) -> dict:
    """name -> handler(args, **kwargs) for Hermes' tool registry."""
    def handler_for(cmd):
        def handler(args, **kw):
            try:
                user = MODEL_ACTOR
                if cmd.confirm:                # it ran behind the approval prompt: how it was answered
                    user = f"model (through Hermes' approval: {plugin.approval_outcome()})"
                ctx = Context("model", actor=MODEL_ACTOR, user=user, workspace=plugin.cwd(),
                              session_id=kw.get("session_id"))
                result = cmd.run(plugin.svc(), ctx, _params(cmd, args or {}))
            except Exception as exc:            # the model gets the envelope, never a traceback
                result = envelope(exc)[0]
            return dumps(result.wire())
        handler.__name__ = cmd.model.name
        return handler
    return {c.model.name: handler_for(c) for c in table if c.model is not None}
