#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server (stdlib only).

    python scripted_model.py --port 0 --script script.json --log requests.jsonl

Prints `READY <port>` once listening.  The script is re-read on every request:

    {"turns": [{"match": "<substring of the last user message>" | "*",
                "steps": [{"tool_calls": [{"name": "write_file", "arguments": {...}, "id": "call_x"}]},
                          {"content": "final answer"}]}]}

The step is chosen without server state: the number of assistant messages
after the last user message.  Several tool_calls in one step are one parallel
batch.  A step's `"think_s": seconds` delays its answer, as a real model's
response time would (logged on arrival).  Requests without `tools` (titles,
summaries) get "ok" and consume no step.  Every request is logged (messages included) so tests can assert on
what the model received.  Streaming (SSE) and plain JSON are both answered.
"""
import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()
OPTS = None


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def choose(body: dict) -> dict:
    msgs = body.get("messages") or []
    last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    said = _text(msgs[last_user].get("content")) if last_user >= 0 else ""
    k = sum(1 for m in msgs[last_user + 1:] if m.get("role") == "assistant")
    with open(OPTS.script, encoding="utf-8") as fh:
        script = json.load(fh)
    for turn in script.get("turns", []):
        if turn.get("match", "*") == "*" or turn["match"] in said:
            steps = turn.get("steps", [])
            return steps[k] if k < len(steps) else {"content": "done"}
    return {"content": "no scripted turn matched"}


def calls_of(step: dict) -> list[dict]:
    out = []
    for tc in step.get("tool_calls") or []:
        a = tc.get("arguments", {})
        out.append({"id": tc.get("id") or "call_" + uuid.uuid4().hex[:12], "type": "function",
                    "function": {"name": tc["name"], "arguments": a if isinstance(a, str) else json.dumps(a)}})
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._json({"object": "list", "data": [{"id": OPTS.model, "object": "model", "created": 0,
                                                    "owned_by": "tests", "context_length": 128000}]})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            body = {}
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json({"error": {"message": "unsupported"}}, 404)
            return
        step = choose(body) if body.get("tools") else {"content": "ok"}
        calls = calls_of(step)
        if OPTS.log:
            with _lock, open(OPTS.log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"t": time.time(), "has_tools": bool(body.get("tools")),
                                     "messages": body.get("messages"), "step": step,
                                     "tool_calls": calls}) + "\n")
        if isinstance(step.get("think_s"), (int, float)) and 0 < step["think_s"] <= 60:
            time.sleep(step["think_s"])
        content = step.get("content")
        finish = "tool_calls" if calls else "stop"
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        model = body.get("model") or OPTS.model
        if not body.get("stream"):
            msg = {"role": "assistant", "content": content}
            if calls:
                msg["tool_calls"] = calls
            self._json({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                        "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def send(delta, reason=None, with_usage=False):
            chunk = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
            if with_usage:
                chunk["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        send({"role": "assistant", "content": ""})
        if content:
            send({"content": content})
        for i, c in enumerate(calls):
            send({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                  "function": {"name": c["function"]["name"], "arguments": ""}}]})
            send({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]})
        send({}, reason=finish, with_usage=True)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    global OPTS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--script", required=True)
    p.add_argument("--log", default="")
    p.add_argument("--model", default="scripted-model")
    OPTS = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", OPTS.port), Handler)
    print(f"READY {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
