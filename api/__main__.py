"""`python -m chronos_git.api [--store DIR] [--host 127.0.0.1] [--port 8765] [--token T] [--allow-host NAME]...`

Always authenticated: without --token or $CHRONOS_GIT_API_TOKEN a token is
generated.  The URL, the token and how to send it are printed at start (one
line each, flushed), so a caller that reads stdout can connect.
"""
import argparse
import os
import secrets
import socket

PREFIX = "/api/plugins/chronos-git/"
WILDCARDS = ("", "0.0.0.0", "::")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m chronos_git.api")
    p.add_argument("--store", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="0 = any free port (the URL printed says which)")
    p.add_argument("--token", default=os.environ.get("CHRONOS_GIT_API_TOKEN"),
                   help="default $CHRONOS_GIT_API_TOKEN, else a generated one")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host header name to accept besides loopback names (repeatable)")
    a = p.parse_args(argv)
    import uvicorn

    from .. import settings as settings_mod
    from . import create_app
    loaded = settings_mod.load()
    for problem in loaded.problems:          # never silently: said at start, and in /health
        print(f"chronos-git: settings problem: {problem}", flush=True)
    token = a.token or secrets.token_urlsafe(32)
    wildcard = a.host in WILDCARDS
    app = create_app(a.store, loaded.settings, token,
                     allowed_hosts=a.allow_host + ([] if wildcard else [a.host]), problems=loaded.problems)
    # bind first: the printed URL has the real port (--port 0) and accepts connections at once
    sock = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((a.host, a.port))
    sock.listen(128)
    host = "127.0.0.1" if wildcard else f"[{a.host}]" if ":" in a.host else a.host
    print(f"chronos-git API: http://{host}:{sock.getsockname()[1]}{PREFIX}", flush=True)
    print(f"token: {token}", flush=True)
    print("send it with every request as the header `X-Hermes-Session-Token: <token>` "
          "or `Authorization: Bearer <token>`", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
