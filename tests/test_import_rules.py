"""The documented direction of imports, checked by reading the source (``ast``; nothing is
imported): docs/architecture.md, "Dependencies run one way".

- ``workers`` (the child) never imports ``supervisor`` (the parent);
- ``shared`` imports neither;
- a room of ``supervisor/`` is entered from outside only through its door: the package
  (``supervisor.pool``) and the names its ``__init__`` binds, never an inner module
  (``supervisor.pool.process``);
- rooms import each other only along ``ALLOWED`` (arbiter -> engine -> db, arbiter ->
  pool, ...), and no two rooms, nor two modules or packages of ``shared`` or of
  ``workers``, import each other round a cycle.

Every import counts: at module level, inside a function (imported lazily) or under
``TYPE_CHECKING``, since each is a dependency a reader must follow. A room that needs
another's inner module exports it through that room's door instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("supervisor", "shared", "workers")

# Which rooms each room of supervisor/ may import (besides shared and workers). A
# package under supervisor/ is a room; so is each module directly in it (the arbiter,
# its signals, the run config, the --app loader, a queue's policy).
ALLOWED: dict[str, set[str]] = {
    "__main__": {"cli"},
    # The package refuses to load over supervisord's files (its namesake on PyPI).
    "__init__": {"namesake"},
    "namesake": set(),
    "cli": {"arbiter", "config", "apps", "signals", "observe", "schedules", "admin",
            "dashboard", "namesake", "breaker"},
    "arbiter": {"engine", "pool", "observe", "schedules", "signals", "config", "apps",
                "tuning"},
    # When the children are forked at start (issue 48): it paces the pool it is given.
    "config": {"pool", "queue_policy", "tuning"},
    "engine": {"db", "pool", "observe", "schedules", "config", "queue_policy", "admission",
               "breaker", "tuning"},
    # The circuit breaker per kind: its own tables and statements (0017).
    "breaker": set(),
    # Which claimed job may start, by what it reserves (issue 27): pure bookkeeping.
    "admission": set(),
    "dashboard": {"admin"},
    # Jobs run in a user's test as a supervisor would run and record them.
    "testing": {"db", "engine", "observe"},
    # The dashboard's schedules page lists and switches schedules as the CLI does.
    "admin": {"schedules"},
    "db": set(),
    "pool": {"tuning"},
    # The dispatch path's numbers, one frozen record (issue 41): imports nothing.
    "tuning": set(),
    "observe": set(),
    "schedules": set(),
    "signals": set(),
    "apps": set(),
    "queue_policy": set(),
}


@dataclass(frozen=True)
class Import:
    """One imported module, as written in one source file."""

    source: str  # the importing module, dotted
    target: str  # the module imported, dotted (a submodule named by ``from X import m``)
    line: int
    bound: str | None = None  # ``from X import bound``: the name taken from package X


def module_name(path: Path, root: Path) -> str:
    """``supervisor/pool/process.py`` -> ``supervisor.pool.process``; a package's
    ``__init__.py`` is the package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path) -> bool:
    """Whether ``name`` is a module or package of the source tree under ``root``."""
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every project import in one file (absolute or relative)."""
    source = module_name(path, root)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(source, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if alias.name != "*" and is_module(sub, root):
                    found.append(Import(source, sub, node.lineno, alias.name))
                else:
                    found.append(Import(source, base, node.lineno, alias.name))
    return [i for i in found if i.target.split(".")[0] in TOPS]


def all_imports(root: Path) -> list[Import]:
    """The imports of every module of ``supervisor``, ``shared`` and ``workers``."""
    found: list[Import] = []
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            found += imports_of(path, root)
    return found


def room_of(name: str) -> str | None:
    """The room of ``supervisor/`` a module belongs to (None outside ``supervisor``)."""
    parts = name.split(".")
    if parts[0] != "supervisor":
        return None
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def unit_of(name: str) -> str:
    """The part of its top package a module belongs to: ``shared.producers.plans`` ->
    ``shared.producers``; ``shared.enqueue`` -> itself; for ``supervisor`` the room."""
    return ".".join(name.split(".")[:2])


def door_names(room: str, root: Path) -> set[str]:
    """The names a room's door binds: what ``from supervisor.<room> import X`` may take."""
    init = root / "supervisor" / room / "__init__.py"
    if not init.is_file():
        return set()
    names: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            # A door may load a name on first use (a module ``__getattr__``, issue 31's
            # start-up): what its ``__all__`` lists is its door all the same.
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                    and isinstance(node.value, ast.List | ast.Tuple):
                names |= {e.value for e in node.value.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names


def layer_violations(imports: list[Import]) -> list[str]:
    """``shared`` importing a side, ``workers`` importing the parent."""
    bad = []
    for imp in imports:
        src, dst = imp.source.split(".")[0], imp.target.split(".")[0]
        if src == "shared" and dst in ("supervisor", "workers"):
            bad.append(f"{imp.source}:{imp.line} imports {imp.target}: shared imports "
                       "neither supervisor nor workers")
        if src == "workers" and dst == "supervisor":
            bad.append(f"{imp.source}:{imp.line} imports {imp.target}: the child never "
                       "imports the parent")
    return sorted(set(bad))


def door_violations(imports: list[Import], root: Path) -> list[str]:
    """Imports that enter another room of ``supervisor`` past its door."""
    bad = []
    for imp in imports:
        target_room = room_of(imp.target)
        if target_room is None or target_room == room_of(imp.source):
            continue
        parts = imp.target.split(".")
        if not (root / "supervisor" / target_room).is_dir():
            continue  # a one-module room: the module is its own door
        if len(parts) > 2 and not (len(parts) == 3 and imp.bound is not None
                                   and imp.bound in door_names(target_room, root)):
            bad.append(f"{imp.source}:{imp.line} imports {imp.target}: enter "
                       f"supervisor.{target_room} through its door")
    return sorted(set(bad))


def direction_violations(imports: list[Import], root: Path) -> list[str]:
    """Room-to-room imports that ``ALLOWED`` does not list."""
    bad = []
    for imp in imports:
        src, dst = room_of(imp.source), room_of(imp.target)
        if src is None or dst is None or src == dst:
            continue
        if src not in ALLOWED:
            bad.append(f"{imp.source}: room {src!r} is not in ALLOWED (add it, and to "
                       "docs/architecture.md)")
        elif dst not in ALLOWED[src]:
            bad.append(f"{imp.source}:{imp.line} imports {imp.target}: {src} may not "
                       f"depend on {dst}")
    return sorted(set(bad))


def cycles(imports: list[Import]) -> list[list[str]]:
    """Cycles between units (rooms of ``supervisor``, modules and packages of ``shared``
    and ``workers``): each as the path that closes it."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        src, dst = unit_of(imp.source), unit_of(imp.target)
        if src != dst:
            graph.setdefault(src, set()).add(dst)
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


@pytest.fixture(scope="module")
def project_imports() -> list[Import]:
    found = all_imports(ROOT)
    # Guard against a scan that silently finds nothing (a moved tree, a wrong root).
    assert len(found) > 300 and any(i.target.startswith("supervisor.") for i in found)
    return found


def test_shared_and_workers_do_not_import_upwards(project_imports):
    bad = layer_violations(project_imports)
    assert not bad, "\n".join(bad)


def test_rooms_are_entered_only_through_their_doors(project_imports):
    bad = door_violations(project_imports, ROOT)
    assert not bad, "\n".join(bad)


def test_rooms_depend_only_in_the_documented_direction(project_imports):
    bad = direction_violations(project_imports, ROOT)
    assert not bad, "\n".join(bad)


def test_no_cycles_between_rooms_or_between_parts_of_shared_and_workers(project_imports):
    found = cycles(project_imports)
    assert not found, "\n".join(" -> ".join(cycle) for cycle in found)


def test_every_room_is_listed():
    rooms = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "supervisor").iterdir()
             if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert rooms == set(ALLOWED)


# The checks themselves, on a small tree of their own: each rule reports what it should.

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checks_catch_each_kind_of_violation(tmp_path):
    root = _tree(tmp_path, {
        "supervisor/__init__.py": "",
        "supervisor/pool/__init__.py": "from supervisor.pool.pool import Pool\n",
        "supervisor/pool/pool.py": "class Pool: ...\n",
        "supervisor/pool/process.py": "",
        "supervisor/db/__init__.py": "from supervisor.engine import Engine\n",
        "supervisor/engine/__init__.py": (
            "from supervisor.db import Store\n"
            "from supervisor.pool import Pool\n"
            "from supervisor.pool import process\n"
            "def f():\n    import supervisor.pool.process\n"),
        "shared/__init__.py": "",
        "shared/a.py": "from shared.b import x\nimport workers.child\n",
        "shared/b.py": "from shared import a\n",
        "workers/__init__.py": "",
        "workers/child.py": "from . import helper\nfrom supervisor.observe import logs\n",
        "workers/helper.py": "",
    })
    imports = all_imports(root)
    assert sorted(layer_violations(imports)) == [
        "shared.a:2 imports workers.child: shared imports neither supervisor nor workers",
        "workers.child:2 imports supervisor.observe: the child never imports the parent",
    ]
    assert sorted(door_violations(imports, root)) == [
        "supervisor.engine:3 imports supervisor.pool.process: enter supervisor.pool "
        "through its door",
        "supervisor.engine:5 imports supervisor.pool.process: enter supervisor.pool "
        "through its door",
    ]
    assert any(v.startswith("supervisor.db:1 imports supervisor.engine: db may not")
               for v in direction_violations(imports, root))
    assert sorted(map(tuple, cycles(imports))) == [
        ("shared.a", "shared.b", "shared.a"),
        ("supervisor.db", "supervisor.engine", "supervisor.db"),
    ]
    assert Import("workers.child", "workers.helper", 1, "helper") in imports
