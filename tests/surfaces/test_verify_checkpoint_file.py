"""Issue 33, finding 6: `journal verify --checkpoint FILE` reads a regular file only.

The trial: `/dev/zero` ran the CLI out of memory and a FIFO blocked it forever.  Now anything
but a regular file of at most 1 MiB is a clear input error (exit 1, code bad_input), at once.
"""
from __future__ import annotations

import os
import threading

import pytest

from chronos_git.commands.inputs import HEAD_MAX_BYTES


@pytest.fixture
def verify(cli, ws):
    assert cli("snapshot", "--workspace", ws).rc == 0

    def run(path):
        return cli("journal", "verify", "--checkpoint", path, "--json")
    return run


def refused(r, words: str) -> None:
    assert r.rc == 1, (r.rc, r.stdout, r.stderr)
    assert r.json["code"] == "bad_input" and words in r.json["error"], r.json
    assert "Traceback" not in r.stdout + r.stderr


def test_an_exported_head_still_verifies(verify, cli, tmp_path):
    head = tmp_path / "head.json"
    head.write_text(cli("journal", "checkpoint", "--json").stdout)
    r = verify(head)
    assert r.rc == 0 and r.json["status"] == "ok", r.stdout


@pytest.mark.parametrize("what", ["device", "link to a device", "folder"])
def test_anything_but_a_regular_file_is_refused(verify, tmp_path, what):
    path = {"device": "/dev/zero", "folder": str(tmp_path)}.get(what)
    if path is None:
        path = tmp_path / "head.json"
        path.symlink_to("/dev/zero")
    refused(verify(path), "it is not a regular file")


def test_a_file_larger_than_a_head_is_refused(verify, tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(HEAD_MAX_BYTES + 1)
    refused(verify(big), "more than 1024 KiB")


def test_a_fifo_is_refused_without_blocking(verify, tmp_path):
    fifo = tmp_path / "head.fifo"
    os.mkfifo(fifo)
    out: list = []
    t = threading.Thread(target=lambda: out.append(verify(fifo)), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():            # a regression: release the blocked reader, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(60)
        pytest.fail("journal verify --checkpoint blocked on a FIFO")
    refused(out[0], "it is not a regular file")
