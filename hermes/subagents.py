"""Which Hermes session is a subagent, as the host says when it starts one.

Hermes fires `subagent_start` for each `delegate_task` child with the child's session id, the
parent's session and the subagent's own id; newer hosts may also name the tool call that
started it (`parent_tool_call_id`).  A call made in a child session is journaled with what
was said of it, so `revert --subagent ID` can take back one subagent's calls.  Nothing is
guessed: a field the host did not give is not written."""
from __future__ import annotations

import threading
from collections import OrderedDict

# the hook's keyword -> the journal's field (Started.subagent_id, ...)
_FIELDS = {"child_subagent_id": "subagent_id", "subagent_id": "subagent_id",
           "parent_session_id": "parent_session_id", "parent_tool_call_id": "parent_tool_call_id"}
_MAX_ID = 200               # ids come from the host; an absurd one is cut, never trusted to be short
_KEEP = 4096                # children remembered per process (oldest forgotten first)


class Subagents:
    def __init__(self):
        self._children: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def started(self, child_session_id=None, **kwargs) -> None:
        """The `subagent_start` hook (accepts every keyword: hosts add some)."""
        if not isinstance(child_session_id, str) or not child_session_id:
            return
        said = {}
        for key, field in _FIELDS.items():
            value = kwargs.get(key)
            if isinstance(value, str) and value and field not in said:
                said[field] = value[:_MAX_ID]
        if not said:
            return
        with self._lock:
            self._children[child_session_id] = said
            self._children.move_to_end(child_session_id)
            while len(self._children) > _KEEP:
                self._children.popitem(last=False)

    def of(self, session_id) -> dict | None:
        """What the host said of the subagent running `session_id` (None: not a subagent we know)."""
        if not isinstance(session_id, str):
            return None
        with self._lock:
            said = self._children.get(session_id)
            return dict(said) if said else None
