"""benchmarks/kernels.py times the same computation in both frameworks."""
import numpy as np
import pytest

from benchmarks import kernels


def expected(arrays):
    x, w, dy, big = (a.astype(np.float64) for a in arrays)
    return {"forward": x @ w.T, "weight_grad": dy.T @ x, "input_grad": dy @ w, "relu": np.maximum(dy, 0),
            "assign_add": big,  # the first call adds into a zero buffer
            "reduce_sum": big.sum(), "matmul_sum": big.sum(), "scale": big * 0.5}


def check(cases, to_numpy):
    arrays = kernels.kernel_inputs()
    assert set(cases) == {key for key, _ in kernels.KERNELS}
    for key, want in expected(arrays).items():
        # Float32 sums of 16.7M numbers round differently from float64 ones.
        np.testing.assert_allclose(to_numpy(cases[key]()), want, rtol=1e-4, err_msg=key)


def test_mindspore_kernels_compute_what_their_labels_say():
    check(kernels.mindspore_kernels(kernels.kernel_inputs())[0], lambda tensor: tensor.asnumpy())


def test_torch_kernels_compute_the_same():
    pytest.importorskip("torch")
    check(kernels.torch_kernels(kernels.kernel_inputs())[0], lambda tensor: tensor.numpy())


def test_table_has_one_line_per_kernel_and_ratios():
    rows = [dict(kernel=label, mindspore_ms=2.0, torch_ms=0.5) for _, label in kernels.KERNELS]
    rows[-1]["torch_ms"] = None
    lines = kernels.format_kernels(rows).splitlines()
    assert len(lines) == 1 + len(kernels.KERNELS)
    assert lines[1].endswith("4.00") and lines[-1].split()[-1] == "n/a"
