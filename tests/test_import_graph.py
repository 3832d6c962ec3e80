"""The import graph of ``agentspec/`` and ``envs/``, read from the source: layers hold, no file circles.

The graph is built with :mod:`ast`, never by importing (an import circle can hide behind import order).  Every
``import``/``from ... import`` of a project module is an edge, wherever it stands:

* ``module``: at the top of a file (including under ``try``/``if``): runs when the file is imported;
* ``lazy``: inside a function: runs when the function is called;
* ``typing``: under ``if TYPE_CHECKING:``: never runs.

**What counts for circles.**  All three kinds.  A lazy import that closes a loop is still a circle, only one
that import order happens not to trip today (``commands`` -> ``speculative`` -> ``commands`` was one); a
``TYPE_CHECKING`` import that closes one still ties the two files together (one cannot change or be read without
the other).  Lazy imports stay fine for what they are for: deferring a heavy dependency (torch, transformers, a
backend) until it is needed; they only may not close a loop.

The rules: no circle between files; no circle between packages either (``agentspec.runtime``,
``agentspec.mining``..., each top-level module its own unit: runtime <-> mining was one); ``agentspec`` never
imports ``envs``; ``envs`` import only agentspec's public API and the extension modules listed below.

Edges name files, not packages: ``import agentspec.a.b`` runs ``agentspec/__init__.py`` and
``agentspec/a/__init__.py`` first, but those are counted only when a file names them (``from agentspec import
X``): a package's ``__init__`` is its public face, and counting the implicit parent runs would make every module
that ``agentspec/__init__.py`` reaches part of one circle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentspec", "envs")
Kind = Literal["module", "lazy", "typing"]

# What an environment may import of agentspec: the public API (``from agentspec import X``, X in ``__all__``)
# and the extension modules the docs tell environment authors to implement or use.  Submodules of an allowed
# module are allowed too, unless private (a ``_`` name).
ENV_EXTENSION_MODULES = frozenset({
    "agentspec.env",  # the Environment protocol, StateSnapshot and ToolkitEnvironment
    "agentspec.bench.protocol",  # the Bench protocol, its optional features, the done tool and distractors
    "agentspec.snapshot",  # SnapshotBackend, the in-process backend
    "agentspec.sandbox",  # the sandboxed backends (overlay, copy, Docker, SQLite) and their programs
    "agentspec.tools",  # Toolkit and @tool, to declare a domain's tools
    "agentspec.types",  # ToolCall, Observation, Effect, ToolSpec...
    "agentspec.errors",  # the error tree
    "agentspec.data",  # DataSpec: how a benchmark declares and verifies the data it needs
    "agentspec.mcp",  # MCPToolkit: an MCP server's tools as a snapshot backend (the mcp bench)
    "agentspec.pinned_venv",  # PinnedVenv: a benchmark's own package in a private venv (AppWorld)
})

# Imports of agentspec internals an environment is allowed for now, each with the issue that removes it (none
# today: the tau2 harness moved into agentspec behind the Bench protocol).  The test fails on an entry no longer
# used, so the list can only shrink.
ENV_TEMPORARY_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


# Third-party packages that cost a process most of a second (or gigabytes) to import: a light import of agentspec
# (its value types, its public names) must load none of them; they load where used (a model client, a fit).
HEAVY = ("openai", "httpx", "rich", "scipy", "torch", "transformers")

# Imports left out of the package-circle check, each closing a loop between two packages (none today).
PACKAGE_CIRCLE_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Edge:
    source: str
    """The importing file, relative to the repository root."""
    target: str
    """The imported project module (dotted)."""
    kind: Kind
    line: int
    names: tuple[str, ...] = ()
    """For ``from agentspec import X``: the names taken."""

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.kind})"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every source file of the project packages."""
    files: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[_module_name(path, root)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, Kind]]:
    """Every import statement with the kind of place it stands in."""

    def walk(node: ast.AST, kind: Kind) -> Iterator[tuple[ast.Import | ast.ImportFrom, Kind]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, kind
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, "typing" if kind == "typing" else "lazy")
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), "typing")
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), kind)
            else:
                yield from walk(child, kind)

    yield from walk(tree, "module")


