"""mono-1m: a seeded synthetic tree shaped like Chromium's src checkout (issue 37).

The shape, for `n` files (1,000,000 for the corpora; the tests use a few thousand):

* folders: n / 13.33 (75,000 at 1M), including the root.  Each folder's depth is drawn from a
  fixed profile (DEPTH_SHARE: depth 1 = a top-level folder, up to MAX_DIR_DEPTH = 14), and it hangs
  under a folder one level up chosen by preferential attachment (a Yule process: a folder with
  many subfolders is likelier to get another), so a few folders have hundreds of subfolders and
  most have none or one.  File depth (path components, `a/b.cc` = 2) is at most 15, median ~7.
* files per folder: every leaf folder gets one, the rest is shared in proportion to a
  lognormal(0, FANOUT_SIGMA) weight per folder: median 4 files, mean 13.3, 14 folders of
  1,000-3,100 at 1M (Chromium's web_tests), many of one or two.
* names: words of a Chromium-like vocabulary, a `BUILD.gn` in ~35% and an `OWNERS` in ~30% of
  the folders, extensions drawn from EXTS (by count: .cc .h .html .txt .png .js .py .json ...;
  ~9.6% binary).  1 file in ~260 is an executable script (mode 0755, a shebang line); n / 50,000
  (at least 3) relative symlinks point at files elsewhere in the tree.
* sizes (full): lognormal with median SIZE_MEDIAN = 2,000 B and sigma SIZE_SIGMA = 1.25 (mean
  ~4.4 KB), plus a tail: 1 file in 20,000 (TAIL_P) log-uniform between 1 and 16 MiB (mean with
  it 4.6 KB: 4.6 GB at 1M, 7.1 GB on ext4 with its 4 KiB blocks).  Text files are a path comment
  plus a slice of a seeded pool of code-like lines (zlib -6 ~3.5x); binaries a magic number plus
  a slice of a seeded pool of random bytes.  lite: the same paths, modes and links, every file
  0-64 bytes (uniform): stat and index cost alone.
* mtimes: seeded, spread over 2025, files, links and folders: the same seed gives a
  byte-identical tree (names, modes, contents, link targets, mtimes).

Everything a folder holds is drawn from that folder's own seeded generator, so the tree is the
same whatever the number of worker processes.
"""
from __future__ import annotations

import functools
import math
import multiprocessing
import os
import random
import time
from collections.abc import Callable

SEED = 37
MONO = {"mono-1m": (1_000_000, False), "mono-1m-lite": (1_000_000, True)}   # name -> (files, lite)
FILES_PER_FOLDER = 13.33
MAX_DIR_DEPTH = 14
TOP_SHARE = 0.0003                  # top-level folders: ~22 at 75k folders (at least 2)
# share of the other folders at depth 2 .. MAX_DIR_DEPTH
DEPTH_SHARE = (0.015, 0.07, 0.17, 0.21, 0.18, 0.13, 0.085, 0.055, 0.035, 0.021, 0.013, 0.008, 0.005)
FANOUT_SIGMA = 1.6
SIZE_MEDIAN = 2000
SIZE_SIGMA = 1.25
TAIL_P = 1 / 20_000
TAIL_MIN, TAIL_MAX = 1 << 20, 16 << 20
LITE_MAX = 64
EXEC_P = 1 / 250
BASE_T = 1_735_689_600              # 2025-01-01T00:00:00Z
YEAR = 365 * 86_400
TEXT_POOL_BYTES = 4 << 20
BIN_POOL_BYTES = 32 << 20

