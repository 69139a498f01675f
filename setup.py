"""Installs the `accumulator` library with `training`, `data` and `models`; `scripts/` run from the checkout."""
from setuptools import setup

setup(
    name="mindspore-accumulator",
    version="0.1.0",
    description="Gradient accumulation for MindSpore: a large effective batch on a small device, in one graph",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=["accumulator", "training", "data", "models"],
    python_requires=">=3.9,<3.12",
    install_requires=[
        "mindspore>=2.3",
        # The mindspore 2.x wheels are built against NumPy 1.x: with NumPy 2,
        # eager Tensor ops fail with "numpy.core.multiarray failed to import".
        "numpy>=1.20,<2",
        "download>=0.3.5",
        "tqdm",
    ],
    extras_require={
        "test": ["pytest>=7"],
        "plot": ["matplotlib"],
    },
    classifiers=[
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
    ],
)
