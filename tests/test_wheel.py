"""The library as a user installs it: an sdist and a wheel holding ``accumulator`` alone, which in a clean venv runs the
README's first example and imports every module of its own (the suite runs their doctests from the checkout).

The library stands alone: its tests import none of the tools beside it; the tools' data, models and shared
helpers set nothing in MindSpore when imported (they write files through the library's atomic write).

By hand: setup.py's ``python_requires=">=3.9,<3.13"`` says 3.9 to 3.12, and so must the tools' help and the
README; the wheel holds ``accumulator/`` and its dist-info, nothing else.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

from accumulator import __version__
from training.command import PYTHON_VERSIONS
from tests import REPO_ROOT

# The library's own tests: every module under tests/accumulator (.ci/run runs that folder on the oldest release).
LIBRARY_TESTS = sorted(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
                       for path in pathlib.Path(REPO_ROOT, "tests", "accumulator").rglob("*.py") if path.stem != "__init__")
# MindSpore's CPU launch setting (docs/mindspore-behaviours.md): the library may set it, nothing else may.
BLOCKING_RUN = "MS_DEV_HOST_BLOCKING_RUN"
TOOLS = ("benchmarks", "common", "data", "models", "scripts", "training")
# What the sdist must hold beside the package and setup.py (MANIFEST.in).
SDIST_DOCUMENTS = ("LICENSE", "README.md", "CHANGELOG.md")


def test_the_library_tests_import_no_tool():
    assert "tests.accumulator.drivers.test_window" in LIBRARY_TESTS and "tests.accumulator.helpers" in LIBRARY_TESTS
    # With the conftest and the msrun launcher they load; the launcher imports a case's worker when a test names it.
    code = (f"import sys; sys.path.insert(0, {REPO_ROOT!r})\n"
            f"for name in ['tests.conftest', 'tests.msrun', *{LIBRARY_TESTS!r}]: __import__(name)\n"
            f"print(sorted(name for name in sys.modules if name.split('.')[0] in {TOOLS!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "[]"


def test_the_data_the_models_and_common_set_nothing_when_imported():
    lab = [f"{folder}.{name[:-3]}" for folder in ("common", "data", "models")
           for name in sorted(os.listdir(os.path.join(REPO_ROOT, folder))) if name.endswith(".py")]
    code = (f"import os, sys; sys.path.insert(0, {REPO_ROOT!r})\n"
            f"import mindspore as ms\n"
            f"context = {{key: ms.get_context(key) for key in ('mode', 'device_target', 'max_call_depth')}}\n"
            f"for name in {lab!r}: __import__(name)\n"
            f"print({BLOCKING_RUN!r} in os.environ, context == {{key: ms.get_context(key) for key in context}})")
    # This process imported the library, which may have set the variable: the child starts without it.
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", BLOCKING_RUN)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data.tokens" in lab and "models.mnist" in lab and "common.checks" in lab
    assert result.stdout.split() == ["False", "True"]


def test_setup_the_help_and_the_readme_name_the_same_python_versions():
    setup = open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8").read()
    low, high = re.search(r'python_requires=">=3\.(\d+),<3\.(\d+)"', setup).groups()
    assert PYTHON_VERSIONS == f"3.{low} to 3.{int(high) - 1}"
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    assert f"**Python**: {PYTHON_VERSIONS} accepted" in readme
    classified = re.findall(r"Programming Language :: Python :: 3\.(\d+)", setup)
    assert [int(minor) for minor in classified] == list(range(int(low), int(high)))


def readme_first_example():
    """The README's first ```python block, and the number its last line's comment says it prints."""
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(r"^```python\n(.*?)^```$", readme, re.S | re.M).group(1)
    return block, re.search(r"^print\(.*#\s*(\d+)\b", block.rstrip().split("\n")[-1]).group(1)


@pytest.mark.slow
def test_the_sdist_and_the_wheel_install_accumulator_alone_which_runs_the_readme_and_imports_every_module(tmp_path):
    # Built from a copy of what setup.py and MANIFEST.in read, so that the build leaves no build/ or egg-info
    # in the checkout; the wheel from the sdist alone, as pip builds it from PyPI.
    source, dist = tmp_path / "source", tmp_path / "dist"
    shutil.copytree(os.path.join(REPO_ROOT, "accumulator"), source / "accumulator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "MANIFEST.in") + SDIST_DOCUMENTS:
        shutil.copy(os.path.join(REPO_ROOT, name), source)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)], cwd=source, check=True,
                   capture_output=True)
    sdist, = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        held = {name.split("/", 1)[-1] for name in archive.getnames()}
    assert {"setup.py", "accumulator/__init__.py", "accumulator/py.typed", *SDIST_DOCUMENTS} <= held
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(dist), str(sdist)], check=True, capture_output=True)
    wheel, = dist.glob("*.whl")
    files = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in files}
    assert top_level == {"accumulator", f"mindspore_accumulator-{__version__}.dist-info"}
    assert "accumulator/py.typed" in files
    assert any(name.endswith("/LICENSE") for name in files)  # dist-info/ or, with newer setuptools, its licenses/

    # A clean venv that sees the interpreter's packages (mindspore, pytest) after its own, through a .pth file:
    # its lines are plain paths, so an editable install of the checkout there stays out of this one.
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = str(environment / "bin" / "python")
    site_packages = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                                   capture_output=True, text=True).stdout.strip()
    ours = [path for path in sys.path if path.endswith("site-packages")]
    with open(os.path.join(site_packages, "interpreter.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(ours) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True)
    assert set(os.listdir(site_packages)) - {"interpreter.pth"} == top_level
    installed = os.path.join(site_packages, "accumulator")

    # From an empty folder, without the checkout on the path, in one interpreter: the README's first example, then
    # every module.
    away = tmp_path / "away"
    away.mkdir()
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    example, prints = readme_first_example()
    modules = sorted(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for path in pathlib.Path(REPO_ROOT, "accumulator").rglob("*.py"))
    where = ("import importlib, importlib.util, os, sys\n"
             "package = importlib.import_module('accumulator')\n"
             "print(os.path.dirname(package.__file__), package.__version__, importlib.util.find_spec('training'))\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             "print(sorted(name for name in sys.modules if name.split('.')[0] == 'accumulator') == sorted("
             f"{modules!r}), sys.modules['accumulator.memory.plan'].__file__.startswith({installed!r}))\n")
    (away / "readme_example.py").write_text(example + where, encoding="utf-8")  # ms.jit reads its source
    result = subprocess.run([python, "readme_example.py"], cwd=away, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-4:] == [prints, f"{installed} {__version__} None", "True True", ""]