# (extension, weight by count, comment prefix or binary magic, binary?)
EXTS = (
    (".cc", 16, b"// ", False), (".h", 14, b"// ", False), (".html", 7, b"<!-- ", False),
    (".txt", 7, b"# ", False), (".png", 7, b"\x89PNG\r\n\x1a\n", True), (".js", 6, b"// ", False),
    (".py", 4, b"# ", False), (".json", 4, b"// ", False), (".java", 4, b"// ", False),
    (".xml", 2.5, b"<!-- ", False), (".ts", 2, b"// ", False), (".c", 2, b"/* ", False),
    (".css", 2, b"/* ", False), (".mm", 1.5, b"// ", False), (".md", 1.5, b"# ", False),
    (".svg", 1.5, b"<!-- ", False), (".gni", 1, b"# ", False), (".idl", 1, b"// ", False),
    (".mojom", 1, b"// ", False), (".proto", 0.5, b"// ", False), (".grdp", 0.5, b"<!-- ", False),
    (".sh", 0.5, b"# ", False), (".S", 0.2, b"// ", False), (".jpg", 0.5, b"\xff\xd8\xff\xe0", True),
    (".pdf", 0.3, b"%PDF-1.4\n", True), (".bin", 0.3, b"", True), (".ico", 0.2, b"\0\0\1\0", True),
    (".wasm", 0.2, b"\0asm\1\0\0\0", True), (".woff2", 0.2, b"wOF2", True), (".gz", 0.2, b"\x1f\x8b\x08", True),
)
_EXT_CUM = []
for _e in EXTS:
    _EXT_CUM.append((_EXT_CUM[-1] if _EXT_CUM else 0) + _e[1])
_WORDS = (
    "base browser render renderer frame view views layout paint net http cache url tab window widget layer "
    "compositor gpu media audio video stream sync storage blob file path task thread runner message pipe mojo "
    "ipc service manager controller delegate observer client host proxy policy profile prefs settings metrics "
    "histogram trace event input touch mouse keyboard focus scroll animation style css dom node element "
    "document script bindings util utils memory allocator partition string test mock fake fuzzer common core "
    "public internal platform content chrome components extensions download history bookmark password "
    "autofill omnibox search sharing signin account payments permissions notification webui resources "
    "android ios mac win linux chromeos fuchsia ash shell apps accessibility display surface viz cc skia "
    "font text image decoder encoder codec crypto cert ssl quic dns socket proxy_config cookie session "
    "navigation loader fetch worker service_worker indexed_db quota dev_tools inspector protocol v8 wasm "
    "heap gc tracing feature flags switches config build tools scripts data golden expected wpt external "
    "blink web_tests fast editing forms tables svg canvas webgl webgpu xr bluetooth usb serial hid midi"
)
WORDS = tuple(_WORDS.split())
_ID_CHARS = "abcdefghijklmnopqrstuvwxyz"


def _dir_counts(n_dirs: int) -> list[int]:
    """Folders at depth 1 .. MAX_DIR_DEPTH for n_dirs folders (the root not counted)."""
    tops = max(2, round(n_dirs * TOP_SHARE))
    rest = n_dirs - tops
    counts = [tops] + [round(rest * s) for s in DEPTH_SHARE]
    if 0 in counts:                           # a small tree: no folders below an empty level
        counts = counts[:counts.index(0)]
    counts[min(4, len(counts) - 1)] += n_dirs - sum(counts)
    return counts


def plan(n_files: int, seed: int = SEED) -> tuple[list[str], list[int]]:
    """The folders (relative paths, the root "" first, parents before children) and files in each."""
    rng = random.Random(f"mono:{seed}:tree")
    n_dirs = max(3, round(n_files / FILES_PER_FOLDER)) - 1
    dirs = [""]
    children: list[set[str]] = [set()]
    level = [0]
    for count in _dir_counts(n_dirs):
        pool = list(level)
        new = []
        for _ in range(count):
            p = rng.choice(pool)
            pool.append(p)
            name = rng.choice(WORDS)
            if name in children[p]:
                name = f"{name}_{rng.choice(_ID_CHARS)}{len(children[p])}"
            children[p].add(name)
            dirs.append(f"{dirs[p]}/{name}" if dirs[p] else name)
            children.append(set())
            new.append(len(dirs) - 1)
        level = new
    counts = [0 if children[i] else 1 for i in range(len(dirs))]
    weights = [rng.lognormvariate(0, FANOUT_SIGMA) for _ in dirs]
    rest = n_files - sum(counts)
    total = sum(weights)
    for i, w in enumerate(weights):
        counts[i] += int(rest * w / total)
    for i in rng.choices(range(len(dirs)), weights=weights, k=n_files - sum(counts)):
        counts[i] += 1
    return dirs, counts


