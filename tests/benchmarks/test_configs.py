"""benchmarks/configs.py: which configurations a run measures, and the checks of the command line's values.

By hand: the mnist net in graph and pynative modes with plain_micro and window: plain_micro runs in both modes,
window in graph alone, each with the blocking launch on and off.
"""
import argparse

import pytest

from benchmarks.configs import BLOCKING_SETTINGS, SWEPT, make_configs, name_list, positive, positive_int_list


def test_each_contender_runs_in_its_own_modes_with_the_blocking_runtime_on_and_off():
    configs = make_configs(["mnist"], ["graph", "pynative"], ["plain_micro", "window"], batch=4, accumulate=2)
    seen = {(c["contender"], c["mode"], c["blocking"]) for c in configs}
    assert seen == ({("plain_micro", m, b) for m in ("graph", "pynative") for b in BLOCKING_SETTINGS}
                    | {("window", "graph", b) for b in BLOCKING_SETTINGS})


def test_the_sweep_adds_one_graph_memory_row_per_n_and_swept_contender():
    configs = make_configs(["mnist"], ["graph"], [], batch=32, accumulate=8, sweep=[1, 16], sweep_net="wide")
    assert [(c["contender"], c["accumulate"]) for c in configs] == [(name, n) for n in (1, 16) for name in SWEPT]
    assert {(c["kind"], c["net"], c["hidden"], c["mode"], c["blocking"]) for c in configs} == {
        ("memory", "wide", 4096, "graph", "1")}


def test_value_checks_accept_good_values_and_name_the_valid_ones():
    assert name_list(["a", "b"])(" b , a") == ["b", "a"]
    with pytest.raises(argparse.ArgumentTypeError, match=r"invalid choice: '' \(choose from 'a'\)"):
        name_list(["a"])("")
    for bad in ("0", "-1", "inf", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
            positive(float)(bad)
    assert positive_int_list(" ") == [] and positive_int_list("1, 8") == [1, 8]
