"""What the user's own git repository already knows, taken read-only for a first snapshot.

Most workspaces are git clones.  Their index maps every tracked path to a blob
id together with the stat data the file had when git last looked at it, and
their packs already hold those blobs.  A first snapshot that trusts a path
whose stat data still matches (git's own rule, with its racy-timestamp guard)
neither reads nor hashes it, and a pack hard-linked (or reflinked) into the
store makes its objects ours at once: the link survives `rm -rf .git` and
`git gc --prune=now` in the user's repository, and the store stays
self-contained.  Consolidation (engine/consolidate.py) later copies
out what our checkpoints need and drops the link, so a long history in the
user's pack does not stay in the store.

Nothing is written into the user's `.git`; the only side effect of a hard
link is the pack's link count.  Anything unusual (another hash algorithm, a
split index, content filters or end-of-line conversion, a file that changed)
means "not known here": that file is read and hashed as usual.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass, field

from . import loose
from .import_index import WIDE_TIME, stat_fields

MODE_FILE, MODE_EXEC, MODE_LINK, MODE_GITLINK = 0o100644, 0o100755, 0o120000, 0o160000
ZERO = b"\0" * 20
SKIP_WORKTREE, INTENT_TO_ADD, ASSUME_VALID, STAGE = 0x4000, 0x2000, 0x8000, 0x3000
FICLONE = 0x40049409
MAX_INDEX_BYTES = 1 << 30
# attributes that make a blob differ from the bytes on disk
_CONVERTING = {b"text", b"eol", b"crlf", b"filter", b"ident", b"working-tree-encoding"}
_RULE_FILES = (b".gitattributes", b".gitignore")


class Unusable(Exception):
    """The user's repository cannot vouch for anything: hash as usual (the reason is kept)."""


@dataclass
class Known:
    """Paths git vouches for, and the packs that hold their blobs."""
    gitdir: bytes
    entries: dict[bytes, tuple[bytes, int, int, bytes]] = field(default_factory=dict)  # see parse_index
    index_mtime_ns: int = 0
    packs: dict[str, set[bytes]] = field(default_factory=dict)   # pack stem -> object ids it holds
    pack_dir: bytes = b""
    trees: dict[bytes, tuple] = field(default_factory=dict)      # the index's valid cache-tree nodes
    odd: dict[bytes, str] = field(default_factory=dict)          # entries left out, and why
    common: bytes = b""                                          # where objects and config live
    ignore_files: set[bytes] = field(default_factory=set)        # the tracked `.gitignore` files

    def tree_ext(self, path: bytes, name: bytes) -> bytes | None:
        """The TREE extension entry (with its subtrees) of directory `path` as git's index
        has it, or None when any node of it is missing or invalid."""
        item = self.trees.get(path)
        if item is None:
            return None
        count, sha, kids = item
        parts = [name + b"\0" + b"%d %d\n" % (count, len(kids)) + sha]
        for kid in sorted(kids):
            sub = self.tree_ext(path + b"/" + kid if path else kid, kid)
            if sub is None:
                return None
            parts.append(sub)
        return b"".join(parts)

    def vouch(self, entries) -> dict[int, bytes]:
        """id(entry) -> blob id for each entry (with `path`, `mode`, `st`: a `packed_stat`)
        whose current bytes git's index vouches for: the same stat fields (all but dev and
        st_mode; inode and size as stored, 32-bit), the same kind, and not racily clean
        (changed in the tick the index was written).  The index keeps those fields in the
        layout of `packed_stat`'s first 40 bytes, so they are compared as bytes."""
        get, limit, out = self.entries.get, self.index_mtime_ns, {}
        for e in entries:
            item = get(e.path)
            if item is None:
                continue
            sha, imode, _size, held = item
            st = e.st
            if st is None or (imode == MODE_LINK) != (e.mode == MODE_LINK):
                continue
            _cs, _cns, ms, mns, _dev, _ino, st_mode = stat_fields(st)[:7]
            if st_mode & WIDE_TIME:
                continue                     # its seconds wrapped: never equal to git's as they are
            if ms * 1_000_000_000 + mns < limit and held[:16] == st[:16] and held[20:24] == st[20:24] \
                    and held[28:40] == st[28:40]:
                out[id(e)] = sha
        return out


