"""The corpora: pristine trees cached under <cache>/corpora/, copied fresh per run.

* synthetic-1k / -20k / -100k: deterministic small text files in two directory
  levels, a few executables and relative symlinks.
* linux-6.1: the Debian linux-source-6.1 tarball, unpacked, with the
  Debian-added top-level `/*` ignore rule dropped (it would make every tool
  ignore the whole tree).
* mono-1m / mono-1m-lite: a seeded synthetic tree shaped like Chromium's src (1,000,000 files in
  75,000 folders; bench/mono.py); -lite has the same paths with 0-64 byte files.
* <name>-git (linux-6.1-git, synthetic-1k-git, mono-1m-git, ...): that tree committed once
  into a git repository and packed with `git gc`, as a fresh clone is.  Each
  run's copy gets `git update-index --refresh` (untimed): a copy changes every
  file's inode and ctime, and a user's index is fresh.

The pristine trees are never handed to a comparator: every corpus run works on
a copy in a temporary directory under the cache.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import mono

GEN_VERSION = 1
KERNEL_PACKAGE = "linux-source-6.1"
KERNEL_MEMBER = "./usr/src/linux-source-6.1.tar.xz"
KERNEL_TOPDIR = "linux-source-6.1"
# extra folders where the .deb may already lie (colon-separated), besides the cache
KERNEL_DEB_DIRS = tuple(d for d in os.environ.get("CHRONOS_BENCH_DEB_DIRS", "").split(":") if d)

# name -> (top dirs, subdirs per top dir, files per subdir)
SYNTHETIC = {
    "synthetic-1k": (10, 10, 10),
    "synthetic-20k": (20, 20, 50),
    "synthetic-100k": (40, 25, 100),
}
EXTS = (".c", ".h", ".py", ".md", ".txt")
EXEC_EVERY = 199        # every 199th file is an executable shell script
SYMLINKS = 5


@dataclass
class Corpus:
    name: str
    path: Path            # pristine tree (read-only by convention)
    files: int            # regular files
    symlinks: int
    bytes: int
    note: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "pristine": str(self.path), "files": self.files,
                "symlinks": self.symlinks, "bytes": self.bytes, "note": self.note}


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _count(root: Path) -> tuple[int, int, int]:
    files = links = size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root) and ".git" in dirnames:
            dirnames.remove(".git")            # a git corpus: its repository is not content
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode):
                links += 1
            elif stat.S_ISREG(st.st_mode):
                files += 1
                size += st.st_size
    return files, links, size


def _manifest_path(cache: Path, name: str) -> Path:
    return cache / "corpora" / f"{name}.json"


def _load_manifest(cache: Path, name: str) -> dict | None:
    mp = _manifest_path(cache, name)
    try:
        m = json.loads(mp.read_text())
    except (OSError, ValueError):
        return None
    if m.get("version") != GEN_VERSION or not (cache / "corpora" / name).is_dir():
        return None
    return m


def _write_manifest(cache: Path, name: str, root: Path, note: str | None) -> dict:
    files, links, size = _count(root)
    m = {"version": GEN_VERSION, "name": name, "files": files, "symlinks": links, "bytes": size,
         "note": note, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _manifest_path(cache, name).write_text(json.dumps(m, indent=1))
    return m


def ensure(name: str, cache: Path) -> Corpus:
    """The pristine tree of corpus `name`, built or unpacked on first use."""
    (cache / "corpora").mkdir(parents=True, exist_ok=True)
    m = _load_manifest(cache, name)
    if m is None:
        final = cache / "corpora" / name
        if final.exists():
            shutil.rmtree(final)
        _manifest_path(cache, name).unlink(missing_ok=True)
        if name in SYNTHETIC:
            t = time.monotonic()
            say(f"{name}: generating the pristine tree (cached for later runs)")
            _generate_synthetic(name, cache)
            say(f"{name}: generated in {time.monotonic() - t:.1f}s")
            note = None
        elif name == "linux-6.1":
            note = _unpack_kernel(cache)
        elif name in mono.MONO:
            note = _generate_mono(name, cache)
        elif name.endswith(GIT_SUFFIX) and name[:-len(GIT_SUFFIX)] in (*SYNTHETIC, "linux-6.1", *mono.MONO):
            note = _commit_into_git(ensure(name[:-len(GIT_SUFFIX)], cache), final)
        else:
            raise SystemExit(f"unknown corpus {name!r}")
        m = _write_manifest(cache, name, final, note)
    return Corpus(name, cache / "corpora" / name, m["files"], m["symlinks"], m["bytes"], m.get("note"))


# ------------------------------------------------------------------ synthetic
def _content(name: str, rel: str) -> bytes:
    seed = hashlib.sha256(f"{name}:{rel}".encode()).digest()
    nlines = 4 + seed[0] % 60                       # ~0.3 .. 4.5 KB
    out = [f"# {rel}\n"]
    x = seed
    for n in range(nlines):
        x = hashlib.sha256(x).digest()
        out.append(f"{n:04d} {x.hex()}\n")
    return "".join(out).encode()


def _generate_synthetic(name: str, cache: Path) -> None:
    tops, subs, per = SYNTHETIC[name]
    tmp = cache / "corpora" / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / "README.md").write_text(f"{name}: synthetic chronos-git benchmark corpus (generator v{GEN_VERSION})\n")
    idx = 0
    targets = []
    for t in range(tops):
        for s in range(subs):
            d = tmp / f"d{t:02d}" / f"s{s:02d}"
            d.mkdir(parents=True)
            for f in range(per):
                idx += 1
                if idx % EXEC_EVERY == 0:
                    rel = f"d{t:02d}/s{s:02d}/run{f:04d}.sh"
                    data = b"#!/bin/sh\necho " + rel.encode() + b"\n" + _content(name, rel)
                    p = tmp / rel
                    p.write_bytes(data)
                    os.chmod(p, 0o755)
                else:
                    rel = f"d{t:02d}/s{s:02d}/f{f:04d}{EXTS[idx % len(EXTS)]}"
                    (tmp / rel).write_bytes(_content(name, rel))
                if len(targets) < SYMLINKS and f == 0 and s == 1:
                    targets.append(rel)
    for i, rel in enumerate(targets):
        # d<i>/link<i> -> ../d<i>/s01/<file>: relative, resolves inside the tree
        os.symlink(os.path.join("..", rel), tmp / rel.split("/")[0] / f"link{i}")
    _install(tmp, cache / "corpora" / name)


def _generate_mono(name: str, cache: Path) -> str:
    n_files, lite = mono.MONO[name]
    tmp = cache / "corpora" / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    say(f"{name}: generating {n_files:,} files (seed {mono.SEED}; once, cached)")
    s = mono.generate(str(tmp), n_files, seed=mono.SEED, lite=lite, workers=min(4, os.cpu_count() or 1), log=say)
    _install(tmp, cache / "corpora" / name)
    say(f"{name}: generated in {s['seconds']:.0f}s: {s['files']:,} files, {s['folders']:,} folders, "
        f"{s['symlinks']} symlinks, {s['bytes'] / 2**20:,.0f} MiB")
    return (f"seeded Chromium-shaped tree (bench/mono.py, seed {mono.SEED}): {s['folders']:,} folders; "
            + (f"files 0-{mono.LITE_MAX} B" if lite else
               f"file sizes lognormal(median {mono.SIZE_MEDIAN} B, sigma {mono.SIZE_SIGMA}) "
               f"+ 1 in {round(1 / mono.TAIL_P):,} of 1-16 MiB") + f"; generated in {s['seconds']:.0f}s")


def _install(tmp: Path, final: Path) -> None:
    """Move a finished build into place; a concurrent run that got there first wins."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ git work trees
