"""Notebook 04, SimHash S-curves: one bit's agreement, and the chance of being sampled."""

from __future__ import annotations

import math

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def bit_agreement(cos):
    c = np.clip(np.asarray(cos, dtype=np.float64), -1.0, 1.0)  # rounding can give 1 + 1e-16
    p = 1.0 - np.arccos(c) / np.pi  # a random hyperplane splits them w.p. theta/pi
    return p if p.ndim else float(p)


def log_inclusion_probability(p, K, L):
    """log P(Binomial(L, p**K) >= 2), summed term by term in log space (no cancellation).

    The same quantity as ``pigviz.lsh.simhash.log_inclusion_probability(p, K, L)``."""
    p = np.asarray(p, dtype=np.float64)
    k = np.arange(2, L + 1)  # tables that collide: 2, ..., L
    log_comb = np.array([math.lgamma(L + 1) - math.lgamma(j + 1) - math.lgamma(L - j + 1) for j in k])
    with np.errstate(divide="ignore", invalid="ignore"):
        log_hit = K * np.log(p)  # log p**K: one table collides
        log_miss = np.log(-np.expm1(log_hit))  # log(1 - p**K), accurate near 0 and 1
        terms = log_comb + k * log_hit[..., None] + (L - k) * log_miss[..., None]
    terms = np.where(np.isnan(terms), -np.inf, terms)  # p = 1: only k = L survives
    if L >= 2:
        terms[..., -1] = np.where(p == 1.0, 0.0, terms[..., -1])
    top = terms.max(axis=-1, initial=-np.inf)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = safe_top + np.log(np.exp(terms - safe_top[..., None]).sum(axis=-1))
    out = np.minimum(out, 0.0)  # rounding must not push u above 1
    return out if out.ndim else float(out)


def inclusion_probability(p, K, L):
    # Sum the binomial terms k >= 2 instead of 1 - P(0) - P(1): no cancellation for tiny u.
    u = np.exp(log_inclusion_probability(p, K, L))
    return u if np.ndim(u) else float(u)


# --------------------------------------------------------------------------- cases


def _bit_cases():
    rng = np.random.default_rng(401)
    return [
        Case("cos = 0 (orthogonal)", (0.0,), "at 90 degrees a random hyperplane separates them half the time"),
        Case("cos = 1, cos = -1", (np.array([1.0, -1.0]),), "same direction: always agree; opposite: never"),
        Case("cos = 0.5 (60 degrees)", (0.5,), "theta = 60 degrees = pi/3, so p = 1 - 1/3"),
        Case("an array of cosines", (rng.uniform(-1, 1, 25),)),
        Case("a (3, 4) array", (rng.uniform(-1, 1, (3, 4)),), "work elementwise, keeping the shape"),
        Case(
            "cosines a hair outside [-1, 1] from rounding",
            (np.array([1.0 + 2e-16, -1.0 - 4e-16, 0.3]),),
            "a cosine computed in floating point can be 1.0000000000000002: clip to [-1, 1] before arccos",
        ),
    ]


def _inclusion_cases():
    return [
        Case("p = 0.9, K = 10, L = 150", (0.9, 10, 150)),
        Case("K = 1, L = 2: both tables must collide", (0.5, 1, 2), "with L = 2, at least 2 means both: u = (p**K)**2"),
        Case("p from 0.05 to 0.95, K = 10, L = 150", (np.linspace(0.05, 0.95, 19), 10, 150)),
        Case(
            "p = 0.3, K = 10, L = 150 (u about 4e-7)",
            (0.3, 10, 150),
            "u is small here; 1 - P(0 tables) - P(1 table) subtracts nearly equal numbers",
        ),
        Case(
            "p near 0: p = 0.001, K = 10, L = 150 (u about 1e-56)",
            (0.001, 10, 150),
            "for small p, u is about C(L, 2) p^(2K): sum the binomial terms for k >= 2 (or work in log space) "
            "instead of computing 1 - P(0) - P(1), which cancels to 0 or a negative number (and compute in "
            "float64: float32 underflows to 0 below 1e-38)",
        ),
        Case(
            "p near 0, L = 300",
            (np.array([1e-6, 1e-4, 0.01, 0.05, 0.2]), 8, 300),
            "compute the tiny u directly, not as a difference of numbers close to 1",
        ),
        Case("p = 0", (0.0, 10, 150), "a key opposite the query never collides: u = 0 (finite, not NaN)"),
        Case("p = 1", (1.0, 10, 150), "a key along the query collides in every table: u = 1 (beware log(0) * 0 = NaN)"),
        Case("p near 1, L = 300", (np.array([0.99, 0.999, 1.0 - 1e-9]), 10, 300)),
        Case(
            "L = 1000",
            (np.array([0.3, 0.5, 0.6, 0.75, 0.9, 0.99]), 10, 1000),
            "with L in the hundreds, C(L, k) and p^(K k) over- or underflow on their own: combine them in log space",
        ),
        Case("L = 1: two tables can never collide", (0.8, 4, 1), "with one table there cannot be 2 collisions: u = 0"),
        Case("a (2, 3) array of p", (np.array([[0.1, 0.5, 0.7], [0.8, 0.95, 1.0]]), 6, 40)),
    ]