def find_gitdir(root: bytes) -> bytes | None:
    """The user's git directory for work tree `root`: `.git` itself, or where a `.git` file
    (`gitdir: ...`, worktrees and submodules) points.  None when there is none."""
    dotgit = os.path.join(root, b".git")
    try:
        st = os.lstat(dotgit)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return dotgit
    if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
        return None
    try:
        with open(dotgit, "rb") as fh:
            line = fh.read(4096).split(b"\n", 1)[0].strip()
    except OSError:
        return None
    if not line.startswith(b"gitdir:"):
        return None
    target = line[len(b"gitdir:"):].strip()
    target = os.path.normpath(os.path.join(root, target))
    return target if os.path.isdir(target) else None


def common_dir(gitdir: bytes) -> bytes:
    """Where objects and config live (a linked worktree's gitdir names it in `commondir`)."""
    try:
        with open(os.path.join(gitdir, b"commondir"), "rb") as fh:
            rel = fh.read(4096).split(b"\n", 1)[0].strip()
    except OSError:
        return gitdir
    return os.path.normpath(os.path.join(gitdir, rel)) if rel else gitdir


def _git_config_values(paths: list[bytes], depth: int = 0) -> dict[str, str]:
    """A tolerant reader of the few keys that matter (last one wins, as in git).  Included
    files (`include.path`, `includeIf.*.path`) are read too, whatever their condition: a
    conversion set anywhere is enough to refuse."""
    out: dict[str, str] = {}
    for path in paths:
        try:
            with open(path, "rb") as fh:
                text = fh.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                m = re.match(r'\[\s*([A-Za-z0-9.-]+)(?:\s+"(.*)")?\s*\]', line)
                section = (m.group(1).lower() + (("." + m.group(2)) if m.group(2) else "")) if m else "?"
                continue
            key, sep, value = line.partition("=")
            value = re.split(r"\s[#;]", value, maxsplit=1)[0].strip().strip('"')
            key = f"{section}.{key.strip().lower()}"
            out[key] = value.lower() if sep else "true"
            if (section == "include" or section.startswith("includeif.")) and key.endswith(".path") and depth < 5:
                inc = os.path.expanduser(value)
                inc = os.path.join(os.path.dirname(os.fsdecode(path)), inc)
                out.update(_git_config_values([os.fsencode(inc)], depth + 1))
    return out


def _config_paths(common: bytes) -> list[bytes]:
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    paths = [b"/etc/gitconfig"]
    if home:
        paths += [os.fsencode(os.path.join(xdg, "git", "config")), os.fsencode(os.path.join(home, ".gitconfig"))]
    return paths + [os.path.join(common, b"config")]


def _refuse_converting(common: bytes, gitdir: bytes, cfg: dict[str, str], attr_blobs: list[bytes]) -> None:
    fmt = cfg.get("extensions.objectformat", "sha1")
    if fmt not in ("", "sha1"):
        raise Unusable(f"the repository uses {fmt} object ids")
    if cfg.get("core.autocrlf", "false") not in ("false", "0", "no", "off", ""):
        raise Unusable("core.autocrlf converts line endings")
    if cfg.get("core.bare", "false") == "true":
        raise Unusable("a bare repository has no work tree index")
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    files = [os.path.join(gitdir, b"info", b"attributes"), os.path.join(common, b"info", b"attributes")]
    if home:
        files.append(os.fsencode(os.path.join(xdg, "git", "attributes")))
    if cfg.get("core.attributesfile"):
        files.append(os.fsencode(os.path.expanduser(cfg["core.attributesfile"])))
    texts = list(attr_blobs)
    for f in files:
        try:
            with open(f, "rb") as fh:
                texts.append(fh.read(1 << 20))
        except OSError:
            pass
    for text in texts:
        for line in text.splitlines():
            tokens = line.split()
            if not tokens or tokens[0].startswith(b"#"):
                continue
            for tok in tokens[1:]:
                if tok[:1] in (b"-", b"!"):
                    continue             # unset or unspecified: no conversion
                if tok.split(b"=", 1)[0] in _CONVERTING:
                    raise Unusable(f"a .gitattributes rule converts content ({os.fsdecode(line.strip())[:80]})")


def _varint(data: bytes, p: int) -> tuple[int, int]:
    c = data[p]
    p += 1
    val = c & 0x7F
    while c & 0x80:
        val += 1
        c = data[p]
        p += 1
        val = (val << 7) + (c & 0x7F)
    return val, p


_HEAD = struct.Struct(">24xI8xI20sH")        # an entry's mode, size (32-bit), blob id, flags
_PLAIN = frozenset((MODE_FILE, MODE_EXEC, MODE_LINK))


