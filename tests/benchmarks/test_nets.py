"""benchmarks/nets.py: the nets of many tensors the speed targets are measured on.

By hand: ``mnist`` holds 6 trainable tensors, ``deep48`` 48 and ``deep128`` 128.
"""
import mindspore as ms
import numpy as np
import pytest

from benchmarks.nets import NETS, mindspore_net, numpy_data


@pytest.mark.parametrize("name, tensors", [("mnist", 6), ("deep48", 48), ("deep128", 128)])
def test_each_net_holds_the_tensors_its_name_says(name, tensors):
    net, _ = mindspore_net(dict(NETS[name]))
    assert len(net.trainable_params()) == tensors


def test_the_language_model_is_the_projects_and_its_loss_is_a_token_mean():
    spec = dict(NETS["lm"], hidden=8)
    net, loss_fn = mindspore_net(spec)
    assert len(net.trainable_params()) > 20  # tens of small tensors, like a real model
    inputs, targets = numpy_data(spec, 2)
    assert inputs.shape == targets.shape and (inputs[:, 1:] == targets[:, :-1]).all()
    # Untrained on a 256-token vocabulary: the mean cross-entropy is near log(256).
    loss = float(loss_fn(net, ms.Tensor(inputs), ms.Tensor(targets)))
    assert abs(loss - np.log(256)) < 1.0
