"""Notebooks 07a and 07b, sampled decoding: KL from dense, merging two partial softmaxes, perplexity, and
one decode step over an index and its buffer.

The notebook gives ``log_softmax`` (the logits minus their logsumexp, built on the learner's 03
softmax idea), so the KL and perplexity exercises ask for what is new: which distribution weighs
the log-ratio, and which log-probability each position contributes. ``buffered_step`` is
MagicPIG's decode step as an engine runs it: the sample from tables built once (06b's
``build_tables`` and ``query_hits``, 06a's ``log_u``), the exact keys including the tokens
written since the build, each part a partial softmax, joined by ``merge_partial``."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, FLOAT, Case, Exercise, Wrong
from pigviz.lessons.exercises.nb03 import cos_centred, softmax
from pigviz.lessons.exercises.nb04 import bit_agreement, log_inclusion_probability
from pigviz.lessons.exercises.nb06 import build_tables, log_u, output_and_read, query_hits
from pigviz.lsh.reference import simhash_codes

# --------------------------------------------------------------------------- references


def log_softmax(logits):
    """log softmax over the last axis, as notebook 07a gives it: the logits minus their logsumexp."""
    x = np.asarray(logits, dtype=np.float64)
    return x - logsumexp(x)[..., None]


def kl_divergence(ref_logits, logits):
    log_p, log_q = log_softmax(ref_logits), log_softmax(logits)  # p: dense, q: the method
    kl = (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)  # KL(p || q), in nats, weighed by dense
    return kl if kl.ndim else float(kl)


def merge_partial(out_a, lse_a, out_b, lse_b):
    out_a, out_b = np.asarray(out_a, dtype=np.float64), np.asarray(out_b, dtype=np.float64)
    lse_a, lse_b = np.asarray(lse_a, dtype=np.float64), np.asarray(lse_b, dtype=np.float64)
    top = np.maximum(lse_a, lse_b)  # shift both normalisers: exp cannot overflow
    w_a, w_b = np.exp(lse_a - top), np.exp(lse_b - top)
    return (w_a[..., None] * out_a + w_b[..., None] * out_b) / (w_a + w_b)[..., None]


def perplexity(logits, targets):
    log_probs = log_softmax(logits)  # (T, V)
    nll = -log_probs[np.arange(len(log_probs)), np.asarray(targets)]  # each position's own target
    return float(np.exp(nll.mean()))


def logsumexp(scores):
    """log(sum(exp(scores))) over the last axis, shifted by the max (notebook 07a, section 1)."""
    top = np.max(scores, axis=-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))


def softmax_part(scores, values):
    """Attention over one set of keys: its output, and lse (notebook 07a, section 1)."""
    return softmax(scores) @ values, logsumexp(scores)


def index_prefill(keys, K, L, sinks, recent, seed=0):
    """The index notebook 07b builds once after the prefill, over ``keys`` (n, d): random planes,
    the mean of the sampleable keys, and the tables of the centred keys (06.build_tables)."""
    keys = np.asarray(keys, dtype=np.float64)
    n, d = keys.shape
    planes = np.random.default_rng(seed).standard_normal((d, K * L))
    mu = keys[sinks : n - recent].mean(axis=0)
    tables = build_tables(simhash_codes(keys - mu, planes, K, L), K)
    return {
        "tables": tables,
        "planes": planes,
        "mu": mu,
        "K": K,
        "L": L,
        "n_indexed": n,
        "sinks": sinks,
        "recent": recent,
    }


def buffered_step(q, keys, values, index):
    q, keys, values = (np.asarray(a, dtype=np.float64) for a in (q, keys, values))
    n, n0, d = len(keys), index["n_indexed"], len(q)
    K, L, sinks, recent = index["K"], index["L"], index["sinks"], index["recent"]
    exact = np.r_[0:sinks, n0 - recent : n]  # sinks, the indexed recent window, then the buffer
    hits = query_hits(index["tables"], simhash_codes(q, index["planes"], K, L))  # (n0,): indexed keys only
    hits[:sinks], hits[n0 - recent :] = 0, 0  # read exactly anyway
    sampled = np.flatnonzero(hits >= 2)
    out, lse = softmax_part(keys[exact] @ q / np.sqrt(d), values[exact])  # the exact part, buffer included
    if sampled.size:  # the sampled part, each score corrected by log u; none sampled: the exact part alone
        scores = keys[sampled] @ q / np.sqrt(d) - log_u(q, keys[sampled], index["mu"], K, L)
        out_s, lse_s = softmax_part(scores, values[sampled])
        out = merge_partial(out_s, lse_s, out, lse)
    return out, np.r_[exact, sampled]


# --------------------------------------------------------------------------- cases


def _kl_cases():
    rng = np.random.default_rng(701)
    ref = rng.standard_normal(100)
    batch = rng.standard_normal((5, 50))
    return [
        Case(
            "two tokens: (1/2, 1/2) against (3/4, 1/4)",
            (np.array([0.0, 0.0]), np.array([np.log(3.0), 0.0])),
            "KL(dense || method) = sum over tokens of p log(p / q), natural log (nats), p = softmax(ref_logits)",
        ),
        Case(
            "a skewed reference: (0.9, 0.1) against (1/2, 1/2)",
            (np.array([np.log(9.0), 0.0]), np.array([0.0, 0.0])),
            "KL is not symmetric: the expectation is under the first (dense) distribution",
        ),
        Case("identical logits", (ref, ref.copy()), "a distribution is 0 nats from itself"),
        Case("logits shifted by a constant", (ref, ref + 5.0), "softmax ignores a shift: the KL is 0"),
        Case("vocabulary of 100", (ref, ref + 0.5 * rng.standard_normal(100))),
        Case(
            "a (5, 50) batch: one KL per row",
            (batch, batch + rng.standard_normal((5, 50))),
            "reduce over the last axis only: one number per row",
        ),
        Case(
            "logits in the thousands",
            (1000.0 * ref, 1000.0 * rng.standard_normal(100)),
            "work with log-softmax (subtract the max, then the log of the sum of exps): probabilities "
            "underflow to 0 and their logs to -inf",
        ),
        Case(
            "logits around 5000",
            (ref + 5000.0, 0.5 * rng.standard_normal(100) + 5000.0),
            "exp(5000) overflows: subtract each row's maximum first (a shift does not change softmax)",
        ),
        Case("nearly identical distributions", (ref, ref + 1e-4 * rng.standard_normal(100))),
    ]


def _merge_cases():
    rng = np.random.default_rng(702)
    a, b = rng.standard_normal(6), rng.standard_normal(6)
    apart = np.array([1000.0, -1000.0, 3.0])  # three heads whose normalisers lie thousands apart
    return [
        Case(
            "equal normalisers: the average",
            (np.array([1.0, 0.0]), 0.0, np.array([0.0, 1.0]), 0.0),
            "lse is a log: lse = 0 means a weight of exp(0) = 1 for each part, not 0 (weights proportional "
            "to lse give 0 / 0 here); weigh each part by exp(lse)",
        ),
        Case(
            "part a holds 3/4 of the weight",
            (np.array([1.0, 0.0]), np.log(3.0), np.array([0.0, 1.0]), 0.0),
            "each part counts in proportion to its normaliser exp(lse)",
        ),
        Case(
            "normalisers in the thousands",
            (a, 1000.0, b, 1001.0),
            "exp(1000) overflows: subtract the larger lse first (only the difference matters)",
        ),
        Case(
            "very negative normalisers",
            (a, -1000.0, b, -1002.0),
            "exp(-1000) underflows to 0: subtract the larger lse first",
        ),
        Case("part b is empty (lse = -inf)", (a, 0.3, b, -np.inf), "an empty part has weight 0"),
        Case("one part dominates", (a, 0.0, b, 800.0)),
        Case(
            "a batch of 4 heads: out (4, 8), lse (4,)",
            (
                rng.standard_normal((4, 8)),
                rng.standard_normal(4) * 3,
                rng.standard_normal((4, 8)),
                rng.standard_normal(4) * 3,
            ),
            "each head has its own two weights: broadcast lse (H,) over the last axis of out (H, dv)",
        ),
        Case(
            "a batch of 3 heads whose normalisers lie 2,000 apart",
            (rng.standard_normal((3, 5)), apart, rng.standard_normal((3, 5)), apart - 1.0),
            "shift each head by its own max(lse_a, lse_b), not by one maximum over the batch: exp(-2000) "
            "underflows to 0, and 0 / 0 is NaN",
        ),
    ]


def _perplexity_cases():
    rng = np.random.default_rng(703)
    logits = rng.standard_normal((20, 50))
    targets = rng.integers(0, 50, 20)
    unlikely = logits.copy()
    unlikely[0, targets[0]] = -800.0
    confident = np.full((3, 5), -5.0)
    confident[np.arange(3), [1, 4, 0]] = 5.0
    return [
        Case(
            "uniform over 10 tokens",
            (np.zeros((4, 10)), np.array([0, 3, 9, 2])),
            "a uniform guess over V tokens has perplexity V",
        ),
        Case("20 positions, vocabulary 50", (logits, targets)),
        Case(
            "one position",
            (logits[:1], targets[:1]),
            "T = 1: one row of logits and one target; targets[t] is already the token after position t, so "
            "score logits[t] against targets[t] without a shift",
        ),
        Case("confident and right", (confident, np.array([1, 4, 0]))),
        Case(
            "confident and wrong",
            (confident, np.array([0, 0, 1])),
            "perplexity is exp(mean negative log-probability of the targets)",
        ),
        Case(
            "logits around 1000",
            (3.0 * logits + 1000.0, targets),
            "exp(1000) overflows: use log-softmax, which subtracts each row's maximum first",
        ),
        Case(
            "one target with probability exp(-800)",
            (unlikely, targets),
            "a probability of exp(-800) underflows to 0 and log(0) = -inf: use log-softmax, not log(softmax)",
        ),
    ]


def _cone(seed, n, d, dv, sink=False):
    """Keys in a narrow cone (as real keys are), optionally a large first key (a sink)."""
    rng = np.random.default_rng(seed)
    cone = rng.standard_normal(d)
    keys = 3.0 * cone / np.linalg.norm(cone) * np.sqrt(d) + rng.standard_normal((n, d))
    if sink:
        keys[0] = 12.0 * keys[0]
    return rng.standard_normal(d) * 2.0, keys, rng.standard_normal((n, dv))


def _step_case(label, seed, n0, buffer, d, K, L, sinks, recent, hint=None, sink=False):
    q, keys, values = _cone(seed, n0 + buffer, d, 4, sink=sink)
    index = index_prefill(keys[:n0], K, L, sinks, recent, seed=seed)
    return Case(label, (q, keys, values, index), hint)


def _buffered_cases():
    from pigviz.study.estimators import shipped_row  # heavy: study.estimators loads torch and the shipped capture

    cases = [
        _step_case(
            "40 indexed keys and a buffer of 4, d = 4, K = 2, L = 6, 2 sinks, 4 recent",
            731,
            40,
            4,
            4,
            2,
            6,
            2,
            4,
            "the exact part: the sinks, the last `recent` INDEXED tokens and every key of the buffer, n_indexed .. n-1",
        ),
        _step_case(
            "an empty buffer (n = n_indexed)",
            732,
            300,
            0,
            16,
            4,
            20,
            4,
            16,
            "with no buffer, the exact part is the sinks and the last `recent` indexed tokens",
        ),
        _step_case(
            "a buffer of 40, larger than the recent window of 16",
            733,
            300,
            40,
            16,
            4,
            20,
            4,
            16,
            "the window is the last `recent` tokens of the index, n_indexed - recent .. n_indexed - 1; the "
            "buffer, however long, is read exactly after it",
        ),
        _step_case(
            "no recent window (recent = 0) and a buffer of 5",
            734,
            300,
            5,
            16,
            4,
            20,
            4,
            0,
            "with recent = 0 the exact part is the sinks and the buffer",
        ),
        _step_case("a large first key (a sink), a buffer of 8", 735, 300, 8, 16, 4, 20, 4, 16, sink=True),
        _step_case(
            "nothing reaches 2 hits (K = 14, L = 3): no sampled key",
            736,
            300,
            6,
            16,
            14,
            3,
            4,
            16,
            "with nothing sampled the sampled part is empty: the output is the exact part alone (a softmax "
            "over no scores has no max)",
        ),
    ]
    for row, head, buffer in ((0, 0, 12), (3, 1, 3)):  # layers 2 and 25 of the shipped capture
        q, keys, values = shipped_row(row, head, 63)
        index = index_prefill(keys[: len(keys) - buffer], 10, 150, 4, 64, seed=row)
        cases.append(
            Case(
                f"a real row: shipped layer {(2, 13, 19, 25)[row]}, {len(keys):,} keys, a buffer of {buffer}, "
                "(K, L) = (10, 150)",
                (q, keys, values, index),
            )
        )
    return cases


# --------------------------------------------------------------------------- wrong versions


def _kl_reversed(ref_logits, logits):
    return kl_divergence(logits, ref_logits)


def _kl_raw_logits(ref_logits, logits):
    r, g = np.asarray(ref_logits, float), np.asarray(logits, float)
    p = np.exp(r - r.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = (p * (r - g)).sum(axis=-1)
    return out if out.ndim else float(out)


def _kl_from_probabilities(ref_logits, logits):
    def softmax(x):
        x = np.asarray(x, float)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    p, q = softmax(ref_logits), softmax(logits)
    out = (p * np.log(p / q)).sum(axis=-1)
    return out if out.ndim else float(out)


def _kl_naive_exp(ref_logits, logits):
    def softmax(x):
        e = np.exp(np.asarray(x, float))
        return e / e.sum(axis=-1, keepdims=True)

    p, q = softmax(ref_logits), softmax(logits)
    out = (p * (np.log(p) - np.log(q))).sum(axis=-1)
    return out if out.ndim else float(out)


def _kl_bits(ref_logits, logits):
    return kl_divergence(ref_logits, logits) / np.log(2.0)


def _kl_one_for_the_batch(ref_logits, logits):
    return float(np.sum(kl_divergence(ref_logits, logits)))


def _merge_average(out_a, lse_a, out_b, lse_b):
    return (np.asarray(out_a, float) + np.asarray(out_b, float)) / 2


def _merge_linear_lse(out_a, lse_a, out_b, lse_b):
    lse_a, lse_b = np.asarray(lse_a, float), np.asarray(lse_b, float)
    return (lse_a[..., None] * np.asarray(out_a, float) + lse_b[..., None] * np.asarray(out_b, float)) / (
        lse_a + lse_b
    )[..., None]


def _merge_naive_exp(out_a, lse_a, out_b, lse_b):
    w_a, w_b = np.exp(np.asarray(lse_a, float)), np.exp(np.asarray(lse_b, float))
    return (w_a[..., None] * np.asarray(out_a, float) + w_b[..., None] * np.asarray(out_b, float)) / (w_a + w_b)[
        ..., None
    ]


def _merge_swapped(out_a, lse_a, out_b, lse_b):
    return merge_partial(out_a, lse_b, out_b, lse_a)


def _merge_softmax_over_heads(out_a, lse_a, out_b, lse_b):
    lse = np.stack([np.asarray(lse_a, float), np.asarray(lse_b, float)])  # (2,) or (2, H)
    w = np.exp(lse - lse.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)  # the last axis: the two parts for one head, the heads for a batch
    return w[0][..., None] * np.asarray(out_a, float) + w[1][..., None] * np.asarray(out_b, float)


def _merge_one_shift_for_the_batch(out_a, lse_a, out_b, lse_b):
    lse_a, lse_b = np.asarray(lse_a, float), np.asarray(lse_b, float)
    top = max(lse_a.max(), lse_b.max())  # one maximum over every head
    w_a, w_b = np.exp(lse_a - top), np.exp(lse_b - top)
    return (w_a[..., None] * np.asarray(out_a, float) + w_b[..., None] * np.asarray(out_b, float)) / (w_a + w_b)[
        ..., None
    ]


def _ppl_sum(logits, targets):
    return perplexity(logits, targets) ** len(np.asarray(targets))


def _ppl_base_two(logits, targets):
    return 2.0 ** np.log(perplexity(logits, targets))


def _ppl_shifted_targets(logits, targets):
    x, t = np.asarray(logits, float), np.asarray(targets)
    return perplexity(x[:-1], t[1:])  # shifts as a language-model loss does, though targets are already shifted


def _ppl_raw_logits(logits, targets):
    x = np.asarray(logits, float)
    return float(np.exp(-x[np.arange(len(x)), np.asarray(targets)].mean()))


def _ppl_inverse_mean_prob(logits, targets):
    x = np.asarray(logits, float)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return float(1.0 / p[np.arange(len(x)), np.asarray(targets)].mean())


def _ppl_log_of_softmax(logits, targets):
    x = np.asarray(logits, float)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return float(np.exp(-np.log(p[np.arange(len(x)), np.asarray(targets)]).mean()))


def _step(q, keys, values, index, mistake=""):
    """buffered_step with one mistake made (the wrong versions below)."""
    q, keys, values = (np.asarray(a, dtype=np.float64) for a in (q, keys, values))
    n, n0, d = len(keys), index["n_indexed"], len(q)
    K, L, sinks, recent, mu = index["K"], index["L"], index["sinks"], index["recent"], index["mu"]
    stop = n0 if mistake == "buffer dropped" else n
    if mistake == "buffer sampled":
        stop = n0
    exact = np.r_[0:sinks, n0 - recent : stop]
    if mistake == "window from the end":
        exact = np.unique(np.r_[0:sinks, np.arange(n)[n - recent :]])
    q_codes = simhash_codes(q, index["planes"], K, L)
    hits = query_hits(index["tables"], q_codes)
    if mistake == "buffer sampled":  # the buffer hashed like the indexed keys, and sampled with them
        buffer_hits = (simhash_codes(keys[n0:] - mu, index["planes"], K, L) == q_codes).sum(axis=1)
        hits = np.r_[hits, buffer_hits.reshape(-1)]
    if mistake != "exact sampled again":
        inside = exact[exact < len(hits)]
        hits[inside] = 0
    sampled = np.flatnonzero(hits >= (1 if mistake == "one hit" else 2))
    if mistake == "mean of the cache":
        mu = keys[sinks : n - recent].mean(axis=0)
    correction = 0.0 if mistake == "no log u" else log_u(q, keys[sampled], mu, K, L)
    exact_scores = keys[exact] @ q / np.sqrt(d)
    if mistake == "log u on the buffer":
        buffer = exact >= n0
        exact_scores[buffer] -= log_u(q, keys[exact[buffer]], mu, K, L)
    out, lse = softmax_part(exact_scores, values[exact])
    if sampled.size:
        out_s, lse_s = softmax_part(keys[sampled] @ q / np.sqrt(d) - correction, values[sampled])
        out = (out_s + out) / 2 if mistake == "plain average" else merge_partial(out_s, lse_s, out, lse)
    return out, np.r_[exact, sampled]


def _bs_buffer_dropped(q, keys, values, index):
    return _step(q, keys, values, index, "buffer dropped")


def _bs_buffer_sampled(q, keys, values, index):
    return _step(q, keys, values, index, "buffer sampled")


def _bs_window_from_the_end(q, keys, values, index):
    return _step(q, keys, values, index, "window from the end")


def _bs_plain_average(q, keys, values, index):
    return _step(q, keys, values, index, "plain average")


def _bs_log_u_on_the_buffer(q, keys, values, index):
    return _step(q, keys, values, index, "log u on the buffer")


def _bs_no_log_u(q, keys, values, index):
    return _step(q, keys, values, index, "no log u")


def _bs_exact_sampled_again(q, keys, values, index):
    return _step(q, keys, values, index, "exact sampled again")


def _bs_one_hit(q, keys, values, index):
    return _step(q, keys, values, index, "one hit")


def _bs_mean_of_the_cache(q, keys, values, index):
    return _step(q, keys, values, index, "mean of the cache")


EXERCISES = [
    Exercise(
        name="07.kl_divergence",
        notebook_key="07a",
        signature="kl_divergence(ref_logits, logits) -> float or ndarray",
        task="KL(dense || method) in nats (natural log) between the next-token distributions "
        "softmax(ref_logits) (dense) and softmax(logits) (the method), over the last axis: for one "
        "position (two 1-D arrays of V logits) a float; for a batch (two (T, V) arrays) one KL per row, "
        "shape (T,). Exact for logits in the thousands, where exp overflows and small probabilities "
        "underflow to 0: use the notebook's log_softmax.",
        reference=kl_divergence,
        make_cases=_kl_cases,
        helpers=(log_softmax, logsumexp),
        output=ARRAY,
        rtol=1e-6,
        atol=1e-10,
        hint="Reduce over the last axis only: a batch gives one value per row, one position a float.",
        nudge="`KL(p ‖ q) = Σ p log(p / q)`, with `p` dense's distribution and `q` the method's: it is not "
        "symmetric, so keep them in that order.",
        difficulty=1,
        importance=4,
        minutes=4,
        wrong=(
            Wrong(
                "KL(method || dense)",
                _kl_reversed,
                "KL is not symmetric: weigh by the dense distribution, the first argument",
            ),
            Wrong(
                "logits used as log-probabilities",
                _kl_raw_logits,
                "logits are log-probabilities only up to a constant per row: take log_softmax of both",
            ),
            Wrong(
                "log(p / q) from probabilities",
                _kl_from_probabilities,
                "probabilities underflow to 0 for large logits and log(0/0) is NaN: compute log_softmax directly",
            ),
            Wrong(
                "exp without subtracting the max",
                _kl_naive_exp,
                "exp(1000) overflows: subtract the row maximum before exp",
            ),
            Wrong(
                "KL in bits (log base 2)",
                _kl_bits,
                "the KL is asked in nats: use the natural log (np.log), not log2; bits are nats / ln 2",
            ),
            Wrong(
                "one KL for the whole batch",
                _kl_one_for_the_batch,
                "sum over the last axis only (axis=-1): a batch of T positions gives T values, not their total",
            ),
        ),
    ),
    Exercise(
        name="07.merge_partial",
        notebook_key="07a",
        signature="merge_partial(out_a, lse_a, out_b, lse_b) -> ndarray",
        task="Merge two attention outputs over disjoint sets of keys into the output over their union. "
        "Each part comes with lse = log(sum of exp(score)) over its keys. Shapes: out_a, out_b (..., dv) "
        "and lse_a, lse_b (...): one head (out (dv,), lse a number) or a batch of H heads (out (H, dv), "
        "lse (H,)), each head merged with its own two weights. Stable for lse in the thousands, of either "
        "sign, and for heads whose lse lie thousands apart; an empty part has lse = -inf.",
        reference=merge_partial,
        make_cases=_merge_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-12,
        hint="Your `softmax` from notebook 03 faces the same overflow and solves it with one shift; here the "
        "shift is one per head, and an output needs its weight broadcast over `dv`.",
        nudge="Each part's output is already normalised over its own keys. In the union, a part counts in "
        "proportion to its share of the total sum of exp-scores, and `lse` is the log of that sum. Only the "
        "difference of the two `lse` matters, just as only differences of scores matter in your softmax.",
        difficulty=2,
        importance=3,
        minutes=5,
        wrong=(
            Wrong(
                "plain average",
                _merge_average,
                "the parts count in proportion to their normalisers exp(lse), not equally",
            ),
            Wrong(
                "weights proportional to lse",
                _merge_linear_lse,
                "lse is a log: the weight of a part is exp(lse), not lse",
            ),
            Wrong(
                "exp without a shift",
                _merge_naive_exp,
                "exp(1000) overflows and exp(-1000) underflows: subtract max(lse_a, lse_b) first",
            ),
            Wrong("weights swapped", _merge_swapped, "out_a is weighed by exp(lse_a), out_b by exp(lse_b)"),
            Wrong(
                "softmax over the heads, not over the two parts",
                _merge_softmax_over_heads,
                "with lse stacked as (2, H), normalise over the two parts (axis 0), one pair of weights per head; "
                "the last axis runs over the heads",
            ),
            Wrong(
                "one shift for the whole batch",
                _merge_one_shift_for_the_batch,
                "shift each head by its own max(lse_a, lse_b), not by one maximum over the batch",
            ),
        ),
    ),
    Exercise(
        name="07.perplexity",
        notebook_key="07a",
        signature="perplexity(logits, targets) -> float",
        task="Perplexity of the real next tokens: logits (T, V) with T >= 1, targets (T,) integer token "
        "ids, targets[t] the token that follows position t (already aligned: no shift); a float (at least 1), "
        "with the natural log. Exact for logits "
        "in the thousands and for a target whose probability is as small as exp(-800), which underflows to 0: "
        "use the notebook's log_softmax.",
        reference=perplexity,
        make_cases=_perplexity_cases,
        helpers=(log_softmax, logsumexp),
        output=FLOAT,
        rtol=1e-6,
        atol=1e-12,
        hint="numpy's integer-array indexing can pick one entry per row of a 2-D array in one step.",
        nudge="Perplexity is the exp of the mean negative log-probability of the targets, one per position.",
        difficulty=1,
        importance=3,
        minutes=3,
        wrong=(
            Wrong(
                "exp of the summed NLL", _ppl_sum, "average the negative log-probabilities over positions before exp"
            ),
            Wrong(
                "logits used as log-probabilities",
                _ppl_raw_logits,
                "normalise first: log_softmax(logits), not the raw logits",
            ),
            Wrong(
                "1 / mean probability",
                _ppl_inverse_mean_prob,
                "perplexity averages log-probabilities (a geometric mean), not probabilities",
            ),
            Wrong(
                "log of the softmax probabilities",
                _ppl_log_of_softmax,
                "log(softmax(x)) is -inf where the probability underflows to 0: compute log_softmax directly",
            ),
            Wrong(
                "2 ** mean NLL",
                _ppl_base_two,
                "the NLL is in nats (natural log), so its base is e: exp(mean NLL), not 2 ** mean NLL",
            ),
            Wrong(
                "targets shifted by one",
                _ppl_shifted_targets,
                "targets[t] already is the token after position t: score logits[t] against targets[t], "
                "without shifting logits or targets",
            ),
        ),
    ),
    Exercise(
        name="07.buffered_step",
        notebook_key="07b",
        signature="buffered_step(q, keys, values, index) -> (output, read)",
        task="One decode step of MagicPIG for one query q (d,) over the whole visible cache, keys (n, d) and "
        "values (n, dv), with an index built once over its first n_indexed keys. index is a dict: 'tables' "
        "(your build_tables of the centred indexed keys), 'planes' (d, K*L), 'mu' (d,) (the mean they were "
        "centred by), 'K', 'L', 'n_indexed', 'sinks', 'recent' (sinks + recent < n_indexed). Keys n_indexed .. "
        "n-1, the buffer, were written since the build: they are in no table (n may equal n_indexed: no "
        "buffer). Read exactly: the first `sinks` keys, the last `recent` indexed keys and the whole buffer. "
        "Sample: the indexed keys outside those that share the query's bucket (q hashed as it is) in at least "
        "2 tables, each score corrected by its u; when no key is sampled the output is the exact part's. "
        "Return (output, read): the output (dv,) and the positions of every key read, in any order.",
        reference=buffered_step,
        helpers=(
            query_hits,
            log_u,
            cos_centred,
            bit_agreement,
            log_inclusion_probability,
            softmax_part,
            logsumexp,
            softmax,
            merge_partial,
        ),
        make_cases=_buffered_cases,
        compare=output_and_read,
        rtol=1e-3,
        atol=1e-5,
        nudge="Three groups of keys meet in one step: the indexed keys the tables can hand over, the indexed "
        "keys read for sure, and the keys written after the tables were built, which no table holds. Which of "
        "them carry a known chance of being drawn, and which are certain? Each group read for sure "
        "scores as in plain attention; only drawn keys are corrected.",
        hint="The pieces loaded above cover every step, joined as in 07a. The tables cover positions "
        "0 .. n_indexed - 1 only, so the hit counts have n_indexed entries; the buffer joins the exact "
        "positions. softmax_part cannot take zero keys (np.max of nothing), while your merge_partial "
        "takes an empty part as lse = -inf.",
        difficulty=3,
        importance=4,
        minutes=15,
        wrong=(
            Wrong(
                "buffer dropped",
                _bs_buffer_dropped,
                "the keys written since the build, n_indexed .. n-1, are in no table: read them exactly with the "
                "sinks and the window, or the newest tokens are never attended to",
            ),
            Wrong(
                "buffer sampled instead of read exactly",
                _bs_buffer_sampled,
                "the buffer is not in the index: an engine reads it exactly (it is small and the newest); hash and "
                "sample only the indexed keys",
            ),
            Wrong(
                "window counted from the end of the cache",
                _bs_window_from_the_end,
                "the recent window is the last `recent` INDEXED tokens, n_indexed - recent .. n_indexed - 1, and "
                "the buffer comes on top of it, however long",
            ),
            Wrong(
                "parts merged by a plain average",
                _bs_plain_average,
                "join the two parts with merge_partial: each counts in proportion to exp(lse), not equally",
            ),
            Wrong(
                "log u subtracted from the buffer's scores",
                _bs_log_u_on_the_buffer,
                "the buffer is read with certainty (u = 1): subtract log u from the sampled scores only",
            ),
            Wrong(
                "no log u correction",
                _bs_no_log_u,
                "each sampled key's score is corrected by -log u (your log_u with the index's mu, K and L)",
            ),
            Wrong(
                "exact keys sampled again",
                _bs_exact_sampled_again,
                "the sinks and the recent window are read exactly already: set their hit counts to 0, or they "
                "enter twice",
            ),
            Wrong(
                "keys with one hit sampled",
                _bs_one_hit,
                "a key is sampled when it shares the query's bucket in at least 2 tables, as log u assumes",
            ),
            Wrong(
                "mean taken from the cache now",
                _bs_mean_of_the_cache,
                "log u's angle uses the mean the tables were built with, index['mu'], not a mean of today's cache",
            ),
        ),
    ),
]
