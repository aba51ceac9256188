"""The stick-balance toy: attention output as the balance point of weighted sticks.

Each cached token is a stick standing on a number line at its (one-number) value, as tall
as its attention weight. The attention output, sum_i w_i v_i with w = softmax(scores), is
where the sticks balance. Approximate attention reads only some keys; this module compares
four ways of spending a budget of B distinct keys:

* ``topk``: keep the B tallest sticks, renormalise their weights. Biased.
* ``sampling``: draw keys with replacement with probability w_i (needs every weight: the
  "oracle"). Unbiased; typical miss about sigma_w / sqrt(B).
* ``importance_sampling``: draw from a cheap proposal u and weigh each draw by w_i / u_i,
  divided by the sum of those ratios (self-normalised). Biased at finite B, consistent.
* ``hybrid``: the B // 2 tallest sticks exactly (or ``n_exact`` of them), the rest of the budget
  sampled from the remaining weight, scaled by that remaining weight. Unbiased.

Oracle methods: TopK, sampling and the hybrid all use the true weights (to find the tallest sticks,
to draw in proportion, to know the weight the rest holds), so a real system could run them only
after reading every key. Only importance sampling draws from something cheaper.

How a sampler spends a budget of B distinct keys
------------------------------------------------
Keys are drawn one at a time, independently, with replacement. A draw that lands on a key
already read costs nothing and is kept. The first draw that would need a (B+1)-th distinct
key ends the run; that key is not read. The estimate averages every kept draw, repeats
included (a key drawn twice counts twice but is read once).

Stopping just *before* the new key matters: stopping right *after* the B-th new key would
make the last draw always a fresh key and so over-count rarely drawn ones, a bias the tests
demonstrate. When B reaches the number of keys that can be drawn at all, nothing can end the
run; we return the limit of unlimited free draws (for plain sampling, the exact output) and
report ``draws = inf``.

The draws are simulated without a loop: draw i.i.d. keys at the ticks of a unit-rate Poisson
process, so key i arrives at rate p_i. Its first arrival is Exp(p_i); the run stops at the
(B+1)-th smallest first arrival T; a read key i is drawn 1 + Poisson(p_i (T - first_i))
times. This vectorises over many runs at once.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from pigviz._util.validate import check_array, check_choice, check_float, check_int
from pigviz.attention import stable_softmax

__all__ = [
    "SCENARIOS",
    "METHODS",
    "DEFAULT_N",
    "DEFAULT_BUDGET",
    "Scenario",
    "Estimate",
    "ErrorCurves",
    "make_scenario",
    "custom_scenario",
    "rough_proposal",
    "value_spread",
    "exact",
    "topk",
    "sampling",
    "importance_sampling",
    "hybrid",
    "estimate_all",
    "repeat_estimates",
    "error_curves",
    "loglog_slope",
    "SHARPNESS",
]

SCENARIOS = ("peaked", "flat", "sink")
METHODS = ("topk", "sampling", "importance", "hybrid")
DEFAULT_N = 32
DEFAULT_BUDGET = 12
MAX_N = 100_000
# Above this Poisson mean the relative noise (1/sqrt(mean)) is far below float precision of
# the ratio, and numpy's sampler would refuse means near 1e19: use the mean itself.
_POISSON_CAP = 1e12


@dataclass(frozen=True)
class Scenario:
    """One toy attention row: sticks at ``values``, as tall as ``weights``. Made by
    :func:`make_scenario` or :func:`custom_scenario`; its arrays are read-only.

    Parameters
    ----------
    name : str
        What it is called.
    description : str
        One sentence on what it shows.
    values : numpy.ndarray, float64, (n,)
        Where each stick stands on the number line.
    scores : numpy.ndarray, float64, (n,)
        Scaled query-key scores q.k / sqrt(d).
    weights : numpy.ndarray, float64, (n,)
        softmax(scores): stick heights, sum to 1.
    sink_index : int, optional
        The sink token's index, if the scenario has one.
    """

    name: str
    description: str
    values: np.ndarray  # where each stick stands on the number line
    scores: np.ndarray  # scaled query-key scores q.k / sqrt(d)
    weights: np.ndarray = field(repr=False)  # softmax(scores): stick heights, sum to 1
    sink_index: int | None = None

    @property
    def n(self) -> int:
        """Keys (sticks) in the scenario."""
        return int(self.values.size)

    @property
    def truth(self) -> float:
        """The exact attention output: the balance point, weights @ values."""
        return float(self.weights @ self.values)


@dataclass(frozen=True)
class Estimate:
    """One estimator's answer on one scenario.

    Parameters
    ----------
    method : str
        The estimator ("exact", "topk", "sampling", "importance", "hybrid").
    value : float
        The estimated balance point.
    keys_read : int
        Distinct keys whose value (and key) was loaded.
    draws : float
        Kept draws including repeats; inf = unlimited free draws.
    read : numpy.ndarray, int64
        Indices of the keys read.
    """

    method: str
    value: float
    keys_read: int  # distinct keys whose value (and key) was loaded
    draws: float  # kept draws including repeats; inf = unlimited free draws
    read: np.ndarray = field(repr=False)  # indices of the keys read


@dataclass(frozen=True)
class ErrorCurves:
    """Each method's error against the budget, from :func:`error_curves`.

    Parameters
    ----------
    scenario : str
        The scenario's name.
    budgets : numpy.ndarray, int, (m,)
        The budgets B.
    errors : dict
        Method -> RMS error per budget, (m,) (topk: its absolute error).
    reference : numpy.ndarray, float64, (m,)
        spread / sqrt(budget): the RMS error of B independent draws from the true weights.
    spread : float
        sigma_w: weighted standard deviation of the values (:func:`value_spread`).
    n_seeds : int
        Runs per budget of each random method.
    n : int
        Keys in the scenario.
    """

    scenario: str
    budgets: np.ndarray
    errors: dict  # method -> RMS error per budget (topk: its absolute error)
    reference: np.ndarray  # spread / sqrt(budget)
    spread: float  # sigma_w: weighted standard deviation of the values
    n_seeds: int
    n: int  # keys in the scenario


def _scenario(name, description, values, scores, sink_index=None) -> Scenario:
    values = np.array(values, dtype=np.float64)  # a copy: freezing it must not freeze the caller's
    scores = np.array(scores, dtype=np.float64)
    values.setflags(write=False)
    scores.setflags(write=False)
    weights = stable_softmax(scores)
    weights.setflags(write=False)
    return Scenario(name, description, values, scores, weights, sink_index)


def make_scenario(name: str = "sink", n: int = DEFAULT_N, seed: int = 0) -> Scenario:
    """Build one of the toy scenarios with ``n`` sticks, reproducibly.

    Parameters
    ----------
    name : str, one of SCENARIOS
        "peaked" (a few tall sticks hold most of the weight), "flat" (every stick about equally
        tall) or "sink" (one token holds half the weight at a value near 0).
    n : int in [2, 100000]
        Sticks.
    seed : int in [0, 2**63 - 1]
        Seed of the draw: the same seed gives the same scenario.

    Returns
    -------
    Scenario
        The scenario.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    check_choice("name", name, SCENARIOS)
    n = check_int("n", n, 2, MAX_N)
    seed = check_int("seed", seed, 0, 2**63 - 1)
    rng = np.random.default_rng(seed)
    if name == "peaked":
        values = rng.uniform(0.0, 1.0, n)
        scores = 3.0 * rng.standard_normal(n)
        return _scenario(name, "A few tall sticks hold most of the weight; values spread over [0, 1].", values, scores)
    if name == "flat":
        values = rng.uniform(0.0, 1.0, n)
        scores = 0.05 * rng.standard_normal(n)
        return _scenario(name, "Every stick about equally tall; values spread over [0, 1].", values, scores)
    # sink: token 0 parks half the weight on a value near zero; the rest are flat.
    values = np.concatenate([[0.02], rng.uniform(0.36, 0.96, n - 1)])
    rest = 0.05 * rng.standard_normal(n - 1)
    sink_score = math.log(np.exp(rest).sum())  # equal to the rest's total: weight exactly 1/2
    return _scenario(
        name,
        "One sink token holds half the weight at a value near 0; the rest are flat.",
        values,
        np.concatenate([[sink_score], rest]),
        sink_index=0,
    )


