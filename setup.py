"""Installs the `accumulator` library only; `training`, `data`, `models`, `benchmarks` and `scripts/` run from
the checkout (their packages: the `tools` extra).

The version is read from accumulator/__init__.py, its one source (importing the package would need mindspore).
"""
import re

from setuptools import find_packages, setup

with open("accumulator/__init__.py", encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)

setup(
    name="mindspore-accumulator",
    version=VERSION,
    description="Gradient accumulation for MindSpore: a large effective batch on a small device, in one graph",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    packages=find_packages(include=["accumulator", "accumulator.*"]),
    package_data={"accumulator": ["py.typed"]},
    # docs/versions.md: the suite runs on 3.11; MindSpore's newest release for 3.9 is 2.9.0, and it ships
    # no wheel for 3.13 (2.10.0 stops at 3.12).
    python_requires=">=3.9,<3.13",
    # What `import accumulator` needs, and nothing else.
    install_requires=[
        # The releases tested (docs/versions.md): 2.7.0 lacks nn.Dropout2dExt and its compiled
        # mint.optim.Adam steps 1000x too far on CPU (docs/mindspore-behaviours.md#versions).
        # .ci/run tests this lower bound and the newest release; raise the upper one once 2.11 passes there.
        "mindspore>=2.7.1,<2.11",
        # The mindspore 2.x wheels are built against NumPy 1.x: with NumPy 2,
        # eager Tensor ops fail with "numpy.core.multiarray failed to import".
        "numpy>=1.20,<2",
    ],
    # A literal: tests/docs/test_docs.py reads the extras' names from it.
    extras_require={
        # The command-line tools in scripts/, run from the checkout: the datasets' download and the progress bar.
        "tools": ["download>=0.3.5", "tqdm"],
        # Everything the whole suite imports: the tools (it runs them), plots (doctests too), and what the wheel
        # test builds with; pytest-xdist runs the README's test command in two processes (-n 2); sybil runs the
        # docs' python blocks (tests/docs/test_docs.py).
        "test": ["download>=0.3.5", "tqdm", "pytest>=7", "pytest-xdist", "sybil>=6", "matplotlib", "setuptools",
                 "wheel"],
        "plot": ["matplotlib"],
    },
    classifiers=[
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Typing :: Typed",
    ],
)