def _resolve(module: str, files: dict[str, Path]) -> str | None:
    """The project module ``module`` names (the longest project prefix of a dotted name), or None."""
    parts = module.split(".")
    while parts:
        if ".".join(parts) in files:
            return ".".join(parts)
        parts.pop()
    return None


def edges_of(path: Path, files: dict[str, Path], root: Path = ROOT) -> list[Edge]:
    """The project imports of one file."""
    source = str(path.relative_to(root))
    this = _module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: list[Edge] = []
    for node, kind in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, files)
                if target is not None:
                    found.append(Edge(source, target, kind, node.lineno))
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        taken: list[str] = []
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in files:  # ``from pkg import module`` imports that module's file
                found.append(Edge(source, submodule, kind, node.lineno))
            else:
                taken.append(alias.name)
        target = _resolve(base, files)
        if taken and target is not None:
            found.append(Edge(source, target, kind, node.lineno, tuple(taken)))
    return found


def import_graph(root: Path = ROOT) -> list[Edge]:
    files = project_files(root)
    return [edge for path in files.values() for edge in edges_of(path, files, root)]


def _module_of(source: str) -> str:
    return source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def package_of(module: str) -> str:
    """The unit a package-level circle is counted in: ``agentspec.runtime`` for ``agentspec.runtime.spork``,
    ``agentspec.api`` for itself (a top-level module is its own unit), ``envs.tau2_telecom`` for its files."""
    return ".".join(module.split(".")[:2])


