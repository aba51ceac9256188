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
    P = np.asarray(p, dtype=np.float64) ** K  # one table collides: all K bits agree
    # at least 2 of L = not none of them, and not exactly one (the other L - 1 tables miss)
    u = 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** (L - 1)
    return u if u.ndim else float(u)


# --------------------------------------------------------------------------- cases

# Cosines a hair outside [-1, 1], as a dot product of two unit vectors can round them.
HAIR_PAST_ONE = np.array([1.0 + 2e-16, -1.0 - 4e-16, 0.3])


def _bit_cases():
    rng = np.random.default_rng(401)
    return [
        Case("cos = 0 (orthogonal)", (0.0,), "at 90 degrees a random hyperplane separates them half the time"),
        Case("cos = 1, cos = -1", (np.array([1.0, -1.0]),), "same direction: always agree; opposite: never"),
        Case("cos = 0.5 (60 degrees)", (0.5,), "theta = 60 degrees = pi/3, so p = 1 - 1/3"),
        Case("an array of cosines", (rng.uniform(-1, 1, 25),)),
        Case("a (3, 4) array", (rng.uniform(-1, 1, (3, 4)),), "work elementwise, keeping the shape"),
        Case(
            "cosines a hair outside [-1, 1] from rounding: cos = ["
            + ", ".join(repr(float(c)) for c in HAIR_PAST_ONE)
            + "] (printed rounded below)",
            (HAIR_PAST_ONE,),
            "a cosine computed in floating point can come out as 1.0000000000000002 or -1.0000000000000004; "
            "past +-1, np.arccos gives NaN and math.acos raises 'math domain error': clip to [-1, 1] first",
        ),
    ]


def _closed_form_cases():
    """Keys whose u the formula as written gets right: u is 0, 1, or above about 1e-7 (a test pins
    the reference to the cancellation-free library value on every case)."""
    return [
        Case("p = 0.9, K = 10, L = 150", (0.9, 10, 150)),
        Case("K = 1, L = 2: both tables must collide", (0.5, 1, 2), "with L = 2, at least 2 means both: u = (p**K)**2"),
        Case("p from 0.3 to 0.95, K = 10, L = 150", (np.linspace(0.3, 0.95, 14), 10, 150)),
        Case("p = 0: a key opposite the query", (0.0, 10, 150), "it never collides: u = 0"),
        Case("p = 1: a key along the query", (1.0, 10, 150), "it collides in every table: u = 1"),
        Case("p near 1, L = 300", (np.array([0.99, 0.999, 1.0 - 1e-9]), 10, 300)),
        Case("L = 1000", (np.array([0.3, 0.5, 0.6, 0.75, 0.9, 0.99]), 10, 1000)),
        Case("L = 1: two tables can never collide", (0.5, 4, 1), "with one table there cannot be 2 collisions: u = 0"),
        Case("a (2, 3) array of p", (np.array([[0.1, 0.5, 0.7], [0.8, 0.95, 1.0]]), 4, 40)),
    ]


def _log_cases():
    return [
        Case("p = 0.9, K = 10, L = 150", (0.9, 10, 150)),
        Case("K = 1, L = 2: both tables must collide", (0.5, 1, 2), "with L = 2, u = (p**K)**2, so log u = 2 K log p"),
        Case("p from 0.3 to 0.95, K = 10, L = 150", (np.linspace(0.3, 0.95, 14), 10, 150)),
        Case(
            "p = 0.15, K = 10, L = 150 (u about 4e-13)",
            (0.15, 10, 150),
            "u is about 4e-13 here: 1 - P(no table) - P(exactly one) subtracts two numbers that add up to within "
            "4e-13 of 1, and rounding leaves an error of about 1e-14: add up the terms k >= 2 instead",
        ),
        Case(
            "p near 0: p = 0.001, K = 10, L = 150 (u about 1e-56)",
            (0.001, 10, 150),
            "for small p, u is about C(L, 2) P^2 = 1e-56: sum the binomial terms for k >= 2 (all positive) "
            "instead of computing 1 - P(no table) - P(exactly one), which cancels to 0 or a negative number "
            "(log: -inf or NaN)",
        ),
        Case(
            "p near 0, L = 300",
            (np.array([1e-6, 1e-4, 0.01, 0.05, 0.2]), 8, 300),
            "compute the tiny u directly, not as a difference of numbers close to 1",
        ),
        Case(
            "p = 0: a key opposite the query",
            (0.0, 10, 150),
            "it never collides: u = 0, so log u = -inf (not NaN: beware 0 * log 0)",
        ),
        Case(
            "p = 1",
            (1.0, 10, 150),
            "a key along the query collides in every table: log u = 0 (beware log(0) * 0 = NaN)",
        ),
        Case("p near 1, L = 300", (np.array([0.99, 0.999, 1.0 - 1e-9]), 10, 300)),
        Case(
            "L = 1000",
            (np.array([0.3, 0.5, 0.6, 0.75, 0.9, 0.99]), 10, 1000),
            "with L in the hundreds, C(L, k) and P^k over- or underflow on their own: combine them in log space",
        ),
        Case("L = 1: two tables can never collide", (0.8, 4, 1), "u = 0 with one table, so log u = -inf"),
        Case("a (2, 3) array of p", (np.array([[0.1, 0.5, 0.7], [0.8, 0.95, 1.0]]), 6, 40)),
    ]


