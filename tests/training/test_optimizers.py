"""training/optimizers.py: the optimizers a run asks for by name, and their schedules.

By hand: on this CPU ``make_optimizer('adamw', ...)`` is ``experimental.optim.AdamW`` (mint's has no CPU
kernel); on GPU and Ascend it is ``mint.optim.AdamW``.
"""
import numpy as np
from mindspore import mint, nn
from mindspore.experimental import optim
from mindspore.nn import PolynomialDecayLR

from accumulator import Accumulator
from training.optimizers import FollowSchedule, adamw_class, make_lr_scheduler, make_optimizer


def test_adamw_is_mint_where_it_has_kernels_and_experimental_on_cpu():
    assert adamw_class("GPU") is mint.optim.AdamW and adamw_class("Ascend") is mint.optim.AdamW
    assert type(make_optimizer("adamw", nn.Dense(3, 2).trainable_params(), 0.01)) is optim.AdamW  # this CPU


def test_mints_adamw_takes_the_same_arguments_schedule_and_accumulator():
    # mint's AdamW cannot run on CPU: what can be checked here is that the run builds around it.
    net, schedule = nn.Dense(3, 2), PolynomialDecayLR(0.1, 0.0, decay_steps=4, power=1.0)
    optimizer = adamw_class("GPU")(net.trainable_params(), lr=0.1, weight_decay=0.0)
    scheduler = make_lr_scheduler(optimizer, schedule)
    assert isinstance(scheduler, FollowSchedule)
    scheduler.step()
    np.testing.assert_allclose(float(scheduler.get_last_lr()[0]), 0.075, rtol=1e-6)
    assert Accumulator(optimizer, 2).optimizer is optimizer
