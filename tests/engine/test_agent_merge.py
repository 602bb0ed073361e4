"""Agent-only restore and revert-one-call (engine/agent_merge.py) on a real repository:
the agent's changes (inside segments) are undone hunk by hunk, everything changed
outside them is kept, overlaps are conflicts that leave the file alone."""
from __future__ import annotations

import os
import random

import pygit2
import pytest

from chronos_git.engine.agent_merge import Segment, describe, result_tree, undo_segments
from chronos_git.engine.tree_edit import Trees

BLOB, EXEC, LINK = pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE, pygit2.GIT_FILEMODE_LINK


@pytest.fixture
def repo(tmp_path):
    return pygit2.init_repository(str(tmp_path / "store"), bare=True)


def tree(repo, files: dict) -> pygit2.Oid:
    """A tree from {path (str or bytes): content bytes or (content, mode)}."""
    idx = pygit2.Index()
    for path, v in files.items():
        data, mode = v if isinstance(v, tuple) else (v, BLOB)
        name = os.fsdecode(path) if isinstance(path, bytes) else path
        idx.add(pygit2.IndexEntry(name, repo.create_blob(data), mode))
    return idx.write_tree(repo)


def files_of(repo, tree_id) -> dict:
    """{path bytes: (content, mode)} of a tree, byte-exact."""
    idx = pygit2.Index()
    idx.read_tree(repo[tree_id])
    return {os.fsencode(e.path): (repo[e.id].read_raw(), int(e.mode)) for e in idx}


def norm(files: dict) -> dict:
    return {(os.fsencode(p) if isinstance(p, str) else p): (v if isinstance(v, tuple) else (v, BLOB))
            for p, v in files.items()}


def lines(n: int, tag: str = "l") -> list[bytes]:
    return [f"{tag} {i}\n".encode() for i in range(1, n + 1)]


def text(ls: list[bytes]) -> bytes:
    return b"".join(ls)


def edit(ls: list[bytes], at: dict[int, bytes]) -> bytes:
    """Lines with 1-based line numbers replaced."""
    out = list(ls)
    for n, new in at.items():
        out[n - 1] = new
    return text(out)


class History:
    """Trees of a history: agent segments (before/after) with outside edits between."""

    def __init__(self, repo, base: dict):
        self.repo, self.files, self.segments = repo, dict(base), []
        self.base = tree(repo, self.files)

    def agent(self, label: str, change: dict, ambiguous: bool = False) -> Segment:
        before = tree(self.repo, self.files)
        self._apply(change)
        seg = Segment(before, tree(self.repo, self.files), label, ambiguous)
        self.segments.append(seg)
        return seg

    def person(self, change: dict) -> None:
        self._apply(change)

    def _apply(self, change: dict) -> None:
        for p, v in change.items():
            if v is None:
                self.files.pop(p, None)
            else:
                self.files[p] = v

    @property
    def current(self) -> pygit2.Oid:
        return tree(self.repo, self.files)


def by_path(plan) -> dict:
    return {s.path: s for s in plan.steps}


def test_person_edit_in_other_hunk_is_kept(repo):
    base = lines(30)
    h = History(repo, {"a.txt": text(base)})
    h.agent("op1", {"a.txt": edit(base, {5: b"agent\n"})})
    h.person({"a.txt": edit(base, {5: b"agent\n", 25: b"person\n"})})
    plan = undo_segments(repo, h.current, h.segments)
    assert plan.clean
    step = by_path(plan)["a.txt"]
    assert step.action == "write" and step.segments == ["op1"]
    assert files_of(repo, plan.tree) == norm({"a.txt": edit(base, {25: b"person\n"})})
    assert result_tree(repo, h.current, plan) == plan.tree