def folder_files(seed: int, i: int, count: int) -> list[tuple[str, int]]:
    """(name, kind) of the files of folder i: kind = index into EXTS, or -1 for an executable."""
    rng = random.Random(f"mono:{seed}:names:{i}")
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    fixed = [n for n, p in (("BUILD.gn", 0.35), ("OWNERS", 0.3)) if rng.random() < p]
    for k in range(count):
        if k < len(fixed):
            name, kind = fixed[k], EXTS.index(next(e for e in EXTS if e[0] == ".gni"))
        else:
            stem = rng.choice(WORDS)
            if rng.random() < 0.7:
                stem += "_" + rng.choice(WORDS)
            r = rng.random()
            if r < 0.15:
                stem += "_unittest"
            elif r < 0.2:
                stem += "-expected"
            if rng.random() < EXEC_P:
                kind, ext = -1, (".sh", ".py")[rng.random() < 0.5]
            else:
                kind = rng.choices(range(len(EXTS)), cum_weights=_EXT_CUM)[0]
                ext = EXTS[kind][0]
            name = stem + ext
            if name in seen:
                name = f"{stem}_{k}{ext}"
        seen.add(name)
        out.append((name, kind))
    return out


@functools.lru_cache(maxsize=1)
def _pools(seed: int) -> tuple[bytes, bytes]:
    rng = random.Random(f"mono:{seed}:text")
    words = [w.encode() for w in WORDS] + [b"{", b"}", b"(", b");", b"=", b"if", b"return", b"const", b"int",
                                           b"auto", b"for", b"std::string", b"nullptr", b"::", b"->", b"0", b"1"]
    lines = []
    size = 0
    while size < TEXT_POOL_BYTES:
        line = b"  " * rng.randrange(5) + b" ".join(rng.choices(words, k=rng.randrange(1, 12))) + b"\n"
        lines.append(line)
        size += len(line)
    return b"".join(lines), random.Random(f"mono:{seed}:bin").randbytes(BIN_POOL_BYTES)


def file_size(rng: random.Random, lite: bool) -> int:
    if lite:
        return rng.randrange(LITE_MAX + 1)
    if rng.random() < TAIL_P:
        return int(math.exp(rng.uniform(math.log(TAIL_MIN), math.log(TAIL_MAX))))
    return min(TAIL_MAX, int(rng.lognormvariate(math.log(SIZE_MEDIAN), SIZE_SIGMA)))