GIT_SUFFIX = "-git"
_GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _git(args: list[str], cwd: Path) -> None:
    subprocess.run(["git", "-c", "gc.auto=0", "-c", "maintenance.auto=false", *args], cwd=cwd, check=True,
                   env={**os.environ, **_GIT_ENV},
                   stdout=subprocess.DEVNULL)


def is_git_corpus(name: str) -> bool:
    return name.endswith(GIT_SUFFIX)


def _commit_into_git(base: "Corpus", final: Path) -> str:
    t = time.monotonic()
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    say(f"{final.name}: committing {base.name} into a git repository (once; cached)")
    subprocess.run(["cp", "-a", str(base.path), str(tmp)], check=True)
    _git(["init", "-q"], tmp)
    _git(["add", "-A"], tmp)
    _git(["commit", "-q", "-m", f"{base.name}"], tmp)
    _git(["gc", "-q"], tmp)
    _install(tmp, final)
    say(f"{final.name}: committed and packed in {time.monotonic() - t:.1f}s")
    return f"{base.name} committed once into git and packed (git gc)"


def refresh_git_index(ws: Path) -> None:
    """What `git status` does for a user: the index's stat data matches the copied files."""
    _git(["update-index", "-q", "--refresh"], ws)


# --------------------------------------------------------------------- kernel
def find_kernel_deb(cache: Path) -> Path | None:
    pats = [str(cache / "debs" / f"{KERNEL_PACKAGE}_*.deb"), str(cache / f"{KERNEL_PACKAGE}_*.deb")]
    pats += [os.path.join(d, f"{KERNEL_PACKAGE}_*.deb") for d in KERNEL_DEB_DIRS]
    for pat in pats:
        found = sorted(glob.glob(pat))
        if found:
            return Path(found[-1])
    return None