def test_same_hunk_is_a_conflict_left_untouched(repo):
    base = lines(30)
    h = History(repo, {"a.txt": text(base), "b.txt": b"b\n"})
    h.agent("op1", {"a.txt": edit(base, {10: b"agent 10\n", 11: b"agent 11\n", 12: b"agent 12\n"}),
                    "b.txt": b"agent b\n"})
    now = edit(base, {10: b"agent 10\n", 11: b"person 11\n", 12: b"person 12\n", 13: b"person 13\n"})
    h.person({"a.txt": now})
    plan = undo_segments(repo, h.current, h.segments)
    step = by_path(plan)["a.txt"]
    assert step.action == "conflict" and not step.markers and step.blob is None
    assert "lines 10-12" in step.agent and "lines 11-13" in step.person, (step.agent, step.person)
    assert "conflict" in describe(step)
    assert by_path(plan)["b.txt"].action == "write"               # the other file is still reverted
    assert files_of(repo, plan.tree) == norm({"a.txt": now, "b.txt": b"b\n"})

    marked = undo_segments(repo, h.current, h.segments, markers=True)
    step = by_path(marked)["a.txt"]
    assert step.action == "conflict" and step.markers
    data = files_of(repo, marked.tree)[b"a.txt"][0]
    assert b"<<<<<<< current\n" in data and b">>>>>>> before the agent's call\n" in data
    assert b"person 12\n" in data and b"l 12\n" in data
    assert result_tree(repo, h.current, marked) == marked.tree


def test_created_file_is_removed_unless_changed_afterwards(repo):
    h = History(repo, {"keep.txt": b"k\n"})
    h.agent("op1", {"new.txt": b"agent\n", "dir/deep.txt": b"deep\n", "edited.txt": b"agent\n"})
    h.person({"edited.txt": b"agent\nperson\n"})
    plan = undo_segments(repo, h.current, h.segments)
    steps = by_path(plan)
    assert steps["new.txt"].action == "delete" and steps["dir/deep.txt"].action == "delete"
    assert steps["edited.txt"].action == "conflict" and "created" in steps["edited.txt"].why
    assert files_of(repo, plan.tree) == norm({"keep.txt": b"k\n", "edited.txt": b"agent\nperson\n"})


def test_deleted_file_comes_back(repo):
    h = History(repo, {"gone.txt": (b"data\n", EXEC), "other.txt": b"o\n", "again.txt": b"a\n"})
    h.agent("op1", {"gone.txt": None, "again.txt": None})
    h.person({"again.txt": b"recreated differently\n"})
    plan = undo_segments(repo, h.current, h.segments)
    steps = by_path(plan)
    assert steps["gone.txt"].action == "create" and steps["gone.txt"].mode == EXEC
    assert steps["again.txt"].action == "conflict" and "deleted" in steps["again.txt"].why
    assert files_of(repo, plan.tree) == norm({"gone.txt": (b"data\n", EXEC), "other.txt": b"o\n",
                                              "again.txt": b"recreated differently\n"})


def test_binary_files(repo):
    bin0, bin1, bin2 = b"\0\1\2" * 100, b"\0\1\3" * 100, b"\0\1\4" * 100
    h = History(repo, {"both.bin": bin0, "agent.bin": bin0, "link": (b"target-a", LINK)})
    h.agent("op1", {"both.bin": bin1, "agent.bin": bin1, "link": (b"target-b", LINK)})
    h.person({"both.bin": bin2})
    for markers in (False, True):
        plan = undo_segments(repo, h.current, h.segments, markers=markers)
        steps = by_path(plan)
        assert steps["both.bin"].action == "conflict" and not steps["both.bin"].markers
        assert "binary" in steps["both.bin"].why
        assert steps["agent.bin"].action == "write" and steps["link"].action == "write"
        assert files_of(repo, plan.tree) == norm({"both.bin": bin2, "agent.bin": bin0, "link": (b"target-a", LINK)})


