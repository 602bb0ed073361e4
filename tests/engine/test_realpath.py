"""fsutil.realpath answers exactly what os.path.realpath answers, for any path Linux allows."""
from __future__ import annotations

import os
import random

import pytest

from chronos_git.engine.fsutil import realpath

ODD = [b"plain", b"sp ace", b"x (deleted)", b"\xff\xfe", b"new\nline", b"..x", b"-", b"\x01\x7f"]


@pytest.fixture
def tree(tmp_path):
    root = os.fsencode(tmp_path)
    for name in ODD:
        os.makedirs(os.path.join(root, b"d", name, b"in"))
        open(os.path.join(root, b"d", name, b"in", b"f"), "wb").close()
    os.symlink(os.path.join(root, b"d"), os.path.join(root, b"abs-link"))
    os.symlink(b"d/" + ODD[3], os.path.join(root, b"rel-link"))
    os.symlink(b"nowhere/at/all", os.path.join(root, b"dangling"))
    os.symlink(b"loop-b", os.path.join(root, b"loop-a"))
    os.symlink(b"loop-a", os.path.join(root, b"loop-b"))
    os.mkfifo(os.path.join(root, b"fifo"))
    return root


def _paths(root: bytes) -> list[bytes]:
    parts = [b"d", b"abs-link", b"rel-link", b"dangling", b"loop-a", b"fifo", b"missing", b"..", b".", b"in", b"f",
             b"", *ODD]
    rng = random.Random(7)
    out = [root, root + b"/", b"", b".", b"relative/x", b"/", b"//" + root.lstrip(b"/")]
    for _ in range(600):
        out.append(b"/".join([root, *(rng.choice(parts) for _ in range(rng.randint(1, 5)))]))
    return out


def test_the_same_answer_as_os_path_realpath_for_bytes_and_text(tree, monkeypatch):
    monkeypatch.chdir(tree)
    for p in _paths(tree):
        assert realpath(p) == os.path.realpath(p), p
        text = os.fsdecode(p)
        assert realpath(text) == os.path.realpath(text), p


def test_a_file_deleted_while_resolved_is_not_named_by_proc_s_spelling(tree, monkeypatch):
    """/proc names an unlinked file "<path> (deleted)": that answer is never given."""
    target = os.path.join(tree, b"d", b"plain", b"in", b"f")
    real_readlink = os.readlink

    def unlinked(p, *a, **k):
        got = real_readlink(p, *a, **k)
        if str(p).startswith("/proc/self/fd/"):
            return got + " (deleted)"
        return got
    monkeypatch.setattr(os, "readlink", unlinked)
    assert realpath(target) == target


def test_a_name_written_with_escaped_bytes_has_the_answer_of_its_utf8_spelling(tmp_path):
    """"jos\\udcc3\\udca9" encodes to the bytes of "josé": one name, one answer, existing or not
    (service/protected.py compares answers with the store's own path)."""
    (tmp_path / "josé" / "store").mkdir(parents=True)
    escaped = str(tmp_path) + "/jos\udcc3\udca9/store"
    assert realpath(escaped) == str(tmp_path / "josé" / "store")
    assert realpath(escaped + "/refs/heads/planted") == str(tmp_path / "josé" / "store" / "refs" / "heads" / "planted")