def file_circles(edges: list[Edge], unit: Callable[[str], str] = lambda module: module) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted; ``unit`` maps a module to the
    node it counts as (itself for file circles, :func:`package_of` for package circles)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        source, target = unit(_module_of(edge.source)), unit(edge.target)
        if source != target:
            graph.setdefault(source, set()).add(target)
            graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def _public_names() -> set[str]:
    """``agentspec.__all__``, read from the source."""
    tree = ast.parse((ROOT / "agentspec" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("agentspec/__init__.py has no __all__")


def _extension(module: str) -> bool:
    return any(
        (module == allowed or module.startswith(allowed + "."))
        and not any(part.startswith("_") for part in module[len(allowed):].split("."))
        for allowed in ENV_EXTENSION_MODULES
    )


def env_violations(edges: list[Edge]) -> tuple[list[str], set[tuple[str, str]]]:
    """Imports of agentspec by ``envs/`` outside the public API and the extension modules; and the temporary
    exceptions actually used."""
    public = _public_names()
    bad: list[str] = []
    used: set[tuple[str, str]] = set()
    for edge in edges:
        if not edge.source.startswith("envs/") or not edge.target.startswith("agentspec"):
            continue
        if (edge.source, edge.target) in ENV_TEMPORARY_EXCEPTIONS:
            used.add((edge.source, edge.target))
        elif edge.target == "agentspec":
            bad += [f"{edge}: {name} is not in agentspec.__all__" for name in edge.names if name not in public]
        elif not _extension(edge.target):
            bad.append(f"{edge}: not the public API nor an extension module")
    return bad, used


# ---------------------------------------------------------------------------- the rules


def test_no_import_circles_between_files() -> None:
    edges = import_graph()
    circles = file_circles(edges)
    detail = [
        f"{' <-> '.join(group)}: " + "; ".join(str(e) for e in edges if e.target in group and _module_of(e.source) in group)
        for group in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(detail)


def test_no_import_circles_between_packages() -> None:
    # runtime <-> mining was one (the executor used the macro library, labelling used the policies): the
    # macros now live below both.  A package loop makes the two packages one layer in all but name.
    edges = [e for e in import_graph() if (e.source, e.target) not in PACKAGE_CIRCLE_EXCEPTIONS]
    circles = file_circles(edges, package_of)
    detail = [
        f"{' <-> '.join(group)}: " + "; ".join(
            str(e) for e in edges
            if package_of(e.target) in group and package_of(_module_of(e.source)) in group
            and package_of(e.target) != package_of(_module_of(e.source))
        )
        for group in circles
    ]
    assert not circles, "import circles between packages:\n" + "\n".join(detail)


def test_agentspec_never_imports_envs() -> None:
    wrong = [str(e) for e in import_graph() if e.source.startswith("agentspec/") and e.target.split(".")[0] == "envs"]
    assert not wrong, "agentspec imports an environment:\n" + "\n".join(wrong)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(edges: list[Edge]) -> list[str]:
    """Imports of a private module (``agentspec.X._y``) or a private name (``from agentspec.X import _y``) of
    agentspec from outside the package that holds it (:func:`package_of`, a top-level module its own package)."""
    bad: list[str] = []
    for edge in edges:
        if edge.target.split(".")[0] != "agentspec":
            continue
        importer = package_of(_module_of(edge.source))
        parts = edge.target.split(".")
        hidden = next((index for index, part in enumerate(parts) if _private(part)), None)
        if hidden is not None and (owner := package_of(".".join(parts[: hidden + 1]))) != importer:
            bad.append(f"{edge}: a private module of {owner}")
        names = [name for name in edge.names if _private(name)]
        if names and package_of(edge.target) != importer:
            bad.append(f"{edge}: private names of {package_of(edge.target)}: {', '.join(names)}")
    return bad


def test_no_package_imports_another_packages_private_parts() -> None:
    # mcp.py and mcp_docker.py took the sandbox's _host, _docker and _owner, and the MCP proxy the private session
    # of agentspec.mcp: what another package needs is a public name (sandbox.confinement, sandbox.containers,
    # sandbox.owner, mcp.Session...).  Inside one package, modules share private parts freely; tests may reach them.
    bad = private_imports(import_graph())
    assert not bad, "imports of another package's private parts:\n" + "\n".join(bad)


def test_envs_use_only_the_public_api_and_extension_modules() -> None:
    bad, used = env_violations(import_graph())
    assert not bad, "envs reach into agentspec internals:\n" + "\n".join(bad)
    stale = sorted(ENV_TEMPORARY_EXCEPTIONS - used)
    assert not stale, f"temporary exceptions no longer needed, remove them from ENV_TEMPORARY_EXCEPTIONS: {stale}"


RUNTIME_MAX_LINES = 300
"""The longest a file of ``agentspec/runtime/`` may be: past it, a module holds more than one idea (the runtime's run
log, governor and policies each grew to 400-500 lines before they were split into parts named after what they hold)."""


def test_no_runtime_file_over_300_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "agentspec" / "runtime").rglob("*.py"))
            if "__pycache__" not in path.parts
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > RUNTIME_MAX_LINES}
    assert not long, f"runtime files over {RUNTIME_MAX_LINES} lines (split them by what they hold): {long}"


def test_no_module_is_named_chain() -> None:
    # Three chain.py files meant two things (the draft chain; chain verification): a module's name says which.
    found = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "agentspec").rglob("chain.py")
                   if "__pycache__" not in path.parts)
    assert not found, f"modules named chain.py (name the chain: draft_chain, chain_verification): {found}"


# ---------------------------------------------------------------------------- the checker itself


