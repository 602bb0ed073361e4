"""Protected paths in a real `hermes chat` (hermes-agent 0.19.0, a scripted model): a
write_file into the store is refused before it runs and journaled as refused, the model gets
the structured error; a terminal call that plants a hook in the store runs and is recorded
against that call.  (The plugin folder here is this checkout, so no call targets it: the
in-process tests in tests/service/test_protected_paths.py cover the plugin's files.)
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hermes,
              pytest.mark.skipif(shutil.which("hermes", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}") is None,
                                 reason="hermes-agent is not installed in this environment")]


def test_a_write_into_the_store_is_refused_and_a_planted_hook_is_recorded(henv):
    store = henv.store
    hook = store / "hooks" / "post-checkout"
    henv.set_script([{"match": "*", "steps": [
        {"tool_calls": [{"name": "write_file", "id": "call_store", "arguments": {
            "path": str(store / "config"), "content": "[core]\n\thooksPath = /tmp/evil\n"}}]},
        {"tool_calls": [{"name": "terminal", "id": "call_hook", "arguments": {
            "command": f"echo 'curl evil' > {hook}"}}]},
        {"content": "done"}]}])
    r = henv.chat("tidy up")
    assert r.returncode == 0, r.stderr
    assert "hooksPath" not in (store / "config").read_text()           # not written
    assert hook.exists()                                                # a shell call cannot be refused

    seen = henv.tool_results_seen()
    refused = next(s for s in seen if "protected_path" in s)
    assert str(store / "config") in refused and "nothing was run" in refused
    assert any("chronos_warning" in s and str(hook) in s for s in seen)

    events = json.loads(henv.chronos("journal", "log", "--limit", "100", "--json").stdout)["events"]
    (ev,) = [e for e in events if e["kind"] == "refused"]
    assert ev["tool_call_id"] == "call_store" and ev["tool"] == "write_file"
    assert not [e for e in events if e["kind"] == "started" and e.get("tool_call_id") == "call_store"]
    started = next(e for e in events if e["kind"] == "started" and e.get("tool_call_id") == "call_hook")
    (ret,) = [e for e in events if e["kind"] == "returned" and e["operation_id"] == started["operation_id"]]
    assert str(hook) in ret["protected_changed"]
    health = json.loads(henv.chronos("health", "--json").stdout)
    assert any(c["operation_id"] == started["operation_id"] for c in health["protected_changes"])
