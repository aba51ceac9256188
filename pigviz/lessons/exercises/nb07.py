"""Notebook 07, sampled decoding: KL from dense, merging two partial softmaxes, perplexity.

The notebook gives ``log_softmax`` (the logits minus their logsumexp, built on the learner's 03
softmax idea), so the KL and perplexity exercises ask for what is new: which distribution weighs
the log-ratio, and which log-probability each position contributes."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, FLOAT, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def log_softmax(logits):
    """log softmax over the last axis, as notebook 07 gives it (from its logsumexp)."""
    x = np.asarray(logits, dtype=np.float64)
    top = x.max(axis=-1, keepdims=True)
    return x - (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))


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


EXERCISES = [
    Exercise(
        name="07.kl_divergence",
        signature="kl_divergence(ref_logits, logits) -> float or ndarray",
        task="KL(dense || method) in nats (natural log) between the next-token distributions "
        "softmax(ref_logits) (dense) and softmax(logits) (the method), over the last axis: for one "
        "position (two 1-D arrays of V logits) a float; for a batch (two (T, V) arrays) one KL per row, "
        "shape (T,). Exact for logits in the thousands, where exp overflows and small probabilities "
        "underflow to 0: use the notebook's log_softmax.",
        reference=kl_divergence,
        make_cases=_kl_cases,
        helpers=(log_softmax,),
        output=ARRAY,
        rtol=1e-6,
        atol=1e-10,
        hint="`log_p = log_softmax(ref_logits)` and likewise `log_q`; the weights are `np.exp(log_p)`; reduce "
        "with `.sum(axis=-1)`.",
        nudge="KL is not symmetric: which distribution weighs the log-ratio? And `log(p / q)` is a difference of "
        "two logs you can already compute exactly; only the weights need the probabilities themselves.",
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
        hint="`np.maximum(lse_a, lse_b)` gives one shift per head; the weight of part a is `exp(lse_a - shift)`; "
        "`w[..., None]` broadcasts one weight per head over `dv`.",
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
        signature="perplexity(logits, targets) -> float",
        task="Perplexity of the real next tokens: logits (T, V) with T >= 1, targets (T,) integer token "
        "ids, targets[t] the token that follows position t (already aligned: no shift); a float, the exp "
        "of the mean over positions of -log softmax(logits)[t, targets[t]], natural log. Exact for logits "
        "in the thousands and for a target whose probability is as small as exp(-800), which underflows to 0: "
        "use the notebook's log_softmax.",
        reference=perplexity,
        make_cases=_perplexity_cases,
        helpers=(log_softmax,),
        output=FLOAT,
        rtol=1e-6,
        atol=1e-12,
        hint="`a[np.arange(T), targets]` picks one entry per row of a `(T, V)` array.",
        nudge="Each position contributes one number: the log-probability of its own target. Perplexity is a "
        "geometric mean of the probabilities, so average the logs, then undo the log.",
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
]