def test_symlink_changed_on_both_sides_is_a_conflict(repo):
    h = History(repo, {"link": (b"a", LINK)})
    h.agent("op1", {"link": (b"b", LINK)})
    h.person({"link": (b"c", LINK)})
    plan = undo_segments(repo, h.current, h.segments, markers=True)
    assert by_path(plan)["link"].action == "conflict" and not by_path(plan)["link"].markers
    assert files_of(repo, plan.tree) == norm({"link": (b"c", LINK)})


def test_non_utf8_names_and_content_are_byte_exact(repo):
    odd_dir, odd = b"d\xff", b"d\xff/caf\xe9.txt"
    base = [b"\xe9t\xe9 %d\r\n" % i for i in range(20)]              # latin-1 bytes, CRLF
    h = History(repo, {odd: text(base), b"gone-\xfe": b"\xff\xfe\n", b"plain.txt": b"p\n"})
    h.agent("op1", {odd: edit(base, {3: b"agent \xe0\r\n"}), b"gone-\xfe": None, b"new-\xfa": b"\x80\n"})
    h.person({odd: edit(base, {3: b"agent \xe0\r\n", 17: b"person \xf1\r\n"})})
    plan = undo_segments(repo, h.current, h.segments)
    assert plan.clean
    steps = {s.raw_path: s for s in plan.steps}
    assert steps[odd].action == "write" and steps[b"gone-\xfe"].action == "create"
    assert steps[b"new-\xfa"].action == "delete"
    assert os.fsencode(steps[odd].path).startswith(odd_dir)
    expected = {odd: text(base[:16] + [b"person \xf1\r\n"] + base[17:]), b"gone-\xfe": b"\xff\xfe\n",
                b"plain.txt": b"p\n"}
    assert files_of(repo, plan.tree) == norm(expected)
    assert result_tree(repo, h.current, plan) == plan.tree


def test_interleaved_segments_leave_exactly_the_persons_edits(repo):
    a, b = lines(40, "a"), lines(40, "b")
    h = History(repo, {"a.txt": text(a), "b.txt": text(b), "c.txt": b"c\n"})
    cur_a, cur_b = list(a), list(b)

    def put(ls, n, new):
        ls[n - 1] = new
        return text(ls)

    h.agent("op1", {"a.txt": put(cur_a, 2, b"agent1\n"), "new1.txt": b"n1\n"})
    h.person({"a.txt": put(cur_a, 10, b"person1\n"), "mine.txt": b"mine\n"})
    h.agent("op2", {"a.txt": put(cur_a, 20, b"agent2\n"), "b.txt": put(cur_b, 5, b"agent2\n"), "c.txt": None})
    h.person({"b.txt": put(cur_b, 30, b"person2\n")})
    h.agent("op3", {"a.txt": put(cur_a, 35, b"agent3\n"), "b.txt": put(cur_b, 15, b"agent3\n")})
    h.person({"a.txt": put(cur_a, 38, b"person3\n")})
    plan = undo_segments(repo, h.current, h.segments)
    assert plan.clean, [describe(s) for s in plan.conflicts]
    expected = {"a.txt": edit(a, {10: b"person1\n", 38: b"person3\n"}), "b.txt": edit(b, {30: b"person2\n"}),
                "c.txt": b"c\n", "mine.txt": b"mine\n"}
    assert plan.tree == tree(repo, expected)
    assert by_path(plan)["a.txt"].segments == ["op3", "op2", "op1"]


def test_ambiguous_segment_paths_are_conflicts(repo):
    base = lines(20)
    h = History(repo, {"a.txt": text(base), "b.txt": b"b\n"})
    h.agent("op1", {"a.txt": edit(base, {2: b"agent\n"})})
    h.agent("op2", {"b.txt": b"changed in a shell call with a process left running\n", "c.txt": b"c\n"},
            ambiguous=True)
    plan = undo_segments(repo, h.current, h.segments, markers=True)
    steps = by_path(plan)
    assert steps["a.txt"].action == "write"
    for p in ("b.txt", "c.txt"):
        assert steps[p].action == "conflict" and not steps[p].markers
        assert steps[p].why == "boundary unknown (segment op2)"
    assert files_of(repo, plan.tree) == norm({"a.txt": text(base), "b.txt": h.files["b.txt"], "c.txt": b"c\n"})


