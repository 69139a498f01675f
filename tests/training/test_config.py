"""training.config: every setting checked once, by name; derived values without mutation.

By hand: ``TrainConfig(batch_size=0)`` is refused naming batch_size and 0; ``scale_rule='adascale'`` tracks the
gradient noise it reads, ``'linear'`` does not.
"""
import dataclasses
import re

import pytest

from training.config import RESUME_FIELDS, TrainConfig


@pytest.mark.parametrize("settings, message", [
    ({"batch_size": 0}, "batch_size must be a positive int, got 0"),
    ({"accumulate_step": 2.0}, "accumulate_step must be a positive int, got 2.0"),
    ({"epochs": True}, "epochs must be a positive int, got True"),
    ({"seed": -1}, "seed must be a non-negative int, got -1"),
    ({"lr": float("inf")}, "lr must be a positive finite number, got inf"),
    ({"lr": "0.1"}, "lr must be a positive finite number, got '0.1'"),
    ({"optimizer": "rmsprop"}, "optimizer must be one of ('sgd', 'momentum', 'adam', 'adamw'), got 'rmsprop'"),
    ({"device_target": "cpu"}, "device_target must be one of ('CPU', 'GPU', 'Ascend'), got 'cpu'"),
    ({"mode": "eager"}, "mode must be one of ('graph', 'pynative'), got 'eager'"),
    ({"shuffle": 1}, "shuffle must be True or False, got 1"),
    ({"ckpt_dir": ""}, "ckpt_dir must be None or a non-empty path string, got ''"),
    ({"resume": True}, "resume=True needs a ckpt_dir"),
    ({"overwrite": True}, "overwrite=True needs a ckpt_dir"),
    ({"ckpt_dir": "c", "resume": True, "overwrite": True}, "resume=True continues the run in ckpt_dir, overwrite=True"),
    ({"distributed": True, "rank": 2, "ranks": 2}, "rank must be in [0, 2), got 2"),
    ({"ranks": 2}, "ranks > 1 needs distributed=True, got ranks=2"),
    ({"accumulate_step": "8"}, "accumulate_step must be a positive int, got '8'"),
    ({"accumulate_step": "noise", "driver": "window"}, "accumulate_step='noise' changes N in the graph"),
    ({"driver": "fast"}, "driver must be one of"),
    ({"track_noise": 1}, "track_noise must be True or False, got 1"),
    ({"update_cost": 0.0}, "update_cost must be a positive finite number, got 0.0"),
    ({"clip_norm": -1.0}, "clip_norm must be a positive finite number, got -1.0"),
    ({"update_cost": 1.5}, "update_cost sets how the noise-scale window chooses N, got accumulate_step=2: pass "
                           "accumulate_step='noise'"),
    ({"accumulate_step": "auto", "probe_interval": 0}, "probe_interval must be a positive int, got 0"),
    ({"accumulate_step": "auto", "probe_tolerance": 1.0}, "probe_tolerance must be a number in (0, 1), got 1.0"),
    ({"probe_tolerance": 0.1}, "probe_tolerance sets how the measured window probes, got accumulate_step=2: pass "
                               "accumulate_step='auto'"),
    ({"scale_rule": "cubic"}, "scale_rule must be one of ('none', 'linear', 'sqrt', 'adascale'), got 'cubic'"),
    ({"scale_rule": "sqrt"}, "scale_rule='sqrt' sets Adam's betas, which only optimizer='adamw' keeps where it can "
                             "(docs/scale-rules.md), got optimizer='sgd'"),
])
def test_bad_values_name_the_field_and_the_value(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig(**settings)


def test_frozen_and_derived_values_come_as_a_new_config():
    config = TrainConfig(batch_size=16, accumulate_step=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 32
    ranked = dataclasses.replace(config, distributed=True, rank=1, ranks=2)
    assert (config.ranks, config.effective_batch_size, config.main_rank) == (1, 64, True)
    assert (ranked.ranks, ranked.effective_batch_size, ranked.main_rank) == (2, 64, False)  # the run's window
    with pytest.raises(ValueError, match="rank must be in"):
        dataclasses.replace(config, distributed=True, rank=3, ranks=2)


def test_resume_settings_are_what_changes_arithmetic_or_data_order():
    settings = TrainConfig(seed=3, shuffle=False).resume_settings()
    assert tuple(settings) == RESUME_FIELDS
    assert (settings["seed"], settings["shuffle"], settings["ranks"]) == (3, False, 1)
    assert "epochs" not in settings and "log_json" not in settings  # more epochs or new logs resume exactly


def test_adascale_tracks_the_noise_it_reads():
    assert TrainConfig(scale_rule="adascale").tracks_noise and not TrainConfig(scale_rule="linear").tracks_noise
