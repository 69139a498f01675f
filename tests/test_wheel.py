"""The library as a user installs it: a wheel holding ``accumulator`` alone, importable and training in a clean venv.

Its tests stand alone too: they import none of the tools beside it.
"""
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from accumulator import __version__
from training.command import PYTHON_VERSIONS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS_DIR = os.path.join(REPO_ROOT, "tests")
LIBRARY_TESTS = ("test_accumulator", "test_batchnorm", "test_buckets", "test_cell", "test_distributed", "test_noise",
                 "test_optimizers", "test_precision", "test_safety", "test_schedule", "test_selfcheck", "test_state",
                 "test_step", "test_whole_batch", "test_window")
# MindSpore's CPU launch setting (docs/mindspore-behaviours.md): the library may set it, nothing else may.
BLOCKING_RUN = "MS_DEV_HOST_BLOCKING_RUN"
TOOLS = ("benchmarks", "common", "data", "models", "scripts", "tool_helpers", "training")
# One window of 2 micro-batches from the installed package: the weights move once.
ONE_WINDOW = """
import os, sys
import mindspore as ms, numpy as np
from mindspore import nn
import accumulator
from accumulator import Accumulator
net = nn.Dense(3, 1)
optimizer = nn.SGD(net.trainable_params(), 0.1)
acc = Accumulator(optimizer, accumulate_step=2)
grad_fn = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(), None, optimizer.parameters)
x, y = ms.Tensor(np.ones((4, 3), np.float32)), ms.Tensor(np.zeros((4, 1), np.float32))
before = net.weight.asnumpy().copy()
for _ in range(2):
    acc(grad_fn(x, y)[1])
print(os.path.dirname(accumulator.__file__), accumulator.__version__, int(acc.update_count),
      not np.allclose(before, net.weight.asnumpy()))
"""


def test_the_library_tests_import_no_tool():
    code = (f"import sys; sys.path[:0] = [{REPO_ROOT!r}, {TESTS_DIR!r}]\n"
            f"import conftest\n"
            f"for name in {LIBRARY_TESTS!r}: __import__(name)\n"
            f"print(sorted({{name.split('.')[0] for name in sys.modules}} & set({TOOLS!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "[]"


def test_the_data_the_models_and_common_load_without_the_library_and_set_nothing():
    lab = [f"{folder}.{name[:-3]}" for folder in ("common", "data", "models")
           for name in sorted(os.listdir(os.path.join(REPO_ROOT, folder))) if name.endswith(".py")]
    code = (f"import os, sys; sys.path.insert(0, {REPO_ROOT!r})\n"
            f"import mindspore as ms\n"
            f"context = {{key: ms.get_context(key) for key in ('mode', 'device_target', 'max_call_depth')}}\n"
            f"for name in {lab!r}: __import__(name)\n"
            f"print('accumulator' in sys.modules, {BLOCKING_RUN!r} in os.environ,\n"
            f"      context == {{key: ms.get_context(key) for key in context}})")
    # This process imported the library, which may have set the variable: the child starts without it.
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", BLOCKING_RUN)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data.tokens" in lab and "models.mnist" in lab and "common.files" in lab
    assert result.stdout.split() == ["False", "False", "True"]


def test_setup_and_help_name_the_same_python_versions():
    setup = open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8").read()
    low, high = re.search(r'python_requires=">=3\.(\d+),<3\.(\d+)"', setup).groups()
    assert PYTHON_VERSIONS == f"3.{low} to 3.{int(high) - 1}"
    classified = re.findall(r"Programming Language :: Python :: 3\.(\d+)", setup)
    assert [int(minor) for minor in classified] == list(range(int(low), int(high)))


@pytest.mark.slow
def test_the_wheel_installs_accumulator_alone_and_it_trains(tmp_path):
    # Built from a copy of what setup.py reads, so that the build leaves no build/ or egg-info in the checkout.
    source = tmp_path / "source"
    shutil.copytree(os.path.join(REPO_ROOT, "accumulator"), source / "accumulator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "README.md"):
        shutil.copy(os.path.join(REPO_ROOT, name), source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)
    wheel, = (tmp_path / "dist").iterdir()
    files = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in files}
    assert top_level == {"accumulator", f"mindspore_accumulator-{__version__}.dist-info"}
    assert "accumulator/py.typed" in files

    # A clean venv that sees the interpreter's packages (mindspore) after its own, through a .pth file.
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

    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    result = subprocess.run([python, "-c", ONE_WINDOW], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    location, version, updates, moved = result.stdout.split()[-4:]
    assert location == os.path.join(site_packages, "accumulator")
    assert (version, updates, moved) == (__version__, "1", "True")