def test_revert_one_middle_segment(repo):
    base = lines(30)
    h = History(repo, {"a.txt": text(base), "x.txt": b"x\n"})
    h.agent("op1", {"a.txt": edit(base, {3: b"one\n"})})
    middle = h.agent("op2", {"a.txt": edit(base, {3: b"one\n", 15: b"two\n"}), "x.txt": b"x2\n"})
    h.person({"a.txt": edit(base, {3: b"one\n", 15: b"two\n", 22: b"person\n"})})
    h.agent("op3", {"a.txt": edit(base, {3: b"one\n", 15: b"two\n", 22: b"person\n", 28: b"three\n"}),
                    "y.txt": b"y\n"})
    plan = undo_segments(repo, h.current, [middle])
    assert plan.clean and {s.path for s in plan.steps} == {"a.txt", "x.txt"}
    assert files_of(repo, plan.tree) == norm({
        "a.txt": edit(base, {3: b"one\n", 22: b"person\n", 28: b"three\n"}), "x.txt": b"x\n", "y.txt": b"y\n"})
    # a later call that rewrote the same hunk: a conflict
    h.agent("op4", {"a.txt": edit(base, {3: b"one\n", 15: b"four\n", 22: b"person\n", 28: b"three\n"})})
    plan = undo_segments(repo, h.current, [middle])
    assert by_path(plan)["a.txt"].action == "conflict" and by_path(plan)["x.txt"].action == "write"


def test_exec_bit(repo):
    base = lines(10)
    h = History(repo, {"run.sh": (text(base), BLOB), "tool": (b"t\n", EXEC), "both": (b"b\n", BLOB)})
    h.agent("op1", {"run.sh": (text(base), EXEC), "tool": (b"t\n", BLOB), "both": (b"b\n", EXEC)})
    h.person({"run.sh": (edit(base, {8: b"person\n"}), EXEC), "both": (b"b\n", BLOB)})
    plan = undo_segments(repo, h.current, h.segments)
    steps = by_path(plan)
    assert steps["run.sh"].action == "write" and steps["run.sh"].mode == BLOB
    assert steps["tool"].action == "write" and steps["tool"].mode == EXEC
    assert steps["both"].action == "keep"                          # already as before
    assert files_of(repo, plan.tree) == norm({"run.sh": (edit(base, {8: b"person\n"}), BLOB),
                                              "tool": (b"t\n", EXEC), "both": (b"b\n", BLOB)})


def test_file_turned_into_directory_and_back(repo):
    h = History(repo, {"thing": b"file\n", "d/x.txt": b"x\n"})
    h.agent("op1", {"thing": None, "thing/inner.txt": b"inner\n", "d/x.txt": None, "d": b"now a file\n"})
    plan = undo_segments(repo, h.current, h.segments)
    assert plan.clean
    assert files_of(repo, plan.tree) == norm({"thing": b"file\n", "d/x.txt": b"x\n"})
    # the person added a file in the agent's new directory: that directory stays, the path conflicts
    h.person({"thing/mine.txt": b"mine\n"})
    plan = undo_segments(repo, h.current, h.segments)
    assert by_path(plan)["thing"].action == "conflict"
    got = files_of(repo, plan.tree)
    assert got[b"thing/mine.txt"] == (b"mine\n", BLOB) and b"thing" not in got
    assert result_tree(repo, h.current, plan) == plan.tree


def test_no_segments_and_nothing_left(repo):
    h = History(repo, {"a": b"a\n"})
    assert undo_segments(repo, h.current, []).tree == h.current
    h2 = History(repo, {})
    h2.agent("op1", {"only.txt": b"x\n"})
    plan = undo_segments(repo, h2.current, h2.segments)
    assert files_of(repo, plan.tree) == {} and by_path(plan)["only.txt"].action == "delete"
    seg = h2.segments[0]                                          # ids as hex strings work too
    assert undo_segments(repo, str(h2.current), [Segment(str(seg.before), str(seg.after), "op1")]).tree == plan.tree


