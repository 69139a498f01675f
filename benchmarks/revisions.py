"""This checkout's accumulator against an earlier revision's, paired in one process: was speed lost?

The earlier ``accumulator/`` is taken from git (``git archive``) into a
temporary folder under another package name, so both import side by side
and their steps are timed block by block in turn, on the same net and data.
Two ways to drive each: the recommended step (``accumulate`` in the jitted
micro-step, ``step()`` on the host) and the in-graph call.

    python -m benchmarks.revisions --revision 8bad423 --nets deep48,deep128,lm,mnist --rounds 9
"""
import argparse
import importlib
import io
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("recommended", "in_graph")


def import_revision(revision, folder):
    """The package ``accumulator/`` as it was at ``revision``, imported as ``accumulator_<revision>``.

    Example:
        >>> package = import_revision("HEAD", tempfile.mkdtemp())
        >>> package.__name__, hasattr(package, "Accumulator")
        ('accumulator_HEAD', True)
    """
    name = "accumulator_" + re.sub(r"\W", "_", revision)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "accumulator"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = Path(folder) / name
    (Path(folder) / "accumulator").rename(package)
    for source in package.glob("*.py"):
        text = re.sub(r"\b(from|import) accumulator\b", rf"\1 {name}", source.read_text(encoding="utf-8"))
        source.write_text(text, encoding="utf-8")
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def make_step(package, spec, kind, accumulate_step, batch):
    """A no-argument call that runs one micro-step of ``kind`` with ``package``'s Accumulator, Adam, on ``spec``'s net."""
    import mindspore as ms
    from mindspore import Tensor, nn
    from benchmarks.nets import mindspore_net, numpy_data

    net, loss_fn = mindspore_net(spec)
    optimizer = nn.Adam(net.trainable_params(), 1e-4)
    accumulator = package.Accumulator(optimizer, accumulate_step)
    x, y = (Tensor(array) for array in numpy_data(spec, batch))

    def forward(inputs, targets):
        return loss_fn(net, inputs, targets)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    if kind == "recommended":
        @ms.jit
        def micro_step(inputs, targets):
            loss, grads = grad_fn(inputs, targets)
            accumulator.accumulate(grads)
            return loss

        def call():
            micro_step(x, y)
            accumulator.step()
        return call

    @ms.jit
    def train_step(inputs, targets):
        loss, grads = grad_fn(inputs, targets)
        return loss, accumulator(grads)
    return lambda: train_step(x, y)


def paired_ratios(block_ms):
    """Per kind, the median ms per micro-step of each side and the median and range of after/before, block by block.

    Example:
        >>> paired_ratios({("recommended", "before"): [2.0, 4.0], ("recommended", "after"): [1.0, 4.4]})
        {'recommended': {'before': 3.0, 'after': 2.7, 'ratio': 0.8, 'low': 0.5, 'high': 1.1}}
    """
    rows = {}
    for kind in dict.fromkeys(kind for kind, _ in block_ms):
        before, after = block_ms[(kind, "before")], block_ms[(kind, "after")]
        ratios = sorted(a / b for a, b in zip(after, before))
        rows[kind] = {"before": statistics.median(before), "after": statistics.median(after),
                      "ratio": round(statistics.median(ratios), 6), "low": round(ratios[0], 6),
                      "high": round(ratios[-1], 6)}
    return rows


def measure(revision, net, rounds, accumulate_step=4, batch=16, calls=40):
    """``paired_ratios`` for ``net``: this checkout's accumulator ("after") against ``revision``'s ("before")."""
    import mindspore as ms
    import accumulator
    from benchmarks.nets import NETS

    ms.set_context(mode=ms.GRAPH_MODE)
    before = import_revision(revision, tempfile.mkdtemp())
    spec = dict(NETS[net])
    steps = {(kind, side): make_step(package, spec, kind, accumulate_step, batch)
             for kind in KINDS for side, package in (("before", before), ("after", accumulator))}
    for step in steps.values():  # compiles, and a few windows to warm up
        for _ in range(3 * accumulate_step):
            step()
    block_ms = {key: [] for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            start = time.perf_counter()
            for _ in range(calls):
                step()
            block_ms[key].append((time.perf_counter() - start) / calls * 1e3)
    return paired_ratios(block_ms)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", required=True, help="the git revision to compare against")
    parser.add_argument("--nets", default="deep48,deep128,lm,mnist")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    print("| net | step | before ms | after ms | after/before (range) |\n| --- | --- | --- | --- | --- |")
    for net in args.nets.split(","):
        # One process per net, as the paired benchmark: the nets' graphs do not share a process.
        out = subprocess.run([sys.executable, "-c", "import json; from benchmarks.revisions import measure; "
                              f"print(json.dumps(measure({args.revision!r}, {net!r}, {args.rounds})))"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout
        for kind, row in json.loads(out.strip().splitlines()[-1]).items():
            print(f"| {net} | {kind} | {row['before']:.3f} | {row['after']:.3f} | {row['ratio']:.3f} "
                  f"({row['low']:.3f}-{row['high']:.3f}) |")


if __name__ == "__main__":
    main()
