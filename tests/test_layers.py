"""The layering the folders promise (issue 16, item 4), enforced: import-linter's layer contract in
pyproject.toml (core < io < features < stats < solve < models < sample | metrics < pipeline < cluster <
cli | demo), no module importing an underscore name from another package, and no new use of another
module's private attribute (``obj._name`` where no code of the module defines ``_name``; the uses left are
listed and may only shrink). The last check reads attribute syntax only: ``getattr(obj, "_name")`` escapes it, and
any assignment ``x._name = …`` in a module hides every read of ``_name`` there.

``lint-imports`` runs on the tree these tests belong to (the current directory goes first on its path);
a copy of the package with one upward import shows that the contract can fail.
"""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    command = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([*command, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_layer_contract_is_kept():
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tgpflow layers KEPT" in done.stdout


def test_the_layer_contract_catches_an_upward_import(tmp_path):
    """One import of the CLI from the core breaks the contract, and the report names the import."""
    shutil.copytree(REPO / "tgpflow", tmp_path / "tgpflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    moments = tmp_path / "tgpflow" / "core" / "moments.py"
    moments.write_text(moments.read_text() + "\n\ndef _upward():\n    import tgpflow.cli  # noqa: F401\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "tgpflow layers BROKEN" in done.stdout
    assert "tgpflow.core.moments -> tgpflow.cli" in done.stdout


def _package(module: str, is_package: bool) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package itself)."""
    return module if is_package else module.rpartition(".")[0]


def underscore_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """``"importer: from X import _name"`` for every underscore name (or module) that ``module`` imports from a
    tgpflow package other than its own; dunder names (``__version__``) are public."""
    here = _package(module, is_package)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = [(target, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [(a.name.rpartition(".")[0], a.name.rpartition(".")[2]) for a in node.names]
        else:
            continue
        for target, name in names:
            if not (target == "tgpflow" or target.startswith("tgpflow.")):
                continue
            private = [p for p in [*target.split("."), name] if p.startswith("_") and not p.endswith("__")]
            # a name from a module of another package (a private module of another package counts too)
            owner = target if (target == "tgpflow" or _is_package(target)) else target.rpartition(".")[0]
            if private and owner != here:
                found.append(f"{module}: from {target} import {name}")
    return found


def _is_package(dotted: str) -> bool:
    return (REPO / Path(*dotted.split(".")) / "__init__.py").exists()


def _library_modules() -> list[tuple[str, Path, bool]]:
    out = []
    for path in sorted((REPO / "tgpflow").rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        is_package = rel.name == "__init__"
        parts = rel.parts[:-1] if is_package else rel.parts
        out.append((".".join(parts), path, is_package))
    return out


def test_no_module_imports_an_underscore_name_from_another_package():
    modules = _library_modules()
    assert len(modules) > 50  # the walk sees the library
    found = [hit for name, path, is_package in modules for hit in underscore_imports(path.read_text(), name, is_package)]
    assert found == []


@pytest.mark.parametrize("module, source, expected", [
    ("tgpflow.models.x", "from tgpflow.stats.tgp import _mismatch", 1),  # another package's private name
    ("tgpflow.stats.ncfd", "from tgpflow.stats.tgp import _mismatch", 0),  # its own package's
    ("tgpflow.models.x", "def f():\n    from tgpflow.io.artifact import _META_KEY", 1),  # inside a function too
    ("tgpflow.models.x", "from ..stats.tgp import _mismatch", 1),  # relative
    ("tgpflow.models.x", "from tgpflow.core.version import __version__", 0),  # dunder names are public
    ("tgpflow.models.x", "from tgpflow.models.streaming import _helper", 0),
    ("tgpflow.models.tgp_methods.fd", "from tgpflow.models.tgp_method import _helper", 1),  # a subpackage is another
])
def test_the_underscore_check_can_fail(module, source, expected):
    assert len(underscore_imports(source, module)) == expected


#: ``obj._name`` uses where the module defines no ``_name`` (a class's private attribute reached from outside its
#: module and its class hierarchy; ``self``/``cls``/``super()``, an instance the module's own classmethod makes with
#: ``cls(…)`` and an argument annotated with a class of the module excluded): issue 41 removed the last of them.
KNOWN_PRIVATE_ATTRIBUTE_USES: dict[str, set[str]] = {}


def private_attribute_uses(source: str) -> set[str]:
    """The ``_names`` that ``source`` reads as attributes of objects other than its own classes' instances
    (``self``, ``cls``, ``super()``, a name bound to ``cls(…)``, an argument annotated with a class it defines)
    without defining them anywhere itself (a def, a class, an assignment to a name or an attribute)."""
    tree = ast.parse(source)
    own = set()
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    instances = {"self", "cls"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "cls"):
            instances.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.arg) and isinstance(node.annotation, ast.Name) and node.annotation.id in classes:
            instances.add(node.arg)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.endswith("__"):
            continue
        value = node.value
        if node.attr in own or (isinstance(value, ast.Name) and value.id in instances):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        found.add(node.attr)
    return found


def test_no_new_use_of_another_modules_private_attributes():
    found = {name: uses for name, path, _ in _library_modules() if (uses := private_attribute_uses(path.read_text()))}
    assert found == KNOWN_PRIVATE_ATTRIBUTE_USES  # a new use fails; a removed one must leave the list too


@pytest.mark.parametrize("source, expected", [
    ("def f(est):\n    return est._fitted", {"_fitted"}),  # another object's private attribute
    ("class A:\n    def f(self):\n        return self._fitted", set()),  # its own
    ("class A:\n    _n = 1\ndef f(a):\n    return a._n", set()),  # defined in this module
    ("def f(x):\n    x._seen = 1\n    return x._seen", set()),  # assigned here
    ("def f(x):\n    return x.__class__", set()),  # dunder names are public
    ("class A:\n    @classmethod\n    def f(cls):\n        a = cls()\n        return a._fitted", set()),  # its own
    ("class A:\n    pass\ndef f(a: A):\n    return a._fitted", set()),  # an argument of its own class
    ("class A:\n    pass\ndef f(a: B):\n    return a._fitted", {"_fitted"}),  # of another's
    ("def f(cls2):\n    a = cls2()\n    return a._fitted", {"_fitted"}),
])
def test_the_private_attribute_check_can_fail(source, expected):
    assert private_attribute_uses(source) == expected


#: No library module over this many lines (issue 41): a newcomer reads one in a sitting.
MAX_MODULE_LINES = 450
#: The modules still over it, with their length as of 2026-11-28: they may only shrink, and leave the list once
#: under the limit.
KNOWN_LONG_MODULES: dict[str, int] = {}


def _module_lines() -> dict[str, int]:
    return {path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
            for path in sorted((REPO / "tgpflow").rglob("*.py"))}


def test_no_library_module_grows_past_the_line_limit():
    lines = _module_lines()
    over = {p: n for p, n in lines.items() if n > KNOWN_LONG_MODULES.get(p, MAX_MODULE_LINES)}
    assert over == {}, f"split these modules (at most {MAX_MODULE_LINES} lines, or their listed length): {over}"
    under = sorted(p for p in KNOWN_LONG_MODULES if lines.get(p, 0) <= MAX_MODULE_LINES)
    assert under == [], f"now within {MAX_MODULE_LINES} lines: remove them from KNOWN_LONG_MODULES: {under}"
