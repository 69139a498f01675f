"""The package's layers (docs/layout.md): a short top level, sub-packages that import only the layers before
them, and every import path of 0.2.0 still working, with one warning.

By hand: ``accumulator.plan`` was the memory plan in 0.2.0; importing it now gives ``accumulator.memory.plan``
itself and warns once that the path moved.
"""
import ast
import importlib
import pathlib
import subprocess
import sys
import warnings

import pytest

import accumulator
from accumulator._internal.aliases import MODULES, NAMES

PACKAGE = pathlib.Path(accumulator.__file__).parent
# Each sub-package may import those before it, never one after it (nor itself through the top level).
LAYERS = ["_internal", "devices", "policies", "batch_size", "core", "drivers", "memory"]


def test_the_top_level_holds_at_most_15_names_and_a_short_docstring():
    assert len(accumulator.__all__) <= 15
    assert len(accumulator.__doc__.strip().splitlines()) <= 10
    assert all(hasattr(accumulator, name) for name in accumulator.__all__)


def imported_layers(path):
    """The sub-packages a module imports (``accumulator.X...``), at run time (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    checking = {id(node) for stmt in ast.walk(tree) if isinstance(stmt, ast.If)
                and getattr(stmt.test, "id", "") == "TYPE_CHECKING" for node in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in checking or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "accumulator":
                yield parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("layer", LAYERS)
def test_a_sub_package_imports_only_the_layers_before_it(layer):
    allowed = set(LAYERS[:LAYERS.index(layer) + 1])
    for path in sorted((PACKAGE / layer).glob("*.py")):
        for imported in imported_layers(path):
            assert imported in allowed, f"{path.relative_to(PACKAGE)} imports accumulator.{imported or '<top>'}"


def test_every_020_module_path_is_the_module_that_holds_it_now_and_warns_once():
    code = ("import warnings, importlib\n"
            "warnings.simplefilter('always')\n"
            "import accumulator\n"
            f"for old, new in {MODULES!r}.items():\n"
            "    with warnings.catch_warnings(record=True) as caught:\n"
            "        warnings.simplefilter('always')\n"
            "        module = importlib.import_module('accumulator.' + old)\n"
            "        again = importlib.import_module('accumulator.' + old)\n"
            "    assert module is again is importlib.import_module('accumulator.' + new), old\n"
            "    assert module.__spec__.name == 'accumulator.' + new, old\n"
            "    moved = [w for w in caught if 'accumulator.' + old + ' is deprecated' in str(w.message)]\n"
            "    assert len(moved) == 1 and issubclass(moved[0].category, DeprecationWarning), (old, caught)\n"
            "print('ok')\n")
    # A fresh process: this one has imported some of the old paths already.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_020_top_level_name_is_its_sub_packages_with_a_warning(name):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        old = getattr(accumulator, name)
    assert old is getattr(importlib.import_module(f"accumulator.{NAMES[name]}"), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        accumulator.nothing


def private_imports(path):
    """What a file imports from the library that is private: an ``_internal`` module or an underscore name."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "accumulator":
            names = node.module.split(".") + [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [part for alias in node.names if alias.name.startswith("accumulator.")
                     for part in alias.name.split(".")]
        else:
            continue
        if any(name.startswith("_") for name in names):
            yield f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"


def test_the_tools_use_the_librarys_public_names_only():
    tools = [path for folder in ("benchmarks", "common", "data", "models", "scripts", "training")
             for path in sorted((PACKAGE.parent / folder).glob("*.py"))]
    assert len(tools) > 20 and list(private_imports(PACKAGE / "core" / "checkpoints.py"))  # it sees _internal
    assert [where for path in tools for where in private_imports(path)] == []
