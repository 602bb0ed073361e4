"""The layer picture of docs/design.md, enforced: which package may import which,
no import cycle inside the engine, and no reaching into another module's privates."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# package -> the packages of ours it may import (settings.py and deployment.py are "packages")
ALLOWED = {
    "engine": set(),
    "journal_refs": {"engine"},
    "settings": {"engine"},
    "deployment": {"settings"},
    "setting_effects": set(),
    "service": {"engine", "journal_refs", "settings", "deployment", "setting_effects"},
    "report": {"service", "engine", "settings"},
    "windtunnel": {"service", "engine", "journal_refs", "settings"},
    "commands": {"service", "engine", "settings", "report"},
    "cli": {"commands", "service", "engine", "settings", "report", "windtunnel"},
    "api": {"commands", "service", "engine", "settings", "report"},
    "hermes": {"commands", "service", "cli", "engine", "settings", "report"},
}


def _modules():
    for pkg in ALLOWED:
        path = REPO / f"{pkg}.py"
        files = [path] if path.exists() else sorted((REPO / pkg).rglob("*.py"))
        for f in files:
            yield pkg, f


def _imports(pkg: str, f: Path):
    """(line, our top-level package) for every relative import in `f`."""
    tree = ast.parse(f.read_text(), str(f))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            up = node.level - 1                                  # 0 = this package
            parts = list(f.relative_to(REPO).parts[:-1])
            base = parts[:len(parts) - up] if up <= len(parts) else None
            if base is None:
                continue
            target = base + (node.module.split(".") if node.module else [])
            if not target:                                       # `from .. import x`: x is a module
                for alias in node.names:
                    yield node.lineno, alias.name
            else:
                yield node.lineno, target[0]


def test_packages_import_only_the_layers_below():
    bad = []
    for pkg, f in _modules():
        for line, target in _imports(pkg, f):
            if target in ALLOWED and target != pkg and target not in ALLOWED[pkg]:
                bad.append(f"{f.relative_to(REPO)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_the_engine_has_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for f in (REPO / "engine").glob("*.py"):
        tree = ast.parse(f.read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
        graph[f.stem] = deps

    def visit(node, path):
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(node):] + [node]))
        for dep in graph.get(node, ()):
            visit(dep, path + [node])
    for mod in graph:
        visit(mod, [])


def test_no_module_reaches_into_another_modules_privates():
    """`obj._name` where obj is not self/cls: a private member used across modules."""
    bad = []
    for pkg, f in _modules():
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                where = f"{f.relative_to(REPO)}:{node.lineno} .{node.attr}"
                if where.endswith(".{0}".format("_repo")) and any(
                        f"engine/{m}.py" in where for m in ("ignore", "agent_merge", "scan")):
                    continue                  # pygit2's own handle: documented in engine/ignore.py
                if where.endswith("._index") and any(f"engine/{m}.py" in where for m in ("scan", "index_entry")):
                    continue                  # pygit2's own index handle: a diff over a path list (_diff_below),
                                              # an entry with its stat data (index_entry.add_file)
                if node.attr == "_exit" and isinstance(node.value, ast.Name) and node.value.id == "os":
                    continue                  # public, despite its name: a forked child's only exit
                bad.append(where)
    assert not bad, "\n".join(bad)


SURFACES = ("hermes", "cli", "api", "report")
# the service's parts: a surface asks the facade (service/__init__.py), never a part
PARTS = {"core", "store", "journal", "calls", "remotes", "maintenance", "snapshots", "reconcile", "gate",
         "settings_watch", "time"}


def _is_service(node: ast.AST) -> bool:
    """`svc`, `self._svc`, `self.svc()`, `Chronos.get(...)`: the ways surfaces hold the service."""
    if isinstance(node, ast.Call):
        node = node.func
        if isinstance(node, ast.Attribute) and node.attr == "get" and isinstance(node.value, ast.Name):
            return node.value.id == "Chronos"
    if isinstance(node, ast.Name):
        return node.id in ("svc", "_svc", "service", "chronos")
    return isinstance(node, ast.Attribute) and node.attr in ("svc", "_svc")


def test_surfaces_reach_only_the_facade():
    """The service is sealed: no surface reaches `svc.core/.store/.journal/.calls/...` (its parts)."""
    bad = []
    for pkg, f in _modules():
        if pkg not in SURFACES:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in PARTS and _is_service(node.value):
                bad.append(f"{f.relative_to(REPO)}:{node.lineno} .{node.attr}")
    assert not bad, "\n".join(bad)


def test_the_surface_check_sees_a_reach_past_the_facade(tmp_path):
    """The check above can fail: each way of holding the service is caught."""
    for code in ("svc.journal.unresolved()", "self._svc.calls.answered()", "self.svc().remotes.kick()",
                 "Chronos.get(d).store.repo()"):
        node = ast.parse(code).body[0].value
        while not (isinstance(node, ast.Attribute) and node.attr in PARTS):
            node = node.func if isinstance(node, ast.Call) else node.value
        assert _is_service(node.value), code


def test_no_module_imports_another_modules_privates():
    """`from .x import _name`: a private used across modules (make it public, with a name that says what)."""
    bad = []
    for pkg, f in _modules():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{f.relative_to(REPO)}:{node.lineno} imports {alias.name} from {node.module}")
    assert not bad, "\n".join(bad)
