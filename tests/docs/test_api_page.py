"""docs/api.md gives every public signature it lists as the code has it: names, order and defaults.

By hand: the page's row ``accumulator.batch_size.ScaleRule(accumulator, rule="sqrt", tuned_step=None)`` names
the parameters of ``inspect.signature(ScaleRule)``, in its order, with its defaults.
"""
import ast
import importlib
import inspect
import pathlib
import re

import accumulator
from tests import REPO_ROOT
from accumulator import Accumulator

PAGE = pathlib.Path(REPO_ROOT) / "docs" / "api.md"
CALL = re.compile(r"`([A-Za-z_][\w.]*)\(([^`]*)\)`")


def written(signature):
    """A signature's parameters as ``(name, default, keyword-only)``, ``self`` left out."""
    return [(p.name, p.default, p.kind == p.KEYWORD_ONLY) for p in signature.parameters.values() if p.name != "self"]


def as_written(text):
    """The page's parameter list, ``a, b=1e-4, *, c=None``, in ``written``'s form."""
    arguments = ast.parse(f"def f({text}): pass").body[0].args
    defaults = [inspect.Parameter.empty] * (len(arguments.args) - len(arguments.defaults)) + [
        ast.literal_eval(default) for default in arguments.defaults]
    keyword_defaults = [inspect.Parameter.empty if default is None else ast.literal_eval(default)
                        for default in arguments.kw_defaults]
    return ([(a.arg, d, False) for a, d in zip(arguments.args, defaults)]
            + [(a.arg, d, True) for a, d in zip(arguments.kwonlyargs, keyword_defaults)])


def resolve(name, module):
    """The object a row names: ``accumulator...`` by its path, ``accumulator(...)`` and its methods on the
    class, a bare name in the module of the row's previous entry (else the top level)."""
    parts = name.split(".")
    if parts[0] == "accumulator" and len(parts) > 1 and not hasattr(Accumulator, parts[1]):
        for cut in range(len(parts) - 1, 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for part in parts[cut:]:
                found = getattr(found, part)
            return found, ".".join(parts[:cut])
    if parts[0] == "accumulator":
        return (getattr(Accumulator, parts[1]) if len(parts) > 1 else Accumulator.__call__), module
    return getattr(importlib.import_module(module), name), module


def listed(text):
    """``(name, what the page writes, whether the code agrees)`` for every call in the first cell of a table row."""
    for row in text.splitlines():
        if not row.startswith("| "):
            continue
        module = "accumulator"
        for name, parameters in CALL.findall(row.split(" | ")[0]):
            found, module = resolve(name, module)
            yield name, parameters, as_written(parameters) == written(inspect.signature(found))


def test_every_signature_on_the_page_is_the_codes():
    rows = list(listed(PAGE.read_text(encoding="utf-8")))
    assert len(rows) >= 15 and "Accumulator" in [name for name, _, _ in rows]
    assert [(name, page) for name, page, agrees in rows if not agrees] == []


def test_a_stale_signature_is_seen():
    # 0.2.0's README listed NoiseScaleSchedule without update_cost, which it has since taken.
    stale = ("| `accumulator.batch_size.NoiseScaleSchedule(micro_batch_size, min_step=1, max_step=64, ranks=1, "
             "hysteresis=1.5, first_step=None)`, `CriticalBatchSchedule(interval)` | ... |")
    assert [(name, page) for name, page, agrees in listed(stale) if not agrees] == [
        ("accumulator.batch_size.NoiseScaleSchedule",
         "micro_batch_size, min_step=1, max_step=64, ranks=1, hysteresis=1.5, first_step=None"),
        ("CriticalBatchSchedule", "interval")]
