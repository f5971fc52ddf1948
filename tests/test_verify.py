"""Output comparison and poisoning, table-tested."""

import numpy as np
import pytest

from eat.runners.verify import compare, poison

REF = np.array([[1.0, -2.0, 0.0], [3.0, 1e-7, -4.0]], dtype=np.float32)


@pytest.mark.parametrize(
    "name,out,ok",
    [
        ("exact", REF.copy(), True),
        ("reordered sums", REF * (1 + 3e-6), True),
        ("near-zero entry off by accumulation noise", REF + np.float32(2e-5) * (REF == 1e-7), True),
        ("all zeros", np.zeros_like(REF), False),
        ("one element wrong", np.where(REF == 3.0, 3.1, REF), False),
        ("unwritten element", np.where(REF == -4.0, np.nan, REF), False),
        ("inf instead of value", np.where(REF == 1.0, np.inf, REF), False),
    ],
)
def test_compare_float(name, out, ok):
    result = compare(out.astype(np.float32), REF, rtol=1e-4, atol=0.0)
    assert (result is None) == ok, (name, result)


def test_mismatch_reports_position_and_unwritten():
    out = REF.copy()
    out[1, 2] = np.nan
    m = compare(out, REF, 1e-4, 0)
    assert m.bad == 1 and m.unwritten == 1 and m.first_index == [1, 2]
    assert "never written" in m.summary


def test_nan_and_inf_positions_must_match():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare(ref.copy(), ref, 1e-4, 0) is None
    assert compare(np.array([np.nan, np.inf, np.inf, 1.0]), ref, 1e-4, 0).first_index == [2]
    assert compare(np.array([0.0, np.inf, -np.inf, 1.0]), ref, 1e-4, 0) is not None


def test_integers_exact_and_poison_is_not_a_valid_answer():
    ref = np.arange(6, dtype=np.int32)
    assert compare(ref.copy(), ref, 1e-4, 0) is None
    out = ref.copy()
    poison(out)
    assert compare(out, ref, 1e-4, 0).bad == 6
    f = np.zeros(4, np.float32)
    poison(f)
    assert np.isnan(f).all()
