"""The one walk of a work tree (engine/worktree.py): what it lists, what it reports, what it
passes over.  The scan's omissions, a refresh of a whole directory and the watcher's watches
all walk with it, so these rules hold for each of them."""
from __future__ import annotations

import errno
import os

import pygit2
import pytest

from chronos_git.engine import watcher as watcher_mod, worktree
from chronos_git.engine.scan import Scanner, ScanReport, find_omissions, update_paths
from chronos_git.engine.worktree import GIT, ignored_dirs, in_git_dir, is_nested, nested_ancestor, walk


def _tree(tmp_path) -> tuple[bytes, pygit2.Repository]:
    """A work tree with every kind of entry the rules speak of; its repository has the
    workspace as work tree (the ignore rules are its `.gitignore`)."""
    root = tmp_path / "ws"
    repo = pygit2.init_repository(str(root))               # root/.git: the workspace's own
    (root / ".gitignore").write_text("build/\n*.skip/\n")
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("a")
    (root / "src" / "deep" / "b.txt").write_text("b")
    (root / "build" / "out").mkdir(parents=True)             # ignored: never listed
    (root / "build" / "out" / "x.o").write_text("x")
    pygit2.init_repository(str(root / "vendor"))             # nested: a .git directory
    (root / "vendor" / "v.txt").write_text("v")
    (root / "wt").mkdir()                                    # nested: a .git file (a worktree)
    (root / "wt" / ".git").write_text("gitdir: /nowhere\n")
    (root / "wt" / "w.txt").write_text("w")
    (root / "dangling").mkdir()                              # nested: a dangling .git link
    os.symlink("/nowhere", root / "dangling" / ".git")
    os.symlink("src", root / "to-src")                       # a link to a directory: an entry
    os.mkfifo(root / "src" / "pipe")
    odd = os.fsencode(str(root)) + b"/caf\xe9"               # not UTF-8
    os.mkdir(odd)
    with open(odd + b"/\xff.txt", "wb") as fh:
        fh.write(b"odd")
    os.mkdir(os.fsencode(str(root)) + b"/\xfe.skip")         # not UTF-8, and ignored
    return os.fsencode(str(root)), repo


def _by_dir(root: bytes, **kw) -> dict[bytes, worktree.Listing]:
    return {d.rel: d for d in walk(root, **kw)}


def test_the_walks_rules(tmp_path):
    root, repo = _tree(tmp_path)
    seen = _by_dir(root, prune=ignored_dirs(repo))
    # listed: the root, its plain directories (a non-UTF-8 name as it is); never a .git, an
    # ignored directory (a non-UTF-8 one too), a nested repository or a link's target
    assert sorted(seen) == [b"", b"caf\xe9", b"src", b"src/deep"]
    top = seen[b""]
    assert sorted(top.nested) == [b"dangling", b"vendor", b"wt"]
    assert GIT not in [e.name for e in top.entries]
    assert sorted(e.name for e in top.files) == [b".gitignore", b"to-src"]   # the link, not followed
    assert top.gitignore and not seen[b"src"].gitignore
    assert sorted(top.dirs) == [b"caf\xe9", b"src"]
    assert [e.name for e in seen[b"src"].specials] == [b"pipe"]
    assert [e.name for e in seen[b"caf\xe9"].files] == [b"\xff.txt"]
    assert not any(d.error or d.errors or d.too_deep for d in seen.values())


def test_a_git_file_at_the_top_is_not_part_of_the_work_tree(tmp_path):
    root = tmp_path / "linked"
    root.mkdir()
    (root / ".git").write_text("gitdir: /elsewhere\n")     # a linked worktree or a submodule
    (root / "f.txt").write_text("f")
    (listing,) = walk(os.fsencode(str(root)))
    assert [e.name for e in listing.entries] == [b"f.txt"]


def test_without_prune_an_ignored_directory_is_listed_and_the_top_always_is(tmp_path):
    root, _repo = _tree(tmp_path)
    assert b"build/out" in _by_dir(root)
    # the top is the caller's choice: listed even when it is nested (its .git is left out)
    (listing,) = [d for d in walk(root, b"vendor") if d.rel == b"vendor"]
    assert [e.name for e in listing.entries] == [b"v.txt"]


def test_a_directory_too_deep_to_name_is_reported_not_listed(tmp_path):
    root, repo = _tree(tmp_path)
    limit = len(root) + 1 + len(b"src/deep") + 1      # "src" fits, "src/deep" reaches it
    seen = _by_dir(root, prune=ignored_dirs(repo), max_path=limit)
    assert seen[b"src"].too_deep == [b"src/deep"] and b"src/deep" not in seen
    assert b"src/deep" in _by_dir(root, prune=ignored_dirs(repo), max_path=None)   # the watcher's way


def test_an_unreadable_directory_is_reported_with_its_error(tmp_path, monkeypatch):
    root, repo = _tree(tmp_path)
    real = os.scandir

    def scandir(path):
        if path.endswith(b"/src"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path)
    monkeypatch.setattr(os, "scandir", scandir)
    seen = _by_dir(root, prune=ignored_dirs(repo))
    assert isinstance(seen[b"src"].error, PermissionError)
    assert seen[b"src"].entries == [] and b"src/deep" not in seen
    report = ScanReport()
    find_omissions(repo, root, report)
    assert {"path": "src", "reason": "unreadable: Permission denied"} in report.skipped


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 directory")
def test_a_mode_000_directory_is_reported_by_the_scan(tmp_path):
    root, repo = _tree(tmp_path)
    os.chmod(root + b"/src/deep", 0)
    try:
        report = ScanReport()
        find_omissions(repo, root, report)
    finally:
        os.chmod(root + b"/src/deep", 0o755)
    assert {"path": "src/deep", "reason": "unreadable: Permission denied"} in report.skipped