def custom_scenario(values, scores, name: str = "custom", description: str = "") -> Scenario:
    """A scenario from your own values and scores (weights = softmax(scores)).

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands (copied).
    scores : array-like of float, (n,)
        Their scaled query-key scores (copied).
    name : str
        What it is called.
    description : str
        One sentence on what it shows.

    Returns
    -------
    Scenario
        The scenario.

    Raises
    ------
    ValueError, TypeError
        Values or scores that are not 1-D arrays of finite numbers, or of different lengths.
    """
    values, _ = _check_values_weights(values, np.ones(np.size(values)))
    scores = check_array("scores", scores, ndim=1)
    if scores.shape != values.shape:
        raise ValueError(f"scores must have the same length as values ({values.size}), got {scores.size}")
    return _scenario(str(name), str(description), values, scores)


def rough_proposal(scores, sharpness: float = 0.5) -> np.ndarray:
    """A cheap, roughly right proposal: softmax(sharpness * scores).

    With sharpness < 1 it ranks keys like the true weights but spreads the probability out,
    much as an LSH collision probability rises with the score without matching softmax.
    Every key keeps a positive probability, which importance sampling requires.

    Parameters
    ----------
    scores : array-like of float, (n,), or Scenario
        The scores (a scenario's own, for a Scenario).
    sharpness : float in [0, 10]
        Multiplies the scores: 1 gives the true weights, 0 the uniform proposal.

    Returns
    -------
    numpy.ndarray, float64, (n,)
        The proposal, summing to 1.

    Raises
    ------
    ValueError, TypeError
        Scores that are not a 1-D array of finite numbers, or ``sharpness`` outside its range.
    """
    if isinstance(scores, Scenario):
        scores = scores.scores
    scores = check_array("scores", scores, ndim=1)
    sharpness = check_float("sharpness", sharpness, 0.0, 10.0)
    return stable_softmax(sharpness * scores)


