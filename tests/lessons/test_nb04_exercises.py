"""Notebook 04's three exercises: the checks accept every correct way a learner may write them
(per-element math.acos, loops, torch, the library), reject each known mistake naming that mistake
and no other, and test only what their task statements say."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lsh import simhash as sh

torch = pytest.importorskip("torch")

NAMES = ["04.bit_agreement", "04.inclusion_probability", "04.log_inclusion_probability"]


def _message(name, fn) -> str:
    with pytest.raises(ex.CheckFailed) as info:
        ex.check(name, fn)
    return str(info.value)


# --------------------------------------------------------------------------- bit_agreement


def bit_agreement_math_acos_clipped(cos):
    """Element by element with math.acos, clipping each cosine: what the task asks for."""
    c = np.asarray(cos, dtype=float)
    p = np.array([1.0 - math.acos(max(-1.0, min(1.0, x))) / math.pi for x in c.flat]).reshape(c.shape)
    return p if p.ndim else float(p)


def bit_agreement_math_acos_unclipped(cos):
    c = np.asarray(cos, dtype=float)
    p = np.array([1.0 - math.acos(x) / math.pi for x in c.flat]).reshape(c.shape)
    return p if p.ndim else float(p)


def test_a_per_element_math_acos_version_with_clipping_passes():
    assert ex.check("04.bit_agreement", bit_agreement_math_acos_clipped, quiet=True)


def test_the_same_version_without_clipping_is_told_to_clip():
    message = _message("04.bit_agreement", bit_agreement_math_acos_unclipped)
    assert "cosines a hair outside [-1, 1]" in message and "math domain error" in message
    assert "common mistake (math.acos per element, no clipping)" in message
    assert "clip each cosine to [-1, 1]" in message


def test_numpy_without_clipping_gets_nan_and_the_case_says_why():
    def unclipped(cos):
        return 1.0 - np.arccos(cos) / np.pi

    message = _message("04.bit_agreement", unclipped)
    assert "NaN or inf in your result" in message and "clip to [-1, 1] first" in message


def test_the_task_says_the_cosines_may_round_past_one():
    task = ex.get("04.bit_agreement").task
    assert "1.0000000000000002" in task and "valid input" in task
    cases = [args[0] for case, _ in ex.get("04.bit_agreement").cases() for args in [case.args]]
    assert any(np.max(np.abs(c)) > 1.0 for c in cases)  # the check does feed such values


# --------------------------------------------------------------------------- inclusion_probability (closed form)


def test_the_closed_form_reference_is_accurate_on_every_case_it_is_checked_on():
    """The check is honest for a learner who writes a cancellation-free version: on every case
    the closed form agrees with the library's log-space value far inside the check's tolerance."""
    e = ex.get("04.inclusion_probability")
    for case, expected in e.cases():
        stable = inclusion_library(*case.args)
        np.testing.assert_allclose(expected, stable, rtol=1e-7, atol=1e-16, err_msg=case.label)
        assert np.all((stable == 0) | (stable == 1) | (stable > 1e-7)), case.label
    assert "1e-7" in e.task


def inclusion_library(p, K, L):
    return sh.inclusion_probability(p, K, L) if L >= 2 else 0.0 * np.asarray(p, dtype=float)  # L = 1: u = 0


def inclusion_comb_loop(p, K, L):
    def one(x):
        P = x**K
        return sum(math.comb(L, k) * P**k * (1 - P) ** (L - k) for k in range(2, L + 1))

    out = np.vectorize(one)(p)
    return float(out) if np.ndim(out) == 0 else out


def inclusion_torch_closed(p, K, L):
    P = torch.as_tensor(p, dtype=torch.float64) ** K
    return 1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1)


@pytest.mark.parametrize("fn", [inclusion_library, inclusion_comb_loop, inclusion_torch_closed])
def test_closed_form_check_accepts_other_correct_versions(fn):
    assert ex.check("04.inclusion_probability", fn, quiet=True)


# --------------------------------------------------------------------------- log_inclusion_probability


def _library_log_u(p, K, L):
    """The library's log u; it refuses "at least 2" of a single table, where u = 0."""
    return sh.log_inclusion_probability(p, K, L) if L >= 2 else np.full(np.shape(p), -np.inf)


