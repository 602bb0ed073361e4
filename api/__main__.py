"""`python -m chronos_git.api [--store DIR] [--host 127.0.0.1] [--port 8765] [--token T]`"""
import argparse
import os


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m chronos_git.api")
    p.add_argument("--store", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default=os.environ.get("CHRONOS_GIT_API_TOKEN"))
    a = p.parse_args()
    import uvicorn

    from ..cli import load_settings
    from . import create_app
    uvicorn.run(create_app(a.store, load_settings(), a.token), host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