def value_spread(values, weights) -> float:
    """sigma_w = sqrt(sum_i w_i (v_i - o)^2): how much the values disagree, by weight.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights (attention weights), with a positive sum; need not be normalised.

    Returns
    -------
    float
        sigma_w, with the weights normalised.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive.
    """
    values, weights = _check_values_weights(values, weights)
    weights = weights / weights.sum()
    mean = weights @ values
    return float(np.sqrt(weights @ (values - mean) ** 2))


# ----------------------------------------------------------------------------- estimators


def _check_values_weights(values, weights):
    values = check_array("values", values, ndim=1)
    weights = check_array("weights", weights, ndim=1)
    if weights.shape != values.shape:
        raise ValueError(f"weights must have the same length as values ({values.size}), got {weights.size}")
    if np.any(weights < 0):
        raise ValueError(f"weights must be >= 0, got a minimum of {weights.min():g}")
    if not weights.sum() > 0:
        raise ValueError("weights must have a positive sum (at least one key with weight > 0)")
    return values, weights


def _as_rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy Generator, an int seed or None, got {type(rng).__name__}")


def _check_proposal(proposal, weights):
    proposal = check_array("proposal", proposal, ndim=1)
    if proposal.shape != weights.shape:
        raise ValueError(f"proposal must have the same length as values ({weights.size}), got {proposal.size}")
    if np.any(proposal < 0):
        raise ValueError(f"proposal must be >= 0, got a minimum of {proposal.min():g}")
    missing = np.flatnonzero((proposal <= 0) & (weights > 0))
    if missing.size:
        raise ValueError(
            f"proposal must be > 0 wherever weights > 0 (else those keys can never be drawn); "
            f"key {missing[0]} has weight {weights[missing[0]]:g} but proposal 0"
        )
    return proposal / proposal.sum()


