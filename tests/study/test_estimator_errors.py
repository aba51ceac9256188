"""An error raised inside a learner's estimator keeps its own type and traceback and gains a
PEP 678 note naming the estimator and the row it was on."""

from __future__ import annotations

import numpy as np
import pytest

from pigviz.attention import protocol
from pigviz.decode import custom
from pigviz.study import estimators


def broken_after_a_while(q, keys, values, budget):
    if keys.shape[0] > 8129:  # the shipped capture's position 8,129 onwards (query 1 of 64)
        return 1 / 0
    idx = np.arange(min(budget, keys.shape[0]))
    return protocol.exact_output(q, keys[idx], values[idx]), idx


def _notes(exc) -> str:
    return "\n".join(getattr(exc, "__notes__", []))


def test_evaluate_estimator_names_the_estimator_and_the_row():
    with pytest.raises(ZeroDivisionError) as info:
        estimators.evaluate_estimator(broken_after_a_while, budgets=(0.05,), positions=(0, 1), baselines=())
    notes = _notes(info.value)
    # the first shipped head (layer 2, query head 6 of KV head 2), the second query position
    assert notes == (
        "evaluate_estimator: estimator 'broken_after_a_while' at layer 2, head 6, kv_head 2, "
        "position 8129, n 8130, budget 406 keys (fraction 0.05)"
    )
    # its own traceback: the innermost frame is the estimator's line that divided by zero
    assert info.traceback[-1].name == "broken_after_a_while"


def test_sampled_decoding_names_the_estimator_and_the_row():
    torch = pytest.importorskip("torch")

    def fails(q, keys, values, budget):
        raise RuntimeError("my bug")

    q, k, v = torch.randn(2, 1, 4), torch.randn(1, 10, 4), torch.randn(1, 10, 4)
    with pytest.raises(RuntimeError, match="my bug") as info:
        custom.decode_rows(fails, q, k, v, 0.5, 0.5, layer=3)
    notes = _notes(info.value)
    assert "sampled decoding: estimator 'fails' at layer 3, head 0, position 9, n 10, budget 5 keys" in notes
    assert info.traceback[-1].name == "fails"