# --------------------------------------------------------------------------- wrong versions


def _bit_linear(cos):
    return (1.0 + np.asarray(cos, float)) / 2.0


def _bit_missing_one_minus(cos):
    return np.arccos(np.clip(np.asarray(cos, float), -1, 1)) / np.pi


def _bit_no_clip(cos):
    return 1.0 - np.arccos(np.asarray(cos, float)) / np.pi


def _bit_over_180(cos):
    return 1.0 - np.arccos(np.clip(np.asarray(cos, float), -1, 1)) / 180.0


def _bit_math_acos_no_clip(cos):
    out = np.vectorize(lambda c: 1.0 - math.acos(c) / math.pi)(cos)
    return out if np.ndim(out) else float(out)


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
    return np.exp(log_inclusion_probability(p, 1, L))


def _incl_exactly_two(p, K, L):
    P = _hit(p, K)
    return L * (L - 1) / 2 * P**2 * (1.0 - P) ** (L - 2)


def _incl_one_exponent_L(p, K, L):
    P = _hit(p, K)
    return 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** L


def _incl_K_L_swapped(p, K, L):
    return inclusion_probability(p, L, K)


def _incl_p_times_K(p, K, L):
    P = np.asarray(p, float) * K
    return 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** (L - 1)


def _log_of(fn):
    def log_version(p, K, L):
        return np.log(fn(p, K, L))

    return log_version


def _log_returns_u(p, K, L):
    return np.exp(log_inclusion_probability(p, K, L))


def _log_no_binomial(p, K, L):
    """The terms k >= 2 in log space, without log C(L, k)."""
    P = _hit(p, K)
    k = np.arange(2, L + 1)
    terms = k * np.log(P)[..., None] + (L - k) * np.log1p(-P)[..., None]
    terms = np.where(np.isnan(terms), -np.inf, terms)
    top = np.max(terms, axis=-1, initial=-np.inf)
    safe = np.where(np.isfinite(top), top, 0.0)
    return safe + np.log(np.exp(terms - safe[..., None]).sum(axis=-1))