def test_the_checker_sees_lazy_typing_and_relative_imports(tmp_path: Path) -> None:
    sources = {
        "agentspec/__init__.py": "",
        "agentspec/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentspec.b import X\n",
        "agentspec/b.py": "def f():\n    from . import c\n",
        "agentspec/c.py": "import agentspec.a.thing\nfrom agentspec import a, __version__\n",
        "envs/__init__.py": "",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    edges = import_graph(tmp_path)
    assert {(e.source, e.target, e.kind, e.names) for e in edges} == {
        ("agentspec/a.py", "agentspec.b", "typing", ("X",)),
        ("agentspec/b.py", "agentspec.c", "lazy", ()),
        ("agentspec/c.py", "agentspec.a", "module", ()),
        ("agentspec/c.py", "agentspec", "module", ("__version__",)),
    }
    assert file_circles(edges) == [["agentspec.a", "agentspec.b", "agentspec.c"]]
    assert file_circles(edges, lambda module: "agentspec") == []  # one package: no package circle


def test_the_env_rule_flags_internals_and_names_outside_all() -> None:
    edges = [
        Edge("envs/x/env.py", "agentspec.runtime.executor", "module", 1),
        Edge("envs/x/env.py", "agentspec", "module", 2, ("Executor", "_hidden")),
        Edge("envs/x/env.py", "agentspec.sandbox.overlay", "lazy", 3),
        Edge("envs/x/env.py", "agentspec.sandbox._cgroup", "module", 4),
        Edge("envs/x/env.py", "agentspec.types", "module", 5),
    ]
    bad, _ = env_violations(edges)
    assert [line.split(":")[1] for line in bad] == ["1 -> agentspec.runtime.executor (module)", "2 -> agentspec (module)", "4 -> agentspec.sandbox._cgroup (module)"]


def test_the_private_rule_flags_other_packages_private_parts_only() -> None:
    edges = [
        Edge("agentspec/mcp.py", "agentspec.sandbox._cgroup", "lazy", 1),  # another package's private module
        Edge("agentspec/sandbox/overlay.py", "agentspec.sandbox._cgroup", "module", 2),  # its own package's: fine
        Edge("agentspec/mcp_proxy/core.py", "agentspec.mcp", "module", 3, ("Session", "_render")),  # a private name
        Edge("agentspec/runtime/spork.py", "agentspec.runtime.executor", "module", 4, ("_helper",)),  # same package
        Edge("agentspec/cli/main.py", "agentspec", "module", 5, ("__version__",)),  # a dunder is not private
        Edge("envs/x/env.py", "agentspec._hidden", "module", 6),  # a private top-level module
    ]
    assert [line.split(":")[1] for line in private_imports(edges)] == [
        "1 -> agentspec.sandbox._cgroup (lazy)", "3 -> agentspec.mcp (module)", "6 -> agentspec._hidden (module)"]


# ---------------------------------------------------------------------------- what an import loads


def _fresh(code: str) -> object:
    """Run ``code`` in a fresh interpreter (this one may hold anything already) and return what it prints last,
    read as JSON."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _heavy_loaded_after(statement: str) -> object:
    return _fresh(f"import sys\n{statement}\n"
                  f"import json; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")


def test_importing_the_value_types_loads_no_heavy_dependency() -> None:
    # It reached openai, httpx, rich and scipy through the eager package root.
    assert _heavy_loaded_after("import agentspec.types") == []


def test_the_whole_public_api_loads_no_heavy_dependency() -> None:
    # The model client imports the SDK when one is opened, the runner rich when it draws a bar, the macro filter
    # scipy when it computes a bound.
    assert _heavy_loaded_after("from agentspec import *") == []


def test_every_public_name_loads_lazily() -> None:
    # ``from agentspec import X`` must give the very object the static (``TYPE_CHECKING``) imports of
    # agentspec/__init__.py name, which is what type checkers and readers see; and nothing loads before it is asked.
    static = _static_exports()
    assert set(static) == _public_names()
    loaded = _fresh(
        "import importlib, json, sys\n"
        "import agentspec\n"
        "before = sorted(m for m in sys.modules if m.startswith('agentspec'))\n"
        "unlisted = sorted(set(agentspec.__all__) - set(dir(agentspec)))\n"
        f"static = {static!r}\n"
        "wrong = []\n"
        "for name, module in static.items():\n"
        "    if getattr(agentspec, name) is not getattr(importlib.import_module(module), name):\n"
        "        wrong.append(name)\n"
        "print(json.dumps({'before': before, 'unlisted': unlisted, 'wrong': wrong}))"
    )
    assert loaded == {"before": ["agentspec"], "unlisted": [], "wrong": []}


def _static_exports() -> dict[str, str]:
    """Public name -> module, read from the ``if TYPE_CHECKING:`` imports of agentspec/__init__.py."""
    tree = ast.parse((ROOT / "agentspec" / "__init__.py").read_text(encoding="utf-8"))
    return {
        alias.asname or alias.name: node.module
        for statement in tree.body if isinstance(statement, ast.If) and _is_type_checking(statement.test)
        for node in statement.body if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


# ---------------------------------------------------------------------------- one writer, typed seams


def _agentspec_trees() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted((ROOT / "agentspec").rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_exactly_one_module_writes_results_json() -> None:
    # The file's name, as code (not prose in a docstring or a help text), appears in one module: the one that
    # writes it (agentspec.results: Results.save).  Every other module reads and writes through that model.  The
    # one other name is tau2's own results file (another format, under OUT/tau2/), written for tau2's tools.
    naming = sorted({source for source, tree in _agentspec_trees() for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and node.value == "results.json"})
    assert naming == ["agentspec/bench/tau2/official.py", "agentspec/results.py"], naming


def test_no_hasattr_on_a_bench_object() -> None:
    # A bench's optional features are protocols checked with isinstance (agentspec.bench.protocol), not names
    # probed with hasattr.
    found = [f"{source}:{node.lineno}: {ast.unparse(node)}" for source, tree in _agentspec_trees()
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
             and node.args and "bench" in ast.unparse(node.args[0]).lower()]
    assert not found, "hasattr on a bench:\n" + "\n".join(found)


# ---------------------------------------------------------------------------- the command line and the library


def _top_level_names(tree: ast.AST) -> Iterator[ast.stmt]:
    yield from (node for node in getattr(tree, "body", []) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def test_only_the_cli_parses_flags() -> None:
    # Every command's handler lives in agentspec/cli (agentspec/cli/commands): a library package takes typed
    # values, never a parsed Namespace, so it never imports argparse nor defines a ``*_command(args)``.  Handlers
    # in bench, mining and report were why mining imported cli and bench imported report.
    found: list[str] = []
    for source, tree in _agentspec_trees():
        if source.startswith("agentspec/cli/"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names)) or (
                    isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse"):
                found.append(f"{source}:{node.lineno}: imports argparse")
        found += [f"{source}:{node.lineno}: defines {node.name}" for node in _top_level_names(tree)
                  if node.name.endswith("_command")]
    assert not found, "command-line code outside agentspec/cli:\n" + "\n".join(found)


def test_the_library_never_imports_the_cli_and_bench_never_imports_report() -> None:
    edges = import_graph()
    wrong = [str(e) for e in edges if e.source.startswith("agentspec/") and not e.source.startswith("agentspec/cli/")
             and e.target.split(".")[:2] == ["agentspec", "cli"]]
    wrong += [str(e) for e in edges if e.source.startswith("agentspec/bench/") and e.target.startswith("agentspec.report")]
    assert not wrong, "\n".join(wrong)


HELP_THIRD_PARTY = {"pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"}
"""What ``agentspec --help`` may load besides the standard library: pydantic, for the ``--mode`` flag's parser
(:mod:`agentspec.runtime.modes`)."""


def test_agentspec_help_loads_only_the_parsers() -> None:
    # ``agentspec --help`` builds every command's parser and runs no command: it loads the parser modules, the
    # error tree and the mode names, and no handler (agentspec/cli/commands), model client, bench or runtime.
    loaded = _fresh(
        "import contextlib, io, json, sys\n"
        "before = set(sys.modules)  # what the interpreter loaded itself (Debian's python3: sitecustomize)\n"
        "from agentspec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        "tops = {m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) - {'agentspec'}\n"
        "print(json.dumps({'code': code, 'usage': out.getvalue().startswith('usage: agentspec'),\n"
        "                  'agentspec': sorted(m for m in sys.modules if m.startswith('agentspec')),\n"
        "                  'third_party': sorted(t for t in tops if not t.startswith('_'))}))"
    )
    assert isinstance(loaded, dict) and loaded["code"] == 0 and loaded["usage"]
    ours = [m for m in loaded["agentspec"] if m.startswith("agentspec.cli.")]
    assert ours and not [m for m in ours if m.startswith("agentspec.cli.commands") or m == "agentspec.cli.run_modes"]
    assert set(loaded["agentspec"]) - set(ours) == {"agentspec", "agentspec.cli", "agentspec.errors",
                                                     "agentspec.runtime", "agentspec.runtime.modes"}
    assert set(loaded["third_party"]) <= HELP_THIRD_PARTY, loaded["third_party"]
    assert not set(loaded["third_party"]) & set(HEAVY)