def parse_index(data: bytes, *, checked: bool = False) -> tuple[dict[bytes, tuple[bytes, int, int, bytes]],
                                                                dict[bytes, tuple], dict[bytes, str]]:
    """(path -> (blob id, mode, size as stored, the entry's 40 bytes of stat fields) for every
    plain stage-0 file or link entry, the valid nodes of the cache tree: see
    `parse_cache_tree`, path -> why for every entry left out: "assume-unchanged", "conflict",
    "intent-to-add", "skip-worktree", "gitlink", "no blob").

    A path is as long as its flags say (libgit2's and git's reading), found by its NUL only
    when it is too long for them.  The stat fields stay bytes until `Known.vouch` compares
    them: a first snapshot of a million entries never unpacks them.  Versions 2, 3 and 4; a
    checksum mismatch (unless `checked`: libgit2 checks the same bytes), an unknown required
    extension (a split index) or anything malformed raises Unusable."""
    if len(data) < 32 or data[:4] != b"DIRC":
        raise Unusable("not a git index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise Unusable(f"index version {version}")
    body, trailer = memoryview(data)[:-20], data[-20:]
    if not checked and trailer != b"\0" * 20 and hashlib.sha1(body).digest() != trailer:
        raise Unusable("the index checksum does not match")
    out: dict[bytes, tuple[bytes, int, int, bytes]] = {}
    odd: dict[bytes, str] = {}
    head, plain, zero, v4 = _HEAD.unpack_from, _PLAIN, ZERO, version == 4
    off, prev = 12, b""
    try:
        for _ in range(count):
            mode, size, sha, flags = head(data, off)
            n = flags & 0xFFF
            if v4 or flags & 0xF000 or n == 0xFFF:     # extended or odd flags, a long name
                name, end, why = _unusual_entry(data, off, version, flags, mode, sha, prev)
                prev = name
                if why is None:
                    out[name] = (sha, mode, size, data[off:off + 40])
                else:
                    odd[name] = why
                off = end
                continue
            # the usual entry (versions 2 and 3), in as few steps as can be: a million of them
            name = data[off + 62:off + 62 + n]
            if data[off + 62 + n] or b"\0" in name:
                raise Unusable("malformed index")      # the name is not as long as its flags say
            if mode in plain and sha != zero:
                out[name] = (sha, mode, size, data[off:off + 40])
            else:
                odd[name] = _why_odd(flags, 0, mode)
            off += (70 + n) & ~7
    except (struct.error, ValueError, IndexError):
        raise Unusable("malformed index") from None
    if off > len(body):
        raise Unusable("truncated index")
    p, trees = off, {}
    while p + 8 <= len(body):
        sig = data[p:p + 4]
        size = struct.unpack_from(">I", data, p + 4)[0]
        if sig == b"TREE":
            try:
                trees = parse_cache_tree(data[p + 8:p + 8 + size])
            except Unusable:
                trees = {}               # optional: every tree is built instead
                odd[b""] = "malformed cache tree"
        elif not 0x41 <= sig[0] <= 0x5A:
            raise Unusable(f"index extension {sig!r} is required and not understood")
        p += 8 + size
    return out, trees, odd


def _unusual_entry(data: bytes, off: int, version: int, flags: int, mode: int, sha: bytes,
                   prev: bytes) -> tuple[bytes, int, str | None]:
    """(path, where the next entry starts, why it is left out or None) of an entry with
    extended flags, a name of 0xFFF bytes or more, or in a version-4 index."""
    p, xflags = off + 62, 0
    if flags & 0x4000:
        if version < 3:
            raise Unusable("extended flags in a version 2 index")
        xflags = struct.unpack_from(">H", data, p)[0]
        p += 2
    if version == 4:
        strip, p = _varint(data, p)
        nul = data.index(b"\0", p)
        if strip > len(prev):
            raise Unusable("malformed path compression")
        name, end = prev[:len(prev) - strip] + data[p:nul], nul + 1
    else:
        n = flags & 0xFFF
        if n == 0xFFF:
            n = data.index(b"\0", p) - p
        name, end = data[p:p + n], off + ((p - off + n + 8) & ~7)
        if len(name) != n or data[p + n] or b"\0" in name:
            raise Unusable("malformed index")
    if flags & (ASSUME_VALID | STAGE) or xflags & (SKIP_WORKTREE | INTENT_TO_ADD) \
            or mode not in _PLAIN or sha == ZERO:
        return name, end, _why_odd(flags, xflags, mode)
    return name, end, None


def _why_odd(flags: int, xflags: int, mode: int) -> str:
    if flags & ASSUME_VALID:
        return "assume-unchanged"           # `update-index --assume-unchanged`, core.ignoreStat
    if (flags >> 12) & 3:
        return "conflict"
    if xflags & INTENT_TO_ADD:
        return "intent-to-add"
    if xflags & SKIP_WORKTREE:
        return "skip-worktree"
    return "gitlink" if mode == MODE_GITLINK else "no blob"


def parse_cache_tree(ext: bytes) -> dict[bytes, tuple[int, bytes, list[bytes]]]:
    """The TREE extension: directory (b"" is the root) -> (entries below it, tree id, names
    of its subdirectories) for every node git marked valid.  Nodes come in pre-order, each
    with its count of subtrees; anything malformed raises Unusable."""
    out: dict[bytes, tuple[int, bytes, list[bytes]]] = {}
    stack: list[list] = []                  # [path, subtrees still to come, names seen]
    pos, end, seen_root = 0, len(ext), False
    try:
        while pos < end:
            nul = ext.index(b"\0", pos)
            name = ext[pos:nul]
            lf = ext.index(b"\n", nul)
            count_s, nsub_s = ext[nul + 1:lf].split(b" ")
            count, nsub = int(count_s), int(nsub_s)
            pos = lf + 1
            if count < -1 or nsub < 0:
                raise ValueError("negative count")
            while stack and stack[-1][1] == 0:
                stack.pop()
            if stack:
                parent = stack[-1]
                if not name or b"/" in name:
                    raise ValueError("bad directory name")
                parent[1] -= 1
                parent[2].append(name)
                path = parent[0] + b"/" + name if parent[0] else name
            elif not seen_root and name == b"":
                path, seen_root = b"", True
            else:
                raise ValueError("a second root")
            node: list = [path, nsub, []]
            stack.append(node)
            if count >= 0:
                sha = ext[pos:pos + 20]
                if len(sha) != 20:
                    raise ValueError("truncated tree id")
                pos += 20
                out[path] = (count, sha, node[2])
    except ValueError as exc:
        raise Unusable(f"malformed cache tree ({exc})") from None
    return out


def read_idx(path: bytes) -> set[bytes]:
    """The object ids of a version-2 pack index (the `.idx` beside a pack)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < 8 + 1024 + 40 or data[:8] != b"\xfftOc\x00\x00\x00\x02":
        raise Unusable(f"{os.fsdecode(path)}: not a version 2 pack index")
    n = struct.unpack_from(">I", data, 8 + 1020)[0]
    start = 8 + 1024
    if len(data) < start + n * 28 + 40:
        raise Unusable(f"{os.fsdecode(path)}: truncated pack index")
    table = data[start:start + 20 * n]
    return {table[i:i + 20] for i in range(0, len(table), 20)}


def _pack_checksum_matches(pack: bytes, idx: bytes) -> bool:
    """The pack's trailing checksum is the one its index names (a cheap torn-copy check)."""
    try:
        with open(pack, "rb") as fh:
            fh.seek(-20, os.SEEK_END)
            tail = fh.read(20)
            fh.seek(0)
            head = fh.read(4)
        with open(idx, "rb") as fh:
            fh.seek(-40, os.SEEK_END)
            named = fh.read(20)
    except OSError:
        return False
    return head == b"PACK" and tail == named


def _clone_file(src: bytes, dst: bytes) -> None:
    """Hard link, else a reflink copy; never a byte-by-byte copy (that would not be instant)."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        raise
    except OSError:
        pass
    fd_in = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
        try:
            fcntl.ioctl(fd_out, FICLONE, fd_in)
        except OSError:
            os.close(fd_out)
            os.unlink(dst)
            raise
        os.close(fd_out)
    finally:
        os.close(fd_in)


@dataclass
class RawIndex:
    """The user's index file as read once (bytes and mtime from the same open file)."""
    gitdir: bytes
    common: bytes
    data: bytes
    mtime_ns: int


def read_known(root: bytes) -> Known:
    """Parse the user's index and check that nothing converts content; raises Unusable."""
    return known_from(read_index(root), root)


def read_index(root: bytes) -> RawIndex:
    """The user's index file, read whole; raises Unusable."""
    gitdir = find_gitdir(root)
    if gitdir is None:
        raise Unusable("no git repository")
    common = common_dir(gitdir)
    index_path = os.path.join(gitdir, b"index")
    try:
        fd = os.open(index_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise Unusable(f"no readable index: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_INDEX_BYTES:
            raise Unusable("the index is not a regular file of sane size")
        chunks = []
        while chunk := os.read(fd, 1 << 24):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    return RawIndex(gitdir, common, data, st.st_mtime_ns)


def known_from(raw: RawIndex, root: bytes, *, checked: bool = False) -> Known:
    """What `raw` vouches for, once nothing converts content; raises Unusable.  `checked`:
    libgit2 verifies the same bytes' checksum (an adopted index), so it is not hashed twice."""
    cfg = _git_config_values(_config_paths(raw.common))
    entries, trees, odd = parse_index(raw.data, checked=checked)
    named = [p for p in entries if p.endswith(_RULE_FILES)]         # one pass over a million paths
    attrs = []
    for path in named:
        if path.rpartition(b"/")[2] == b".gitattributes":
            try:
                with open(os.path.join(root, path), "rb") as fh:
                    attrs.append(fh.read(1 << 20))
            except OSError:
                raise Unusable("a .gitattributes file cannot be read") from None
    _refuse_converting(raw.common, raw.gitdir, cfg, attrs)
    return Known(gitdir=raw.gitdir, entries=entries, index_mtime_ns=raw.mtime_ns,
                 pack_dir=os.path.join(raw.common, b"objects", b"pack"), trees=trees, odd=odd,
                 common=raw.common, ignore_files={p for p in named if p.rpartition(b"/")[2] == b".gitignore"})


def link_packs(known: Known, wanted: set[bytes], store_pack_dir: str, durable: bool) -> dict[str, set[bytes]]:
    """Make the user's packs that hold any of `wanted` part of the store (hard link or
    reflink, index after pack).  Returns pack stem -> the object ids it holds."""
    linked: dict[str, set[bytes]] = {}
    try:
        names = sorted(os.listdir(known.pack_dir))
    except OSError:
        return linked
    have = set(names)
    dst_dir = os.fsencode(store_pack_dir)
    for name in names:
        if not (name.startswith(b"pack-") and name.endswith(b".idx")):
            continue
        stem = name[:-4]
        if stem + b".pack" not in have or stem + b".mtimes" in have:
            continue                 # no pack, or a cruft pack (unreachable objects only)
        src_idx = os.path.join(known.pack_dir, name)
        src_pack = os.path.join(known.pack_dir, stem + b".pack")
        try:
            ids = read_idx(src_idx)
        except (OSError, Unusable):
            continue
        if ids.isdisjoint(wanted) or not _pack_checksum_matches(src_pack, src_idx):
            continue
        dst_pack = os.path.join(dst_dir, stem + b".pack")
        dst_idx = os.path.join(dst_dir, name)
        if os.path.exists(dst_idx):
            linked[os.fsdecode(stem)] = ids      # already ours (the same pack, by name)
            continue
        try:
            if not os.path.exists(dst_pack):
                _clone_file(src_pack, dst_pack)
            _clone_file(src_idx, dst_idx)        # last: only now does libgit2 see the pack
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise
            for p in (dst_pack,):
                try:
                    if not os.path.exists(dst_idx):
                        os.unlink(p)
                except OSError:
                    pass
            continue
        if durable:
            for p in (dst_pack, dst_idx):
                fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        linked[os.fsdecode(stem)] = ids
    return linked


def copy_loose(known: Known, wanted: set[bytes], objects_dir: str) -> set[bytes]:
    """Copy into the store the objects of `wanted` that the user's repository holds loose
    (what `git add` and `git commit` wrote since its last gc), each checked to inflate to an
    object of its id; returns the ids copied."""
    src, got = os.path.join(known.common, b"objects"), set()
    for oid in wanted:
        hx = oid.hex()
        try:
            fd = os.open(os.path.join(src, hx[:2].encode(), hx[2:].encode()),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            chunks, h, z = [], hashlib.sha1(), zlib.decompressobj()
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
                h.update(z.decompress(chunk, 1 << 24))
                while z.unconsumed_tail:            # inflated a piece at a time, never whole
                    h.update(z.decompress(z.unconsumed_tail, 1 << 24))
            h.update(z.flush())
        except (OSError, zlib.error):
            continue
        finally:
            os.close(fd)
        if h.digest() != oid or not z.eof:
            continue
        loose.put(objects_dir, hx, b"".join(chunks))
        got.add(oid)
    return got
