"""engine/ignore.Candidates may over-approximate but never miss: every path libgit2 ignores,
in random trees of random `.gitignore` files, is a candidate (a file by `among`, a folder by
`could`), whichever order the folders are first asked in (each is judged from its parent's)."""
from __future__ import annotations

import os
import random

import pygit2
import pytest

from chronos_git.engine.ignore import Candidates, is_ignored

NAMES = [b"a", b"b", b"build", b"Foo", b"x.o", b"keep", b"deep", b"caf\xe9", b"n[1]"]
RULES = [b"*.o", b"build/", b"b", b"/a", b"x*", b"F?o", b"a/b", b"[bc]", b"**/deep", b"!keep",
         b"caf\xe9", b"n\\[1\\]", b"deep/*", b"/build/a", b"*", b"!*.o", b"foo"]


def _tree(root: bytes, rng: random.Random) -> tuple[list[bytes], list[bytes], dict[bytes, bytes]]:
    dirs, files, rules = [b""], [], {}
    for _ in range(40):
        parent = rng.choice(dirs)
        name = rng.choice(NAMES)
        rel = parent + b"/" + name if parent else name
        if rel in dirs or rel in files:
            continue
        if rng.random() < 0.45 and rel.count(b"/") < 5:
            os.mkdir(os.path.join(root, rel))
            dirs.append(rel)
        else:
            with open(os.path.join(root, rel), "wb") as fh:
                fh.write(b"x")
            files.append(rel)
    for folder in rng.sample(dirs, k=min(4, len(dirs))):
        text = b"\n".join(rng.sample(RULES, k=rng.randint(1, 4))) + b"\n"
        path = os.path.join(root, folder, b".gitignore")
        with open(path, "wb") as fh:
            fh.write(text)
        rules[folder] = path
    return dirs[1:], files, rules


@pytest.mark.parametrize("seed", range(12))
def test_every_path_libgit2_ignores_is_a_candidate(tmp_path, seed):
    rng = random.Random(seed)
    root = os.fsencode(str(tmp_path / "ws"))
    os.mkdir(root)
    pygit2.init_repository(os.fsdecode(root))
    repo = pygit2.Repository(os.fsdecode(root))
    dirs, files, rules = _tree(root, rng)
    found = Candidates()
    for folder, path in rules.items():
        found.add(folder, [path])
    order = dirs[:]
    rng.shuffle(order)                         # a deep folder may be asked before its parent
    missed = [d for d in order if is_ignored(repo, os.fsdecode(d) + "/") and not found.could(d)]
    assert not missed, (missed, rules)
    ignored_files = [f for f in files if is_ignored(repo, os.fsdecode(f))]
    assert set(ignored_files) <= set(found.among(files)), (ignored_files, rules)