def _draw_counts(p, budget, rng, runs):
    """Kept-draw multiplicities (runs, n) under the budget rule in the module docstring.

    Rows whose run can never stop hold p_i for every read key instead (the proportions of
    unlimited draws). Returns (counts, read_mask, draws_per_run)."""
    n = p.size
    first = np.full((runs, n), np.inf)
    with np.errstate(over="ignore"):  # a subnormal p overflows to inf: never drawn, as it should be
        np.divide(rng.exponential(size=(runs, n)), p, out=first, where=p > 0)
    stop = np.full(runs, np.inf) if budget >= n else np.partition(first, budget, axis=1)[:, budget]
    read = first < stop[:, None]
    bounded = np.isfinite(stop)
    gap = np.where(bounded, stop, 0.0)[:, None] - np.where(read, first, 0.0)
    mean_extra = np.where(read & bounded[:, None], p * gap, 0.0)
    extra = np.where(mean_extra > _POISSON_CAP, mean_extra, rng.poisson(np.minimum(mean_extra, _POISSON_CAP)))
    counts = np.where(bounded[:, None], read + extra, np.where(read, p, 0.0))
    draws = np.where(bounded, counts.sum(axis=1), np.inf)
    return counts, read, draws


def _per_row_unit_max(x):
    """Each row of ``x`` (>= 0) divided by its largest entry, so a weighted mean over it neither
    overflows (draw counts can reach 1e300) nor loses its ratios to subnormal rounding (a weight
    of 5e-324 times a value is rounded to a multiple of 5e-324). Rows of zeros stay zero."""
    top = x.max(axis=1, keepdims=True)
    return np.divide(x, top, out=np.zeros_like(x, dtype=np.float64), where=top > 0)


def _sampling_batch(values, p, budget, rng, runs):
    counts, read, draws = _draw_counts(p, budget, rng, runs)
    counts = _per_row_unit_max(counts)
    return counts @ values / counts.sum(axis=1), read, draws


def _importance_batch(values, weights, u, budget, rng, runs):
    counts, read, draws = _draw_counts(u, budget, rng, runs)
    # Only the drawn keys' w_i / u_i enter; 0/0 for never-drawn keys is masked out.
    ratio = _per_row_unit_max(counts * np.divide(weights, u, out=np.zeros_like(u), where=u > 0))
    total = ratio.sum(axis=1)
    # Every read key can have weight 0 (then the ratio is 0/0); fall back to the plain mean.
    counts = _per_row_unit_max(counts)
    plain = counts @ values / counts.sum(axis=1)
    est = np.divide(ratio @ values, total, out=plain.copy(), where=total > 0)
    return est, read, draws


def _hybrid_batch(values, weights, budget, rng, runs, n_exact=None):
    w = weights / weights.sum()
    n_exact = budget // 2 if n_exact is None else n_exact
    order = np.argsort(-w, kind="stable")
    top, rest = order[:n_exact], order[n_exact:]
    head = float(w[top] @ values[top])
    rest_mass = float(w[rest].sum())
    read = np.zeros((runs, w.size), dtype=bool)
    read[:, top] = True
    if rest_mass <= 0:  # nothing left to estimate: the exact part is the whole answer
        return np.full(runs, head / w[top].sum()), read, np.full(runs, float(n_exact))
    tail, tail_read, draws = _sampling_batch(values[rest], w[rest] / rest_mass, budget - n_exact, rng, runs)
    read[:, rest] = tail_read
    return head + rest_mass * tail, read, draws + n_exact


def exact(values, weights) -> Estimate:
    """The true balance point: reads every key.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights (attention weights), with a positive sum; need not be normalised.

    Returns
    -------
    Estimate
        The estimate, with the keys it read.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive.
    """
    values, weights = _check_values_weights(values, weights)
    w = weights / weights.max()  # as in topk: subnormal weights keep their ratios
    value = float(w @ values / w.sum())
    return Estimate("exact", value, values.size, float(values.size), np.arange(values.size))