# set in the parent before the workers fork: (root, seed, lite, dirs, counts, text pool, binary pool)
_JOB: tuple = ()


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fill(span: tuple[int, int]) -> tuple[int, int]:
    """Write the files of folders span[0] .. span[1]-1; returns (files, bytes)."""
    root, seed, lite, dirs, counts, text, binary = _JOB
    files = nbytes = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for i in range(*span):
        if not counts[i]:
            continue
        rs = random.Random(f"mono:{seed}:data:{i}")
        dfd = os.open(os.path.join(root, dirs[i]), os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name, kind in folder_files(seed, i, counts[i]):
                size = file_size(rs, lite)
                off = rs.randrange(len(text))
                rel = f"{dirs[i]}/{name}" if dirs[i] else name
                if kind < 0:
                    head, pool, mode = (b"#!/bin/sh\n# " if name.endswith(".sh") else b"#!/usr/bin/env python3\n# ") \
                        + rel.encode() + b"\n", text, 0o755
                elif EXTS[kind][3]:
                    head, pool, mode = EXTS[kind][2], binary, 0o644
                else:
                    head, pool, mode = EXTS[kind][2] + rel.encode() + b"\n", text, 0o644
                fd = os.open(name, flags, mode, dir_fd=dfd)
                try:
                    if size <= len(head):
                        _write_all(fd, head[:size])
                    else:
                        body = size - len(head)
                        if off + body <= len(pool):
                            _write_all(fd, head + pool[off:off + body])
                        else:                     # wraps around the pool (the long tail)
                            _write_all(fd, head)
                            view = memoryview(pool)
                            while body:
                                chunk = view[off:off + body]
                                _write_all(fd, chunk)
                                body -= len(chunk)
                                off = 0
                    t = BASE_T + rs.randrange(YEAR)
                    os.utime(fd, (t, t))
                finally:
                    os.close(fd)
                files += 1
                nbytes += size
        finally:
            os.close(dfd)
    return files, nbytes


def _spans(counts: list[int], per: int) -> list[tuple[int, int]]:
    out, start, acc = [], 0, 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= per:
            out.append((start, i + 1))
            start, acc = i + 1, 0
    if start < len(counts):
        out.append((start, len(counts)))
    return out


def generate(root: str, n_files: int, *, seed: int = SEED, lite: bool = False, workers: int = 1,
             log: Callable[[str], None] | None = None) -> dict:
    """Write the tree under `root` (created; must not exist). Returns its shape."""
    global _JOB
    t0 = time.monotonic()
    dirs, counts = plan(n_files, seed)
    os.mkdir(root)
    for d in dirs[1:]:
        os.mkdir(os.path.join(root, d))
    text, binary = _pools(seed)
    _JOB = (root, seed, lite, dirs, counts, text, binary)
    spans = _spans(counts, max(1000, n_files // 50))
    files = nbytes = 0
    try:
        if workers <= 1:
            results = map(_fill, spans)
            pool = None
        else:
            pool = multiprocessing.get_context("fork").Pool(workers)
            results = pool.imap_unordered(_fill, spans)
        step = max(1, n_files // 10)
        for f, b in results:
            if log and (files + f) // step > files // step:
                log(f"  {files + f:,} / {n_files:,} files, {(nbytes + b) / 2**20:,.0f} MiB, "
                    f"{time.monotonic() - t0:.0f}s")
            files += f
            nbytes += b
        if pool is not None:
            pool.close()
            pool.join()
    finally:
        _JOB = ()
    links = _symlinks(root, dirs, counts, seed, n_files)
    for i in reversed(range(len(dirs))):           # last: creating entries moves a folder's mtime
        t = BASE_T + random.Random(f"mono:{seed}:dir:{i}").randrange(YEAR)
        os.utime(os.path.join(root, dirs[i]), (t, t))
    return {"files": files, "bytes": nbytes, "folders": len(dirs), "symlinks": links,
            "seconds": round(time.monotonic() - t0, 1)}


def _symlinks(root: str, dirs: list[str], counts: list[int], seed: int, n_files: int) -> int:
    rng = random.Random(f"mono:{seed}:links")
    holders = [i for i, c in enumerate(counts) if c]
    n = max(3, n_files // 50_000)
    for k in range(n):
        src, dst = rng.choice(holders), rng.choice(holders)
        names = folder_files(seed, dst, counts[dst])
        target = os.path.join(dirs[dst], names[rng.randrange(len(names))][0])
        link = os.path.join(root, dirs[src], f"link{k}")
        os.symlink(os.path.relpath(target, dirs[src] or "."), link)
        t = BASE_T + rng.randrange(YEAR)
        os.utime(link, (t, t), follow_symlinks=False)
    return n


def shape(root: str) -> dict:
    """Counts, file depths and sizes of a tree (for the tests and the manifest's note)."""
    depths, sizes = [], []
    folders = links = 0
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root and ".git" in dirnames:
            dirnames.remove(".git")
        folders += 1
        rel = os.path.relpath(dirpath, root)
        base = 0 if rel == "." else rel.count("/") + 1
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if os.path.islink(os.path.join(dirpath, name)):
                links += 1
            else:
                depths.append(base + 1)
                sizes.append(st.st_size)
    depths.sort()
    sizes.sort()
    n = len(sizes)
    return {"files": n, "folders": folders, "symlinks": links, "bytes": sum(sizes),
            "depth_median": depths[n // 2] if n else 0, "depth_max": depths[-1] if n else 0,
            "size_median": sizes[n // 2] if n else 0, "size_p99": sizes[int(n * 0.99)] if n else 0,
            "size_max": sizes[-1] if n else 0}
