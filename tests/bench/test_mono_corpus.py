"""The mono-1m corpus generator (bench/mono.py), scaled down to 2,000 files.

Checks what the corpus promises: the same seed gives a byte-identical tree (names, modes,
contents, link targets, mtimes), the folder/file ratio and depth profile of the full corpus,
a lognormal size distribution with a long tail, and a -lite tree with the same paths and
tiny files.  No timings.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import mono  # noqa: E402

N = 2000


@pytest.fixture(scope="module")
def base():
    """One scaled tree per module, on tmpfs where there is one (file creation, not the disk, is
    what these tests are about; a benchmark may be loading the disk)."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="mono-test-", dir=shm) as d:
        root = Path(d)
        made = mono.generate(str(root / "a"), N, workers=1)
        yield root, made


def _fingerprint(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                with open(p, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                out[rel] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


def test_same_seed_same_tree_other_seed_other_tree(base):
    root, made = base
    mono.generate(str(root / "b"), N, workers=2)          # the split over workers does not matter
    fa = _fingerprint(root / "a")
    assert fa == _fingerprint(root / "b")
    assert made["files"] == N
    assert mono.plan(N, mono.SEED + 1) != mono.plan(N)
    assert mono.folder_files(mono.SEED + 1, 1, 50) != mono.folder_files(mono.SEED, 1, 50)


def test_shape_counts_depth_and_sizes(base):
    top, made = base
    root = top / "a"
    s = mono.shape(str(root))
    assert s["files"] == N and made["files"] == N
    assert s["symlinks"] == made["symlinks"] >= 3
    # ~13 files per folder, as the full corpus (1M / 75k)
    assert 11 <= N / s["folders"] <= 16
    # depth: path components of a file; Chromium's median ~6-7, max ~15
    assert 5 <= s["depth_median"] <= 8
    assert 10 <= s["depth_max"] <= mono.MAX_DIR_DEPTH + 1
    # lognormal sizes: median ~2 KB, mean well above it, a long tail
    assert 1200 <= s["size_median"] <= 3200
    assert s["bytes"] / N > 1.5 * s["size_median"]
    assert s["size_p99"] > 10 * s["size_median"]
    assert s["size_max"] > 30 * s["size_median"]
    # wide folders and narrow ones
    per = {}
    for dirpath, _dirs, files in os.walk(root):
        per[dirpath] = len(files)
    counts = sorted(per.values())
    assert counts[len(counts) // 2] <= 6
    assert counts[-1] >= 100
    # a few executables, text files are text, binaries have their magic
    execs = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and os.stat(p).st_mode & 0o111]
    assert 1 <= len(execs) <= N // 50
    assert all(p.read_bytes().startswith(b"#!") for p in execs if p.stat().st_size >= 2)
    pngs = [p for p in root.rglob("*.png") if p.stat().st_size >= 8]
    assert pngs and all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    for p in root.rglob("*.cc"):
        assert b"\0" not in p.read_bytes()
    for link in (p for p in root.rglob("link*") if p.is_symlink()):
        assert link.resolve().is_file() and link.resolve().is_relative_to(root.resolve())


def test_lite_has_the_same_paths_and_tiny_files(base):
    root, _ = base
    mono.generate(str(root / "full500"), 500, workers=1)
    mono.generate(str(root / "lite500"), 500, lite=True, workers=1)
    full, lite = _fingerprint(root / "full500"), _fingerprint(root / "lite500")
    assert sorted(full) == sorted(lite)
    for rel, v in lite.items():
        assert v[0] == full[rel][0]
        if v[0] == "file":
            assert v[1] == full[rel][1]                     # same mode
            assert 0 <= v[2] <= mono.LITE_MAX
        elif v[0] == "link":
            assert v[1] == full[rel][1]


def test_full_plan_is_chromium_sized():
    dirs, counts = mono.plan(1_000_000)
    assert sum(counts) == 1_000_000
    assert 70_000 <= len(dirs) <= 80_000
    assert max(d.count("/") + 1 for d in dirs[1:]) == mono.MAX_DIR_DEPTH
    assert max(counts) >= 1000                              # a few very wide folders