def test_a_directory_that_vanishes_before_it_is_listed(tmp_path):
    root, repo = _tree(tmp_path)
    it = walk(root, prune=ignored_dirs(repo))
    top = next(it)                          # yielded before its subdirectories are listed
    assert b"src" in top.dirs
    os.rename(root + b"/src", root + b"/moved")
    rest = {d.rel: d for d in it}
    assert isinstance(rest[b"src"].error, FileNotFoundError) and b"src/deep" not in rest


def test_the_scan_and_a_refresh_report_what_the_walk_found(tmp_path):
    root, repo = _tree(tmp_path)
    report = ScanReport()
    find_omissions(repo, root, report)
    assert report.skipped == [{"path": "src/pipe", "reason": "special_file: fifo"}]
    assert report.ignore_files == [".gitignore"]
    # a whole-directory refresh (a declared directory) meets the nested repository below it
    (tmp_path / "ws" / "lib").mkdir()
    os.rename(root + b"/vendor", root + b"/lib/vendor")
    scanner = Scanner(root, 0, None)
    update_paths(repo, repo.index, scanner, ["lib"])
    assert scanner.report.nested_repos == ["lib/vendor"]
    assert "lib/vendor/v.txt" not in repo.index


def test_path_rules(tmp_path):
    root, _repo = _tree(tmp_path)
    assert is_nested(root + b"/wt") and is_nested(root + b"/dangling") and not is_nested(root + b"/src")
    assert nested_ancestor(root, ["vendor", "v.txt"]) == "vendor"
    assert nested_ancestor(root, ["src", "deep", "b.txt"]) is None
    for rel in (".git", "a/.git", ".git/config", b"a/.git/HEAD"):
        assert in_git_dir(rel)
    for rel in (".gitignore", "a.git/x", "x/.github", b".gits"):
        assert not in_git_dir(rel)


@pytest.mark.skipif(not watcher_mod.available(), reason="inotify not available")
def test_the_watcher_watches_what_the_walk_lists(tmp_path):
    root, repo = _tree(tmp_path)
    w = watcher_mod.Watcher(root, ignored_dirs(repo)).start()
    try:
        assert w.ready(30)
        assert sorted(w._wd.values()) == [b"", b"caf\xe9", b"src", b"src/deep"]
    finally:
        w.stop()


def test_pruning_by_candidate_rules_lists_exactly_what_asking_libgit2_of_every_directory_does(tmp_path):
    root = tmp_path / "ws"
    repo = pygit2.init_repository(str(root))
    (root / ".gitignore").write_text("/build/\nout*/\nLogs/\nfoo/**\n\\#lit/\nkeep/*\n!keep/this/\n")
    (root / "a").mkdir()
    (root / "a" / ".gitignore").write_text("gen-[0-9]/\n")      # a bracket: anything below `a` is a candidate
    (root / ".git" / "info" / "exclude").write_text("cache/\n")
    excludes = tmp_path / "global-ignore"
    excludes.write_text("tmp?/\n")
    repo.config["core.excludesFile"] = str(excludes)
    dirs = ["build/x", "src/build/y", "out1/z", "src/outer/z", "a/gen-3/q", "a/gen-x/q", "logs/l", "Logs/l",
            "foo/bar/baz", "bar/foo", "#lit/x", "keep/this/x", "keep/that/x", "cache/c", "src/cache/c",
            "tmp1/t", "tmp12/t", "plain/deep/er", "sub/inner/d", "sub/inner/other/d", "caf\udce9/\udcff",
            *(f"many/d{i}/e{i}" for i in range(30))]                # what no rule could ignore
    for d in dirs:
        os.makedirs(os.path.join(os.fsencode(root), os.fsencode(d)), exist_ok=True)
    (root / "sub" / ".gitignore").write_text("inner/other/\n")      # a rule from below the top
    (root / "sub" / "inner" / ".gitignore").write_text("d\n")
    with open(os.path.join(os.fsencode(root), b"caf\xe9", b".gitignore"), "wb") as fh:
        fh.write(b"\xff/\n")
    asked = []

    def every(rel):
        asked.append(rel)
        return worktree.is_ignored(repo, rel + "/")
    plain = sorted(d.rel for d in walk(os.fsencode(root), prune=every))
    fewer = worktree.IgnoredDirs(repo)
    calls = []
    real = worktree.is_ignored
    try:
        worktree.is_ignored = lambda r, rel: calls.append(rel) or real(r, rel)
        by_candidates = sorted(d.rel for d in walk(os.fsencode(root), prune=fewer))
    finally:
        worktree.is_ignored = real
    assert by_candidates == plain
    assert b"build" not in plain and b"src/build" in plain and b"sub/inner/other" not in plain   # the rules bit
    assert len(calls) < len(asked) / 2                        # libgit2 asked about candidates only