def topk(values, weights, budget: int) -> Estimate:
    """Balance point of the ``budget`` tallest sticks, their weights renormalised.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights (attention weights), with a positive sum; need not be normalised.
    budget : int in [1, n]
        Distinct keys it may read.

    Returns
    -------
    Estimate
        The estimate, with the keys it read.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive, or ``budget`` outside [1, n].
    """
    values, weights = _check_values_weights(values, weights)
    budget = check_int("budget", budget, 1, values.size)
    keep = np.sort(np.argsort(-weights, kind="stable")[:budget])
    w = weights[keep] / weights[keep].max()  # the tallest stick is > 0; as 1, subnormal weights keep their ratios
    value = float(w @ values[keep] / w.sum())
    return Estimate("topk", value, budget, float(budget), keep)


def _single(method, batch_result):
    est, read, draws = batch_result
    idx = np.flatnonzero(read[0])
    return Estimate(method, float(est[0]), int(idx.size), float(draws[0]), idx)


def sampling(values, weights, budget: int, rng=None) -> Estimate:
    """Oracle sampling: draws from the true weights until a (budget+1)-th key would be needed.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights (attention weights), with a positive sum; need not be normalised.
    budget : int in [1, n]
        Distinct keys it may read.
    rng : numpy.random.Generator, int or None
        The random numbers: a generator, or a seed for a new one (None: fresh entropy).

    Returns
    -------
    Estimate
        The estimate, with the keys it read.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive, ``budget`` outside [1, n], or a bad ``rng``.
    """
    values, weights = _check_values_weights(values, weights)
    budget = check_int("budget", budget, 1, values.size)
    return _single("sampling", _sampling_batch(values, weights / weights.sum(), budget, _as_rng(rng), 1))


def importance_sampling(values, weights, budget: int, proposal, rng=None) -> Estimate:
    """Self-normalised importance sampling: draws from ``proposal``, weighs each by w_i / u_i.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights. Only the weights of drawn keys are used, so they may be unnormalised
        exp(scores).
    budget : int in [1, n]
        Distinct keys it may read.
    proposal : array-like of float >= 0, (n,)
        The proposal u (normalised here): > 0 wherever a weight is, else that key could never be
        drawn (:func:`rough_proposal` makes one).
    rng : numpy.random.Generator, int or None
        The random numbers: a generator, or a seed for a new one (None: fresh entropy).

    Returns
    -------
    Estimate
        The estimate, with the keys it read.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive, ``budget`` outside [1, n], a proposal of another
        length, negative or 0 where a weight is not, or a bad ``rng``.
    """
    values, weights = _check_values_weights(values, weights)
    budget = check_int("budget", budget, 1, values.size)
    u = _check_proposal(proposal, weights)
    return _single("importance", _importance_batch(values, weights, u, budget, _as_rng(rng), 1))


def _check_n_exact(n_exact, budget):
    """None (half the budget) or an int from 0 to ``budget`` - 1: the sticks the hybrid reads exactly."""
    return None if n_exact is None else check_int("n_exact", n_exact, 0, budget - 1)


def hybrid(values, weights, budget: int, rng=None, n_exact: int | None = None) -> Estimate:
    """The ``n_exact`` tallest sticks exactly, the remaining budget sampled from the rest in
    proportion to their weights, scaled by the weight the rest holds.

    Parameters
    ----------
    values : array-like of float, (n,)
        Where each stick stands on the number line.
    weights : array-like of float >= 0, (n,)
        Stick heights (attention weights), with a positive sum; need not be normalised.
    budget : int in [1, n]
        Distinct keys it may read.
    rng : numpy.random.Generator, int or None
        The random numbers: a generator, or a seed for a new one (None: fresh entropy).
    n_exact : int in [0, budget - 1], optional
        Sticks read exactly; default ``budget // 2``.

    Returns
    -------
    Estimate
        The estimate, with the keys it read.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type: values and weights of different
        lengths, NaN or inf, negative weights or none positive, ``budget`` or ``n_exact`` outside its range, or a
        bad ``rng``.
    """
    values, weights = _check_values_weights(values, weights)
    budget = check_int("budget", budget, 1, values.size)
    n_exact = _check_n_exact(n_exact, budget)
    return _single("hybrid", _hybrid_batch(values, weights, budget, _as_rng(rng), 1, n_exact))