def _random_case(repo, rng: random.Random):
    """Random files and segments; the agent and the person own disjoint blocks of lines."""
    nseg = rng.randint(1, 4)
    owners = [f"agent{i}" for i in range(nseg)] + [f"person{i}" for i in range(nseg)]
    files: dict = {}
    blocks: dict = {}                      # file -> list of (owner or None, base lines)
    for f in range(rng.randint(1, 5)):
        name = f"dir{f % 2}/f{f}.txt"
        bl = []
        for b in range(rng.randint(2, 8)):
            bl.append((rng.choice(owners + [None, None]), [f"{name} b{b} l{i}\n".encode()
                                                           for i in range(rng.randint(1, 3))]))
            bl.append((None, [f"{name} gap{b}\n".encode()]))
        blocks[name] = bl
    exec_owner = {name: rng.choice([f"agent{i}" for i in range(nseg)] + [None]) for name in blocks}
    created = {f"new{i}.txt": rng.randrange(nseg) for i in range(rng.randint(0, 2))}
    deleted = {f"old{i}.txt": rng.randrange(nseg) for i in range(rng.randint(0, 2))}
    mine = {f"mine{i}.txt": rng.randrange(nseg) for i in range(rng.randint(0, 2))}
    state = {name: [list(ls) for _, ls in bl] for name, bl in blocks.items()}
    modes = dict.fromkeys(blocks, BLOB)

    def snapshot():
        out = {name: (text([ln for ls in state[name] for ln in ls]), modes[name]) for name in blocks}
        out.update({k: v for k, v in files.items() if v is not None})
        return out

    files.update(dict.fromkeys(deleted, b"old\n"))
    h = History(repo, snapshot())
    for seg in range(nseg):
        change_owner = f"agent{seg}"

        def apply(owner):
            for name, bl in blocks.items():
                for i, (who, _) in enumerate(bl):
                    if who == owner:
                        state[name][i] = [f"{owner} {name} {i} {k}\n".encode() for k in range(rng.randint(0, 3))]

        apply(change_owner)
        for name, who in exec_owner.items():
            if who == change_owner:
                modes[name] = EXEC
        for k, s in created.items():
            if s == seg:
                files[k] = b"created by the agent\n"
        for k, s in deleted.items():
            if s == seg:
                files[k] = None
        h.agent(change_owner, snapshot() | {k: None for k, v in files.items() if v is None})
        apply(f"person{seg}")
        for k, s in mine.items():
            if s == seg:
                files[k] = b"the person's\n"
        h.person(snapshot())
    expected = {name: text([ln for (who, base), now in zip(bl, state[name], strict=True)
                            for ln in (now if who and who.startswith("person") else base)])
                for name, bl in blocks.items()}
    expected.update(dict.fromkeys(deleted, b"old\n"))
    expected.update(dict.fromkeys(mine, b"the person's\n"))
    return h, expected


def test_random_disjoint_edits_undo_to_base_plus_person(repo):
    rng = random.Random(35)
    for case in range(50):
        h, expected = _random_case(repo, rng)
        plan = undo_segments(repo, h.current, h.segments)
        assert plan.clean, (case, [describe(s) for s in plan.conflicts])
        got = files_of(repo, plan.tree)
        assert got == norm(expected), (case, sorted(set(got.items()) ^ set(norm(expected).items()))[:4])
        assert result_tree(repo, h.current, plan) == plan.tree
        for seg in h.segments:                     # the path diff agrees with libgit2's tree diff
            diff = repo.diff(repo[seg.before], repo[seg.after])
            want = {f.raw_path for d in diff.deltas for f in (d.old_file, d.new_file)}
            assert set(Trees(repo).changed(seg.before.raw, seg.after.raw)) == want
