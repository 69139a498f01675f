"""benchmarks/configs.py: which configurations a run measures, and the checks of the command line's values."""
import argparse

import pytest

from benchmarks.configs import BLOCKING_SETTINGS, SWEPT, make_configs, name_list, positive, positive_int_list
from benchmarks.contenders import CONTENDERS, available_contenders


def test_every_contender_runs_in_both_runtime_settings():
    # What --quick --sweep '' measures.
    configs = make_configs(["mnist", "wide"], ["graph"], available_contenders(), batch=32, accumulate=8)
    mindspore_rows = [c for c in configs if c["blocking"] != "n/a"]
    assert {c["blocking"] for c in mindspore_rows} == {"1", ""}
    assert len(mindspore_rows) % 2 == 0


def test_modes_keep_each_contenders_own_and_other_frameworks_run_once_in_eager():
    names = ["plain_micro", "window", "torch_accumulate"]
    configs = make_configs(["mnist"], ["graph", "pynative"], names, batch=4, accumulate=2)
    seen = {(c["contender"], c["mode"], c["blocking"]) for c in configs}
    assert seen == ({("plain_micro", m, b) for m in ("graph", "pynative") for b in BLOCKING_SETTINGS}
                    | {("window", "graph", b) for b in BLOCKING_SETTINGS} | {("torch_accumulate", "eager", "n/a")})
    assert all(CONTENDERS[c["contender"]].modes.count(c["mode"]) for c in configs)


def test_the_sweep_adds_one_graph_memory_row_per_n_and_swept_contender():
    configs = make_configs(["mnist"], ["graph"], [], batch=32, accumulate=8, sweep=[1, 16], sweep_net="wide")
    assert [(c["contender"], c["accumulate"]) for c in configs] == [(name, n) for n in (1, 16) for name in SWEPT]
    assert {(c["kind"], c["net"], c["hidden"], c["mode"], c["blocking"]) for c in configs} == {
        ("memory", "wide", 4096, "graph", "1")}


def test_value_checks_accept_good_values_and_name_the_valid_ones():
    assert name_list(["a", "b"])(" b , a") == ["b", "a"]
    assert name_list(["a"], allow_empty=True)("") == []
    with pytest.raises(argparse.ArgumentTypeError, match=r"invalid choice: '' \(choose from 'a'\)"):
        name_list(["a"])("")
    assert positive(float)("0.5") == 0.5 and positive(int)("3") == 3
    for bad in ("0", "-1", "inf", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
            positive(float)(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        positive(int)("1.5")
    assert positive_int_list(" ") == [] and positive_int_list("1, 8") == [1, 8]