# --------------------------------------------------------------------------- wrong versions


def _bit_linear(cos):
    return (1.0 + np.asarray(cos, float)) / 2.0


def _bit_missing_one_minus(cos):
    return np.arccos(np.clip(np.asarray(cos, float), -1, 1)) / np.pi


def _bit_no_clip(cos):
    return 1.0 - np.arccos(np.asarray(cos, float)) / np.pi


def _hit(p, K):
    return np.asarray(p, float) ** K


def _incl_at_least_one(p, K, L):
    return -np.expm1(L * np.log1p(-_hit(p, K)))


def _incl_naive(p, K, L):
    P = _hit(p, K)
    return 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** (L - 1)


def _incl_expm1_difference(p, K, L):
    P = _hit(p, K)
    return -np.expm1(L * np.log1p(-P)) - L * P * np.exp((L - 1) * np.log1p(-P))


def _incl_drops_miss_factor(p, K, L):
    P = _hit(p, K)
    return -np.expm1(L * np.log1p(-P)) - L * P


def _incl_forgets_K(p, K, L):
    return inclusion_probability(p, 1, L)


def _incl_exactly_two(p, K, L):
    P = _hit(p, K)
    return L * (L - 1) / 2 * P**2 * (1.0 - P) ** (L - 2)


EXERCISES = [
    Exercise(
        name="04.bit_agreement",
        signature="bit_agreement(cos) -> float or ndarray",
        task="The chance that one random-hyperplane bit agrees for two vectors whose cosine is `cos`: "
        "p = 1 - theta/pi with theta = arccos(cos). Works elementwise on arrays; a float gives a float.",
        reference=bit_agreement,
        make_cases=_bit_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-12,
        hint="p = 1 - arccos(clip(cos, -1, 1)) / pi",
        wrong=(
            Wrong(
                "linear in the cosine",
                _bit_linear,
                "the agreement is linear in the angle, not in the cosine: use arccos",
            ),
            Wrong(
                "theta / pi without 1 -",
                _bit_missing_one_minus,
                "theta / pi is the chance that the bit differs; agreement is 1 minus that",
            ),
            Wrong("no clipping", _bit_no_clip, "arccos(1.0000000000000002) is NaN: clip the cosines to [-1, 1] first"),
        ),
    ),
    Exercise(
        name="04.inclusion_probability",
        signature="inclusion_probability(p, K, L) -> float or ndarray",
        task="The chance u that a key whose per-bit agreement is p shares the query's bucket in at "
        "least 2 of L tables of K bits: one table collides with probability P = p**K, and the "
        "number of colliding tables is Binomial(L, P). Must be finite and accurate (relative "
        "error < 1e-3) for p near 0 and 1 and L in the hundreds. A float p gives a float.",
        reference=inclusion_probability,
        make_cases=_inclusion_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-300,
        helpers=(log_inclusion_probability,),
        hint="u = sum over k = 2..L of C(L, k) P^k (1 - P)^(L - k), with P = p**K; sum it in log space "
        "(log C(L, k) from math.lgamma) so that nothing over- or underflows",
        wrong=(
            Wrong(
                "at least 1 table",
                _incl_at_least_one,
                "MagicPIG samples a key when it collides in at least 2 tables: also subtract P(exactly 1)",
            ),
            Wrong(
                "1 - P(0) - P(1) in floating point",
                _incl_naive,
                "1 - (1-P)^L - L P (1-P)^(L-1) cancels catastrophically when u is tiny: sum the terms k >= 2 instead",
            ),
            Wrong(
                "1 - P(0) - P(1) with expm1/log1p",
                _incl_expm1_difference,
                "expm1 and log1p make each part accurate, but their difference still cancels for tiny "
                "u: sum the terms k >= 2",
            ),
            Wrong(
                "P(exactly 1) written as L p**K",
                _incl_drops_miss_factor,
                "exactly one table out of L collides with probability L P (1 - P)^(L - 1): the other "
                "L - 1 tables must miss",
            ),
            Wrong("p instead of p**K", _incl_forgets_K, "a table collides only when all K bits agree: P = p**K"),
            Wrong("exactly 2 tables", _incl_exactly_two, "at least 2 means 2, 3, ..., L tables: sum all those terms"),
        ),
    ),
]