EXERCISES = [
    Exercise(
        name="04.bit_agreement",
        notebook_key="04a",
        signature="bit_agreement(cos) -> float or ndarray",
        task="The chance that one random-hyperplane bit agrees for two vectors whose cosine is `cos`, as the "
        "section above derived it. Works elementwise on arrays of any shape; for a float it may return a "
        "float or a 0-d array. Cosines computed in floating point can round a hair past +-1 "
        "(1.0000000000000002): they are valid input, and the check feeds such values.",
        reference=bit_agreement,
        make_cases=_bit_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-12,
        nudge="The section above found how often a random line splits two vectors at angle theta. Which "
        "angle does a cosine give, and what should a cosine that rounding pushed a hair past 1 or -1 count as?",
        hint="Read the docs of numpy's inverse cosine: which unit does it answer in, and what does it return "
        "for an argument past +-1?",
        difficulty=1,
        importance=3,
        minutes=5,
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
            Wrong(
                "math.acos per element, no clipping",
                _bit_math_acos_no_clip,
                "math.acos(1.0000000000000002) raises 'math domain error': clip each cosine to [-1, 1] "
                "(max(-1.0, min(1.0, c))) before math.acos",
            ),
            Wrong(
                "radians divided by 180",
                _bit_over_180,
                "arccos returns radians, from 0 to pi: divide by pi, not by 180 (that is for degrees)",
            ),
        ),
    ),
    Exercise(
        name="04.inclusion_probability",
        notebook_key="04a",
        signature="inclusion_probability(p, K, L) -> float or ndarray",
        task="The chance u that a key whose per-bit agreement is p shares the query's bucket in at "
        "least 2 of L tables of K bits: one table collides with probability P = p**K, and the "
        "number of colliding tables is Binomial(L, P). Elementwise in p; a float p may give a float or "
        "a 0-d array. The check uses keys whose u is 0, 1 or above about 1e-7 (relative error 1e-3), where a "
        "direct form is accurate enough; tiny u comes later.",
        reference=inclusion_probability,
        make_cases=_closed_form_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-15,
        nudge="'At least 2' is everything except 'none' and 'exactly one', and the number of colliding "
        "tables is Binomial(L, P). Both of those two cases have a short closed form.",
        hint="The 'none' case is the one u_1 above subtracts. For 'exactly one', count the ways to choose "
        "which table collides.",
        difficulty=2,
        importance=4,
        minutes=5,
        wrong=(
            Wrong(
                "at least 1 table",
                _incl_at_least_one,
                "MagicPIG samples a key when it collides in at least 2 tables: also subtract P(exactly 1)",
            ),
            Wrong(
                "P(exactly 1) written as L p**K",
                _incl_drops_miss_factor,
                "exactly one table out of L collides with probability L P (1 - P)^(L - 1): the other "
                "L - 1 tables must miss",
            ),
            Wrong(
                "(1 - P)**L in P(exactly 1)",
                _incl_one_exponent_L,
                "in P(exactly 1) = L P (1 - P)^(L - 1) one table collides and the other L - 1 miss: the "
                "exponent is L - 1, not L",
            ),
            Wrong("p instead of p**K", _incl_forgets_K, "a table collides only when all K bits agree: P = p**K"),
            Wrong("p * K instead of p**K", _incl_p_times_K, "all K bits must agree: P = p**K (a power), not p * K"),
            Wrong(
                "K and L swapped",
                _incl_K_L_swapped,
                "K is the bits per table (the power in P = p**K), L the number of tables (the binomial's n): "
                "they are swapped",
            ),
            Wrong("exactly 2 tables", _incl_exactly_two, "at least 2 means 2, 3, ..., L tables: sum all those terms"),
        ),
    ),
    Exercise(
        name="04.log_inclusion_probability",
        notebook_key="04b",
        signature="log_inclusion_probability(p, K, L) -> float or ndarray",
        task="log u, for the same u as inclusion_probability (at least 2 of L tables of K bits, P = p**K), "
        "within 1e-3 + 1e-4 |log u| of the true log u for every p in [0, 1] and L up to 1000: also where u "
        "is tiny (u = 4e-13 at p = 0.15, K = 10, L = 150; 1e-56 at p = 0.001), where 1 - P(no table) - "
        "P(exactly one) cancels. log u = -inf where u = 0 (p = 0, or L = 1), 0 at p = 1. Elementwise in p; a float p "
        "may give a float or a 0-d array.",
        reference=log_inclusion_probability,
        make_cases=_log_cases,
        output=ARRAY,
        rtol=1e-4,
        atol=1e-3,
        nudge="Subtracting from 1 is what loses a tiny u. Add up the positive terms of 'at least 2' "
        "instead, one per number of colliding tables, and keep each as a logarithm so that neither the "
        "binomial coefficient nor P**k over- or underflows. Then think about p = 0 and p = 1.",
        hint="Tools that help: math.lgamma (a log of factorials, so of binomial coefficients, without the huge "
        "numbers), np.log1p or np.expm1 (a log of 1 - x that stays accurate when x is tiny or near 1), and a sum "
        "of exponentials taken after subtracting the largest exponent (np.logaddexp.reduce does that for you).",
        difficulty=4,
        importance=3,
        minutes=20,
        wrong=(
            Wrong(
                "log of 1 - P(no table) - P(exactly one)",
                _log_of(_incl_naive),
                "1 - (1-P)^L - L P (1-P)^(L-1) cancels catastrophically when u is tiny: sum the terms k >= 2 instead",
            ),
            Wrong(
                "log of 1 - P(no table) - P(exactly one) with expm1/log1p",
                _log_of(_incl_expm1_difference),
                "expm1 and log1p make each part accurate, but their difference still cancels for tiny "
                "u: sum the terms k >= 2",
            ),
            Wrong(
                "log of at least 1 table",
                _log_of(_incl_at_least_one),
                "the sum starts at k = 2 (at least 2 tables), not at k = 1",
            ),
            Wrong(
                "returns u, not log u",
                _log_returns_u,
                "the function returns log u (a number <= 0), not u: take the log of the sum, or better, "
                "never leave log space (logsumexp of the log terms)",
            ),
            Wrong(
                "no binomial coefficient",
                _log_no_binomial,
                "each term k needs C(L, k), the number of ways to pick the k colliding tables: add "
                "log C(L, k) = lgamma(L + 1) - lgamma(k + 1) - lgamma(L - k + 1)",
            ),
            Wrong(
                "p instead of p**K",
                _log_of(_incl_forgets_K),
                "a table collides only when all K bits agree: P = p**K",
            ),
        ),
    ),
]
