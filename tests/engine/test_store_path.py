"""The store path is configuration, so it may name the wrong folder: someone's repository or
folder is refused before anything is written to it (a new user pointed `--store` at a
project's `.git`, which was turned into a bare store; a refused folder was left with
`chronos/init.lock` in it and its mode changed)."""
from __future__ import annotations

import os
import shutil
import stat

import pygit2
import pytest

from chronos_git.engine.config import EngineConfig
from chronos_git.engine.store import Store, StoreError
from support.helpers import git, tree_fingerprint


def _project(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "a.txt").write_text("mine\n")
    git("init", "-q", cwd=work)
    git("add", "a.txt", cwd=work)
    git("-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "one", cwd=work)
    return work


def _clean(work) -> bool:
    return git("status", "--porcelain", cwd=work).stdout == ""


def _refused_untouched(path, match):
    planted = (path / "chronos").exists()
    before = (tree_fingerprint(path, mtimes=True), stat.S_IMODE(os.stat(path).st_mode))
    with pytest.raises(StoreError, match=match):
        Store.open(path)
    assert (tree_fingerprint(path, mtimes=True), stat.S_IMODE(os.stat(path).st_mode)) == before
    assert (path / "chronos").exists() == planted


def test_a_projects_git_dir_is_never_taken_over(tmp_path):
    work = _project(tmp_path)
    _refused_untouched(work / ".git", "git repository that chronos-git did not create")
    assert _clean(work)                      # still a work tree's repository, with nothing new in it


def test_a_bare_repository_is_never_taken_over(tmp_path):
    bare = tmp_path / "remote.git"
    pygit2.init_repository(str(bare), bare=True).create_blob(b"someone's data")
    _refused_untouched(bare, "git repository that chronos-git did not create")


def test_a_remote_stores_push_to_is_never_taken_over(tmp_path):
    """New-user trial: `--store` naming a bare remote that `push` had filled (refs/chronos/hosts/...)
    was opened as a store: its mode changed to 0700, chronos/ and snapshot refs added."""
    bare = tmp_path / "shared.git"
    repo = pygit2.init_repository(str(bare), bare=True)
    blob = repo.create_blob(b"a host's journal")
    tree = repo.TreeBuilder()
    tree.insert("x", blob, pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("h", "h@localhost")
    commit = repo.create_commit(None, sig, sig, "event", tree.write(), [])
    repo.references.create("refs/chronos/hosts/laptop-1a2b/journal", commit)
    os.chmod(bare, 0o755)
    _refused_untouched(bare, "git repository that chronos-git did not create")
    git(f"--git-dir={bare}", "pack-refs", "--all")               # packed the same way
    _refused_untouched(bare, "git repository that chronos-git did not create")


def test_a_refused_folder_is_left_as_it_was(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "important.txt").write_text("keep\n")
    _refused_untouched(folder, "not empty and is not a chronos-git store")
    work = _project(tmp_path)                      # a work tree: refused, no `?? chronos/` in it
    _refused_untouched(work, "not empty and is not a chronos-git store")
    assert _clean(work)


def test_an_empty_folder_and_an_existing_store_still_open(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Store.open(empty).repo().is_bare
    Store.forget_instances()
    assert Store.open(empty).repo().is_bare          # ours now: opened again, not refused


def test_the_cli_refuses_a_repository_as_its_store(cli, ws, tmp_path):
    work = _project(tmp_path)
    before = tree_fingerprint(work / ".git", mtimes=True)
    r = cli("--store", work / ".git", "snapshot", "--workspace", ws, "--json")
    assert r.rc == 1 and "Traceback" not in r.stderr + r.stdout
    assert r.json["status"] == "error" and "did not create" in r.json["error"] and "--store" in r.json["error"]
    text = cli("--store", work / ".git", "snapshot", "--workspace", ws)
    assert text.rc == 1 and "Traceback" not in text.stderr and "did not create" in text.stderr + text.stdout
    assert tree_fingerprint(work / ".git", mtimes=True) == before and _clean(work)
    r = cli("snapshot", "--workspace", ws, "--json")           # the configured store is unaffected
    assert r.rc == 0 and r.json["created"] is True


@pytest.mark.process
def test_two_processes_creating_the_same_store_never_refuse_each_other(tmp_path):
    """Review: the ownership check ran before the init lock, so a folder another process was
    creating the store in (HEAD.lock, config.lock, probe files) read as someone's."""
    refused = 0
    for i in range(25):
        root = tmp_path / f"s{i}" / "store"
        r, w = os.pipe()
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:                                   # pragma: no cover (the child)
                os.close(w)
                os.read(r, 1)
                try:
                    Store(root, EngineConfig())
                    os._exit(0)
                except BaseException:
                    os._exit(3)
            pids.append(pid)
        os.close(r)
        os.close(w)                                        # both start now
        for pid in pids:
            refused += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
    assert refused == 0


def test_a_store_cut_while_libgit2_wrote_its_config_opens(tmp_path):
    root = tmp_path / "store"
    pygit2.init_repository(str(root), bare=True)
    (root / "HEAD").unlink()                       # libgit2 writes HEAD last
    os.rename(root / "config", root / "config.lock")
    (root / "chronos").mkdir()
    assert Store.open(root).repo().is_bare and not (root / "config.lock").exists()


def test_a_store_whose_chronos_folder_was_deleted_is_still_ours(tmp_path):
    from chronos_git.engine.checkpoint import CheckpointMeta
    root, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    first = Store.open(root).workspace(ws).snapshot(CheckpointMeta(description="one")).checkpoint.id
    Store.forget_instances()
    shutil.rmtree(root / "chronos")                # locks and scratch only
    store = Store.open(root)
    assert (root / "chronos").is_dir() and store.workspace(ws).resolve("latest").id == first


def test_a_bare_repository_with_a_planted_chronos_folder_is_still_refused(tmp_path):
    bare = tmp_path / "shared.git"
    pygit2.init_repository(str(bare), bare=True).create_blob(b"someone's data")
    (bare / "chronos").mkdir()
    _refused_untouched(bare, "git repository that chronos-git did not create")
