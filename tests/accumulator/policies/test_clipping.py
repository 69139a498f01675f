"""ClipNorm alone: its factor from hand-written window summaries."""
import pytest
from mindspore import Tensor

from accumulator.policies import ClipNorm


@pytest.mark.parametrize("norm, expected", [(4.0, 0.25), (1.0, 1.0), (0.5, 1.0), (0.0, 1.0)])
def test_the_factor_brings_the_norm_down_to_the_limit_and_never_up(norm, expected):
    assert float(ClipNorm(1.0).factor({"norm": Tensor(norm)})) == pytest.approx(expected)


def test_it_asks_for_the_norm_and_nothing_else():
    policy = ClipNorm(2.0)
    assert (policy.needs_norm, policy.needs_finite, policy.gate({}), policy.state_parameters()) == (True, False,
                                                                                                  None, [])


@pytest.mark.parametrize("bad", [0, -1.0, True, "1", None])
def test_a_limit_that_is_not_a_positive_number_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match=f"clip_norm must be a positive number or None, got {bad!r}"):
        ClipNorm(bad)