def log_library(p, K, L):
    return _library_log_u(p, K, L)


def log_of_comb_sum(p, K, L):
    """Linear-space sum of the terms k >= 2 with math.comb, then the log (np.log(0) = -inf)."""
    with np.errstate(divide="ignore"):
        return np.log(inclusion_comb_loop(p, K, L))


def log_torch(p, K, L):
    p = torch.as_tensor(p, dtype=torch.float64)
    k = torch.arange(2, L + 1, dtype=torch.float64)
    log_comb = torch.lgamma(torch.tensor(L + 1.0, dtype=torch.float64)) - torch.lgamma(k + 1) - torch.lgamma(L - k + 1)
    log_hit = K * torch.log(p)
    terms = log_comb + k * log_hit[..., None] + (L - k) * torch.log(-torch.expm1(log_hit))[..., None]
    terms = torch.nan_to_num(terms, nan=-math.inf, neginf=-math.inf)
    if L >= 2:
        terms[..., -1] = torch.where(p == 1, torch.zeros_like(p), terms[..., -1])
    return torch.logsumexp(terms, dim=-1).clamp(max=0.0)


def log_torch_float32_lgamma(p, K, L):
    """As a learner might write it: torch.arange gives int64, so `k + 1.0` and lgamma are float32."""
    p = torch.as_tensor(p, dtype=torch.float64)
    k = torch.arange(2, L + 1)
    log_comb = (torch.lgamma(torch.tensor(L + 1.0)) - torch.lgamma(k + 1.0) - torch.lgamma(L - k + 1.0)).double()
    log_hit = K * torch.log(p)
    terms = log_comb + k * log_hit[..., None] + (L - k) * torch.log(-torch.expm1(log_hit))[..., None]
    terms = torch.nan_to_num(terms, nan=-math.inf, neginf=-math.inf)
    out = torch.logsumexp(terms, -1)
    return torch.where(p == 1, torch.zeros_like(out) if L >= 2 else out, out)


@pytest.mark.parametrize("fn", [log_library, log_of_comb_sum, log_torch, log_torch_float32_lgamma])
def test_log_check_accepts_other_correct_versions(fn):
    assert ex.check("04.log_inclusion_probability", fn, quiet=True)


def test_log_reference_is_the_library_value_on_every_case():
    for case, expected in ex.get("04.log_inclusion_probability").cases():
        np.testing.assert_allclose(expected, _library_log_u(*case.args), rtol=1e-12, atol=1e-12)


def test_the_closed_form_is_rejected_by_the_log_check_on_the_case_its_task_names():
    def closed_then_log(p, K, L):
        P = np.asarray(p, dtype=float) ** K
        return np.log(1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1))

    message = _message("04.log_inclusion_probability", closed_then_log)
    assert "p = 0.15" in message and "add up the terms k >= 2" in message
    assert "p = 0.15" in ex.get("04.log_inclusion_probability").task


# --------------------------------------------------------------------------- every hint names its own mistake


@pytest.mark.parametrize("name", NAMES)
def test_each_wrong_version_is_named_alone(name):
    e = ex.get(name)
    for wrong in e.wrong:
        message = _message(name, wrong.fn)
        named = re.findall(r"common mistake \((.*?)\): ", message)
        assert named in ([wrong.label], []), (wrong.label, named)
        if not named:  # a broken (NaN/inf) result: the failing case's own hint explains it
            assert "NaN or inf in your result" in message and "hint: " in message, wrong.label


@pytest.mark.parametrize("name", NAMES)
def test_markers_are_set(name):
    e = ex.get(name)
    assert 1 <= e.difficulty <= 5 and 1 <= e.importance <= 5 and e.minutes >= 1