def _download_kernel_deb(cache: Path) -> Path:
    d = cache / "debs"
    d.mkdir(parents=True, exist_ok=True)
    say(f"linux-6.1: `apt-get download {KERNEL_PACKAGE}` into {d}")
    subprocess.run(["apt-get", "download", KERNEL_PACKAGE], cwd=d, check=True)
    deb = find_kernel_deb(cache)
    if deb is None:
        raise SystemExit(f"apt-get download {KERNEL_PACKAGE} produced no .deb in {d}")
    return deb


def drop_debian_ignore_rule(gitignore: Path) -> bool:
    """Remove Debian's top-level `/*` (+ `!/debian/`) block. True if something was dropped."""
    try:
        lines = gitignore.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return False
    star = [i for i, l in enumerate(lines) if l.strip() == "/*"]
    if not star:
        return False
    i = star[-1]
    j = i
    while j > 0 and lines[j - 1].lstrip().startswith("#"):
        j -= 1
    if not any("debian" in l.lower() for l in lines[j:i]):
        j = i                                   # not Debian's comment block: drop the rule only
    tail = [l for l in lines[i + 1:] if l.strip() != "!/debian/"]
    head = lines[:j]
    while head and not head[-1].strip():
        head.pop()
    gitignore.write_text("".join(head + tail))
    return True


def _unpack_kernel(cache: Path) -> str:
    deb = find_kernel_deb(cache) or _download_kernel_deb(cache)
    t = time.monotonic()
    say(f"linux-6.1: unpacking {KERNEL_MEMBER} from {deb} (once; cached in {cache / 'corpora'})")
    tmp = cache / "corpora" / f".tmp-linux-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    p1 = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    p2 = subprocess.Popen(["tar", "-xO", "-f", "-", KERNEL_MEMBER], stdin=p1.stdout, stdout=subprocess.PIPE)
    p1.stdout.close()
    p3 = subprocess.Popen(["tar", "-xJ", "-f", "-", "-C", str(tmp)], stdin=p2.stdout)
    p2.stdout.close()
    rc3, rc2, rc1 = p3.wait(), p2.wait(), p1.wait()
    if rc1 or rc2 or rc3:
        raise SystemExit(f"unpacking {deb} failed (dpkg-deb {rc1}, tar {rc2}, tar -xJ {rc3})")
    top = tmp / KERNEL_TOPDIR
    if not top.is_dir():
        raise SystemExit(f"{KERNEL_MEMBER} did not contain {KERNEL_TOPDIR}/")
    dropped = drop_debian_ignore_rule(top / ".gitignore")
    if dropped:
        print("linux-6.1: dropped the Debian-added `/*` rule (and its `!/debian/` exception) "
              "from the top-level .gitignore of the cached tree", flush=True)
    else:
        print("linux-6.1: no Debian `/*` rule found in the top-level .gitignore", flush=True)
    _install(top, cache / "corpora" / "linux-6.1")
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"linux-6.1: unpacked in {time.monotonic() - t:.1f}s")
    return (f"from {deb.name}; Debian top-level `/*` ignore rule "
            + ("dropped" if dropped else "not present"))


# ------------------------------------------------------------------ workspace
def make_workspace(corpus: Corpus, dest: Path) -> Path:
    """A fresh copy of the pristine tree at `dest`; returns its canonical path.

    Untimed (nothing is measured before it returns).  A reflink copy where the filesystem has
    them (btrfs, xfs; ext4 falls back to a plain copy).  Never a hardlink copy: the figures
    rewrite files in place (open "wb"), which would reach the pristine tree through the link."""
    t = time.monotonic()
    subprocess.run(["cp", "-a", "--reflink=auto", str(corpus.path), str(dest)], check=True)
    if is_git_corpus(corpus.name):
        refresh_git_index(dest)
    os.sync()                      # writeback of the copy must not land in a timed call
    say(f"{corpus.name}: workspace copied to {dest} in {time.monotonic() - t:.1f}s")
    return Path(os.path.realpath(dest))