def estimate_all(scenario: Scenario, budget: int, rng=None, proposal=None) -> dict[str, Estimate]:
    """Every estimator on one scenario.

    Parameters
    ----------
    scenario : Scenario
        The scenario.
    budget : int in [1, n]
        Distinct keys each may read.
    rng : numpy.random.Generator, int or None
        The random numbers: a generator, or a seed for a new one (None: fresh entropy).
    proposal : array-like of float >= 0, (n,), optional
        Importance sampling's proposal; default :func:`rough_proposal` of the scenario's scores.

    Returns
    -------
    dict
        "exact", "topk", "sampling", "importance", "hybrid" -> :class:`Estimate`.

    Raises
    ------
    TypeError
        ``scenario`` not a :class:`Scenario`, or a bad ``rng``.
    ValueError
        ``budget`` outside [1, n], or a bad ``proposal``.
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario (see make_scenario), got {type(scenario).__name__}")
    rng = _as_rng(rng)
    proposal = rough_proposal(scenario.scores) if proposal is None else proposal
    v, w = scenario.values, scenario.weights
    return {
        "exact": exact(v, w),
        "topk": topk(v, w, budget),
        "sampling": sampling(v, w, budget, rng),
        "importance": importance_sampling(v, w, budget, proposal, rng),
        "hybrid": hybrid(v, w, budget, rng),
    }


# ----------------------------------------------------------------------------- error curves


def _repeat(scenario, u, method, budget, rng, runs, n_exact=None):
    """``runs`` independent estimates of one method, computed in memory-bounded chunks."""
    v, w = scenario.values, scenario.weights
    if method == "topk":
        return np.full(runs, topk(v, w, budget).value)
    batch = {
        "sampling": lambda r: _sampling_batch(v, w, budget, rng, r),
        "importance": lambda r: _importance_batch(v, w, u, budget, rng, r),
        "hybrid": lambda r: _hybrid_batch(v, w, budget, rng, r, n_exact),
    }[method]
    chunk = max(1, 2_000_000 // scenario.n)
    return np.concatenate([batch(min(chunk, runs - start))[0] for start in range(0, runs, chunk)])


def _check_common(scenario, methods, seed, proposal):
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario (see make_scenario), got {type(scenario).__name__}")
    methods = [check_choice("methods", m, METHODS) for m in methods]
    rng = np.random.default_rng(check_int("seed", seed, 0, 2**63 - 1))
    u = _check_proposal(rough_proposal(scenario.scores) if proposal is None else proposal, scenario.weights)
    return methods, rng, u


def repeat_estimates(
    scenario: Scenario,
    budget: int,
    runs: int = 1000,
    seed: int = 0,
    methods=METHODS,
    proposal=None,
    n_exact: int | None = None,
) -> dict[str, np.ndarray]:
    """Many independent runs of each method at one budget. (TopK is deterministic: its array
    repeats one value.)

    Parameters
    ----------
    scenario : Scenario
        The scenario.
    budget : int in [1, n]
        Distinct keys each run may read.
    runs : int in [1, 1000000]
        Runs of each method.
    seed : int in [0, 2**63 - 1]
        Seed of the runs.
    methods : iterable of str, each one of METHODS
        Among "topk", "sampling", "importance", "hybrid".
    proposal : array-like of float >= 0, (n,), optional
        Importance sampling's proposal; default :func:`rough_proposal` of the scenario's scores.
    n_exact : int in [0, budget - 1], optional
        The sticks the hybrid reads exactly (default ``budget // 2``).

    Returns
    -------
    dict
        Method -> numpy.ndarray, float64, (runs,): the estimates.

    Raises
    ------
    TypeError
        ``scenario`` not a :class:`Scenario`, or an integer argument that is not an integer.
    ValueError
        An unknown method, an argument outside its range, or a bad ``proposal``.
    """
    methods, rng, u = _check_common(scenario, methods, seed, proposal)
    budget = check_int("budget", budget, 1, scenario.n)
    runs = check_int("runs", runs, 1, 1_000_000)
    n_exact = _check_n_exact(n_exact, budget)
    return {m: _repeat(scenario, u, m, budget, rng, runs, n_exact) for m in methods}


def error_curves(
    scenario: Scenario,
    budgets=None,
    n_seeds: int = 400,
    seed: int = 0,
    proposal=None,
    methods=METHODS,
    n_exact: int | None = None,
) -> ErrorCurves:
    """RMS error of each method against the exact output, per budget, over ``n_seeds`` runs.

    TopK is deterministic, so its entry is its absolute error. With the same seed and methods,
    a run with another ``n_exact`` replays the same random stream up to the hybrid's draws.

    Parameters
    ----------
    scenario : Scenario
        The scenario.
    budgets : array-like of int in [1, n], optional
        The budgets B; default every one from 1 to n for n <= 64, else 24 on a geometric grid.
    n_seeds : int in [1, 1000000]
        Runs per budget of each random method.
    seed : int in [0, 2**63 - 1]
        Seed of the runs.
    proposal : array-like of float >= 0, (n,), optional
        Importance sampling's proposal; default :func:`rough_proposal` of the scenario's scores.
    methods : iterable of str, each one of METHODS
        Among "topk", "sampling", "importance", "hybrid".
    n_exact : int in [0, min(budgets) - 1], optional
        The sticks the hybrid reads exactly at every budget (default half of each budget; it
        must be below the smallest budget).

    Returns
    -------
    ErrorCurves
        ``reference`` is sigma_w / sqrt(B), the RMS error of B independent draws from the true
        weights.

    Raises
    ------
    TypeError
        ``scenario`` not a :class:`Scenario`, or an integer argument that is not an integer.
    ValueError
        An unknown method, budgets that are not integers in [1, n], an argument outside its
        range, or a bad ``proposal``.
    """
    methods, rng, u = _check_common(scenario, methods, seed, proposal)
    n = scenario.n
    if budgets is None:
        budgets = np.arange(1, n + 1) if n <= 64 else np.unique(np.geomspace(1, n, 24).round().astype(int))
    budgets = check_array("budgets", budgets, ndim=1, dtype=np.float64)
    if np.any(budgets != np.round(budgets)) or budgets.min() < 1 or budgets.max() > n:
        raise ValueError(f"budgets must be integers in [1, {n}], got min {budgets.min():g} and max {budgets.max():g}")
    budgets = budgets.astype(int)
    n_seeds = check_int("n_seeds", n_seeds, 1, 1_000_000)
    n_exact = _check_n_exact(n_exact, int(budgets.min()))
    runs = {m: 1 if m == "topk" else n_seeds for m in methods}

    def rms(m, b):
        estimates = _repeat(scenario, u, m, int(b), rng, runs[m], n_exact)
        return math.sqrt(np.mean((estimates - scenario.truth) ** 2))

    errors = {m: np.array([rms(m, b) for b in budgets]) for m in methods}
    spread = value_spread(scenario.values, scenario.weights)
    return ErrorCurves(scenario.name, budgets, errors, spread / np.sqrt(budgets), spread, n_seeds, n)


def loglog_slope(budgets, errors) -> float:
    """Least-squares slope of log(error) against log(budget); -0.5 means 1/sqrt(B).

    Parameters
    ----------
    budgets : array-like of float > 0, (m,), m >= 2
        The budgets.
    errors : array-like of float > 0, (m,)
        The error at each.

    Returns
    -------
    float
        The slope.

    Raises
    ------
    ValueError, TypeError
        Arrays that are not 1-D, finite, positive, of one length and at least 2 long.
    """
    budgets = check_array("budgets", budgets, ndim=1, min_len=2)
    errors = check_array("errors", errors, ndim=1, min_len=2)
    if budgets.shape != errors.shape:
        raise ValueError(f"errors must have the same length as budgets ({budgets.size}), got {errors.size}")
    if np.any(budgets <= 0) or np.any(errors <= 0):
        raise ValueError("budgets and errors must be > 0 to take logarithms")
    return float(np.polyfit(np.log(budgets), np.log(errors), 1)[0])


# ----------------------------------------------------------------------------- studies


def _rms(estimates, truth) -> float:
    return math.sqrt(float(np.mean((np.asarray(estimates) - truth) ** 2)))


SHARPNESS = (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0)
