"""Your estimator on a real model, beside the library's: :func:`evaluate_estimator`.

An estimator follows the protocol of :mod:`pigviz.attention.protocol`,
``estimator(q, keys, values, budget) -> (output, read)``, for one query head at one
position. ``evaluate_estimator`` runs it on every query head of the shipped capture's heads
(4 layers of SmolLM2-135M, 3 query heads each) at each of its 64 positions, at each budget
fraction f with ``budget = max(1, round(f * visible keys))``, and runs the baselines on the
same rows at the same budgets. An estimator with a build step (:mod:`pigviz.attention.protocol`) builds its
index once per shipped head, over the keys before the first position run, as at the end of a
prefill; the positions after it see those keys and a growing buffer. Each row::

    estimator  fraction  layer  kv_head  head  position  n  budget  keys_read  error  bytes_share

``error`` is ||o_hat - o|| / ||o|| against exact attention over the same float64 keys and
values; ``n`` the keys the query sees (position + 1); ``bytes_share`` what the step read
over what dense attention reads (fp16, :mod:`pigviz.attention.cost`), where the estimator
declares ``bytes_read`` (None otherwise). :func:`summary` averages the rows per estimator and
budget, :func:`ranking` orders them by mean error at each budget.

With the model installed, ``layers=[...]`` runs the same on a fresh capture of those layers
(every KV head and query head; made once and cached by :func:`pigviz.study.run.cached_capture`,
about a minute), with a progress bar.

The library's methods are named in ``baselines`` (:data:`BASELINES`) or passed as estimators
themselves (``pigviz.lsh.estimators.magicpig(12, 200)``). Rows of named baselines are kept
for the process (same capture, budgets and positions), so a second call runs only yours.
"""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.threads import fitted_threads
from pigviz._util.validate import check_float, check_int
from pigviz.attention import cost, protocol
from pigviz.lsh import estimators as lsh_estimators
from pigviz.model import shipped
from pigviz.model.loading import ModelUnavailableError, model_limits
from pigviz.study.run import cached_capture

__all__ = [
    "BASELINES",
    "LABELS",
    "DEFAULT_BUDGETS",
    "ROW_FIELDS",
    "library_estimator",
    "evaluate_estimator",
    "summary",
    "ranking",
    "shipped_row",
    "shipped_queries",
    "token_reads",
]

DEFAULT_BUDGETS = (0.02, 0.05)
ROW_FIELDS = (
    "estimator",
    "fraction",
    "layer",
    "kv_head",
    "head",
    "position",
    "n",
    "budget",
    "keys_read",
    "error",
    "bytes_share",
)


# name -> factory of the library's estimator (each takes its options as keywords)
BASELINES = {
    "topk": protocol.topk,
    "magicpig": lsh_estimators.magicpig,
    "quest": protocol.quest,
    "quest_rank_all": protocol.quest_rank_all,
    "oracle": protocol.oracle,
    "hybrid": protocol.hybrid,
    "streaming": protocol.streaming,
    "mp_exact_top": lsh_estimators.magicpig_exact_top,
    "vattention": lsh_estimators.vattention,
    "sparq": lsh_estimators.sparq,
    "exact": protocol.exact,
}
# How tables and figures name them (Quest is sparse in every layer here: the budget binds everyone).
LABELS = {
    "topk": "TopK",
    "magicpig": "MagicPIG (10, 150)",
    "quest": "Quest (pages of 16)",
    "quest_rank_all": "Quest, every page ranked",
    "oracle": "oracle sampling",
    "hybrid": "hybrid (TopK + sampling)",
    "streaming": "StreamingLLM",
    "mp_exact_top": "MagicPIG + exact top",
    "vattention": "vAttention-style",
    "sparq": "SparQ",
    "exact": "exact",
}
_NEEDS_HEADS = ("magicpig", "mp_exact_top")  # their hyperplanes are shared by a layer's query heads

# What ``layers=[...]`` captures: the bundled model, cached_capture's defaults (8k tokens, last 64).
FRESH_MODEL = "smollm2-135m"
FRESH_LAST = 64

_BASELINE_ROWS: dict = {}  # (capture key, baseline, budgets, positions) -> rows


def library_estimator(name: str, **options):
    """The library's method ``name`` as an estimator.

    Parameters
    ----------
    name : str, a key of BASELINES
        The method (:data:`BASELINES`).
    **options
        Its factory's keywords (e.g. ``page`` for quest, ``heads`` for magicpig).

    Returns
    -------
    callable
        The estimator.

    Raises
    ------
    ValueError
        ``name`` not a key of :data:`BASELINES`.
    TypeError, ValueError
        Options its factory refuses.
    """
    if name not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)} or an estimator, got {name!r}")
    return BASELINES[name](**options)


# --------------------------------------------------------------------------- the rows


def _source(capture, layers, progress):
    """(capture, its layer rows to run, a key naming it for the baseline cache, progress)."""
    if capture is None and layers is None:
        cap = shipped.load_shipped_capture()
        return cap, list(range(len(cap.layers))), ("shipped",), bool(progress)
    if capture is None:
        cap = cached_capture(progress=progress is not False)  # FRESH_MODEL, last FRESH_LAST
        key = ("fresh", cap.metadata["model_revision"], cap.metadata["token_ids_sha256"], cap.n_tokens)
    else:
        cap = capture
        key = ("given", id(cap))
    wanted = cap.layers if layers is None else [check_int("layers entry", x, 0) for x in layers]
    missing = [x for x in wanted if x not in cap.layers]
    if missing or not wanted:
        raise ValueError(f"layers must be a non-empty subset of the captured layers {cap.layers}, got {layers}")
    return cap, [cap.layers.index(x) for x in wanted], key, progress is not False


def _check_fresh_layers(layers) -> list[int]:
    """``layers`` of a fresh capture, checked against the bundled model's files (no load)."""
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be None or a list of layer indices, got {type(layers).__name__} {layers!r}")
    wanted = [check_int("layers entry", x, 0) for x in layers]
    try:
        limits = model_limits(FRESH_MODEL)
    except ModelUnavailableError:
        limits = None  # the capture will say how to install it
    n = limits.layers if limits is not None else None
    if not wanted or (n is not None and any(x >= n for x in wanted)):
        span = f"0..{n - 1}" if n is not None else "the model's"
        raise ValueError(f"layers must be a non-empty list of {FRESH_MODEL}'s layers {span}, got {list(layers)}")
    return wanted


def _positions(positions, last: int) -> list[int]:
    if positions is None:
        return list(range(last))
    if isinstance(positions, int):
        positions = [positions]
    out = sorted({check_int("positions entry", p, 0, last - 1) for p in positions})
    if not out:
        raise ValueError(f"positions must name at least one of the captured queries 0..{last - 1}")
    return out


def _budgets(budgets) -> tuple[float, ...]:
    if isinstance(budgets, (int, float)):
        budgets = (budgets,)
    out = tuple(check_float("budgets entry", b, 0.0, 1.0, lo_open=True) for b in budgets)
    if not out or len(set(out)) != len(out):
        raise ValueError(f"budgets must be distinct fractions in (0, 1], got {budgets!r}")
    return out


def _heads(cap, rows):
    """(layer row, layer, kv head, query head, column of the kv head, row of the query head)."""
    units = []
    g = cap.group_size
    for row in rows:
        for j, head in enumerate(cap.query_heads[row]):
            units.append((row, cap.layers[row], cap.kv_heads[row][j // g], head, j // g, j))
    return units


def _exact(q, keys, values, first: int):
    """Exact outputs (T, dv) of T queries, query t seeing keys 0..first+t (float64)."""
    d = q.shape[1]
    scores = q @ keys.T / math.sqrt(d)
    visible = np.arange(keys.shape[0])[None, :] <= (first + np.arange(q.shape[0]))[:, None]
    scores = np.where(visible, scores, -np.inf)
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ values


def _run(estimator, name, units, arrays, budgets, positions, first, bar) -> list[dict]:
    rows = []
    torch_in = protocol.wants_torch(estimator)
    declared = callable(getattr(estimator, "bytes_read", None))
    indexes = protocol.Indexes(estimator) if protocol.builds(estimator) else None
    for unit, (q, k, v, kt, vt, qt, exact) in zip(units, arrays):
        _, layer, kv_head, head, _, _ = unit
        d, dv = k.shape[1], v.shape[1]
        index = None
        if indexes is not None:  # built once per shipped head, over the keys before its first position
            first_keys = kt[: first + positions[0] + 1] if torch_in else k[: first + positions[0] + 1]
            index = indexes.get((layer, kv_head), first_keys, first + positions[0])[0]
        for t in positions:
            n = first + t + 1
            o = exact[t]
            o_norm = float(np.linalg.norm(o))
            for f in budgets:
                budget = protocol.keys_for(f, n)
                try:
                    if torch_in:
                        out, read = protocol.call(estimator, qt[t], kt[:n], vt[:n], budget, index=index)
                    else:
                        out, read = protocol.call(estimator, q[t], k[:n], v[:n], budget, index=index)
                except Exception as exc:
                    protocol.add_row_note(
                        exc,
                        estimator,
                        "evaluate_estimator",
                        layer=layer,
                        head=head,
                        kv_head=kv_head,
                        position=n - 1,
                        n=n,
                        budget=f"{budget} keys (fraction {f})",
                    )
                    raise
                share = None
                if declared:
                    share = float(estimator.bytes_read(n, d, dv, int(read.size))) / cost.dense_bytes(n, d, dv)
                rows.append(
                    {
                        "estimator": name,
                        "fraction": f,
                        "layer": layer,
                        "kv_head": kv_head,
                        "head": head,
                        "position": n - 1,
                        "n": n,
                        "budget": budget,
                        "keys_read": int(read.size),
                        "error": float(np.linalg.norm(out - o)) / max(o_norm, 1e-300),
                        "bytes_share": share,
                    }
                )
        if bar is not None:
            bar.update(1)
    return rows


def evaluate_estimator(
    estimator,
    budgets=DEFAULT_BUDGETS,
    *,
    positions=None,
    baselines=("topk", "magicpig", "quest"),
    layers=None,
    capture=None,
    progress=None,
) -> list[dict]:
    """Run ``estimator`` and the ``baselines`` on the same rows.

    Parameters
    ----------
    estimator : callable or None
        Your estimator (the protocol's); None runs the baselines only.
    budgets : float in (0, 1], or a sequence of distinct ones
        Fractions f of the visible keys: a row of n keys gets ``budget = max(1, round(f * n))``.
    positions : int or iterable of int in [0, T - 1], optional
        Indices 0..T-1 of the captured queries (default all); the row's ``position`` is the
        token's own.
    baselines : str, callable, or a sequence of them
        Names of :data:`BASELINES` or estimators; none may share the estimator's name.
    layers : list of int, optional
        None for the shipped capture's four heads; a list of layers for a fresh capture of the
        bundled model (needs it installed).
    capture : pigviz.model.capture.Capture, optional
        A capture of your own (``layers`` then picks among its layers).
    progress : bool, optional
        A progress bar (default: only for a fresh capture).

    Returns
    -------
    list of dict
        The rows (module docstring; keys :data:`ROW_FIELDS`), the estimator's first.

    Raises
    ------
    TypeError
        ``estimator`` neither callable nor None, or ``layers`` not a list.
    ValueError
        A budget, position or layer outside its range; a baseline that is neither a name of
        :data:`BASELINES` nor an estimator, or one named as the estimator is.
    Exception
        What the estimator raises, or the protocol's errors (:func:`pigviz.attention.protocol.call`),
        with a note naming the row.
    """
    budgets = _budgets(budgets)
    if estimator is not None and not callable(estimator):
        raise TypeError(f"estimator must be callable as {protocol.SIGNATURE} (or None), got {type(estimator).__name__}")
    if isinstance(baselines, str):
        baselines = (baselines,)
    for b in baselines:
        if not (callable(b) or b in BASELINES):
            raise ValueError(f"baselines entries must be names of {', '.join(BASELINES)} or estimators, got {b!r}")
    names = [protocol.estimator_name(b) if callable(b) else b for b in baselines]
    if estimator is not None:
        mine = protocol.estimator_name(estimator)
        if mine in names:
            raise ValueError(
                f"estimator is called {mine!r}, as a baseline is: give it another name (declare(name=...))"
            )
    if capture is None and layers is not None:
        # A fresh capture takes a minute (and a model load) on an empty cache: every argument is
        # checked against the model's files first, so a wrong one fails at once either way.
        _check_fresh_layers(layers)
        _positions(positions, FRESH_LAST)
    cap, layer_rows, key, show = _source(capture, layers, progress)
    positions = _positions(positions, cap.last)
    units = _heads(cap, layer_rows)
    first = cap.n_tokens - cap.last
    arrays = _arrays(cap, units, first)
    heads = int(cap.metadata["n_model_heads"])
    todo = [(estimator, protocol.estimator_name(estimator), None)] if estimator is not None else []
    for b, name in zip(baselines, names):
        cached = (key, name, budgets, tuple(positions)) if isinstance(b, str) else None
        if cached is None or cached not in _BASELINE_ROWS:
            opts = {"heads": heads} if b in _NEEDS_HEADS else {}
            todo.append((library_estimator(b, **opts) if isinstance(b, str) else b, name, cached))
    bar = None
    if show:
        from tqdm.auto import tqdm  # heavy: progress bars only for long runs

        bar = tqdm(total=len(todo) * len(units), desc="estimators", unit="head")
    done = {}
    try:
        with fitted_threads():  # many small operations: a team stalls beside a busy core
            for est, name, cached in todo:
                done[name] = _run(est, name, units, arrays, budgets, positions, first, bar)
                if cached is not None:
                    _BASELINE_ROWS[cached] = done[name]
    finally:
        if bar is not None:
            bar.close()
    rows = list(done.get(protocol.estimator_name(estimator), [])) if estimator is not None else []
    for name in names:
        if name in done:
            rows.extend(done[name])
        else:
            rows.extend(_BASELINE_ROWS[(key, name, budgets, tuple(positions))])
    return rows


def _arrays(cap, units, first, exact: bool = True):
    """Per unit: q (T, d), keys, values (N, d) float64 numpy, torch views of the same
    memory, and the exact outputs (T, dv) (None unless ``exact``)."""
    import torch  # heavy: torch loads in ~1 s; the capture is stored as torch tensors

    out, kv = [], {}
    for row, _, _, _, col, j in units:
        if (row, col) not in kv:
            k = cap.keys[row, col].to(torch.float64).numpy()
            v = cap.values[row, col].to(torch.float64).numpy()
            kv[(row, col)] = (k, v, torch.from_numpy(k), torch.from_numpy(v))
        k, v, kt, vt = kv[(row, col)]
        q = cap.queries[row, j].to(torch.float64).numpy()
        out.append((q, k, v, kt, vt, torch.from_numpy(q), _exact(q, k, v, first) if exact else None))
    return out


# --------------------------------------------------------------------------- summaries


def summary(rows) -> list[dict]:
    """Per estimator and budget fraction, in the rows' order: ``rows`` averaged.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`evaluate_estimator`.

    Returns
    -------
    list of dict
        ``estimator``, ``fraction``, ``rows`` (how many), ``error`` (mean), ``error_median``,
        ``keys_read`` (mean), ``budget_used`` (mean keys read / n), ``bytes_share`` (mean, or None
        where the estimator declares no bytes).
    """
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["estimator"], r["fraction"]), []).append(r)
    out = []
    for (name, f), rs in groups.items():
        err = np.array([r["error"] for r in rs])
        shares = [r["bytes_share"] for r in rs]
        out.append(
            {
                "estimator": name,
                "fraction": f,
                "rows": len(rs),
                "error": float(err.mean()),
                "error_median": float(np.median(err)),
                "keys_read": float(np.mean([r["keys_read"] for r in rs])),
                "budget_used": float(np.mean([r["keys_read"] / r["n"] for r in rs])),
                "bytes_share": None if any(s is None for s in shares) else float(np.mean(shares)),
            }
        )
    return out


def ranking(rows, reference: str = "topk") -> list[dict]:
    """:func:`summary`'s entries ordered by mean error within each budget fraction.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`evaluate_estimator`.
    reference : str
        The estimator the others are compared with.

    Returns
    -------
    list of dict
        Each of :func:`summary`'s entries with its ``rank`` (1 = lowest error), ``vs_reference``
        (its mean error over ``reference``'s at that budget, None without it) and ``wins`` (the
        share of rows where it beats ``reference`` on the same row; None for the reference and
        without it).
    """
    entries = summary(rows)
    ref_err = {
        (r["layer"], r["head"], r["position"], r["fraction"]): r["error"] for r in rows if r["estimator"] == reference
    }
    ref_mean = {e["fraction"]: e["error"] for e in entries if e["estimator"] == reference}
    beats: dict = {}
    for r in rows:
        other = ref_err.get((r["layer"], r["head"], r["position"], r["fraction"]))
        if other is not None:
            beats.setdefault((r["estimator"], r["fraction"]), []).append(r["error"] < other)
    out = []
    for f in sorted({e["fraction"] for e in entries}):
        ordered = sorted((e for e in entries if e["fraction"] == f), key=lambda e: e["error"])
        for rank, e in enumerate(ordered, 1):
            w = beats.get((e["estimator"], f))
            out.append(
                dict(
                    e,
                    rank=rank,
                    vs_reference=e["error"] / ref_mean[f] if f in ref_mean and ref_mean[f] > 0 else None,
                    wins=None if w is None or e["estimator"] == reference else float(np.mean(w)),
                )
            )
    return out


# --------------------------------------------------------------------------- which tokens each method reads


def shipped_row(row: int = 0, head: int = 0, position: int = 63):
    """One row of the shipped capture as an estimator sees it, the keys up to the query's own
    token.

    Parameters
    ----------
    row : int in [0, 3]
        The shipped layer (0..3: layers 2, 13, 19, 25).
    head : int in [0, 2]
        Its query head.
    position : int in [0, 63]
        The query (0..63 of the last 64).

    Returns
    -------
    q : numpy.ndarray, float64, (d,)
        The query.
    keys, values : numpy.ndarray, float64, (n, d) and (n, dv)
        The keys and values it sees.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or not an integer.
    """
    cap = shipped.load_shipped_capture()
    row = check_int("row", row, 0, len(cap.layers) - 1)
    head = check_int("head", head, 0, cap.queries.shape[1] - 1)
    position = check_int("position", position, 0, cap.last - 1)
    (unit,) = [u for u in _heads(cap, [row]) if u[5] == head]
    (arrays,) = _arrays(cap, [unit], cap.n_tokens - cap.last, exact=False)
    q, k, v = arrays[:3]
    n = cap.n_tokens - cap.last + position + 1
    return q[position].copy(), k[:n], v[:n]


def shipped_queries(row: int = 0, head: int = 0):
    """All the captured queries of one shipped head with its keys and values; query t sees keys
    0 .. N - T + t.

    Parameters
    ----------
    row : int in [0, 3]
        The shipped layer (0..3: layers 2, 13, 19, 25).
    head : int in [0, 2]
        Its query head.

    Returns
    -------
    q : numpy.ndarray, float64, (T, d)
        The queries.
    keys, values : numpy.ndarray, float64, (N, d) and (N, dv)
        Every captured key and value of its KV head.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or not an integer.
    """
    cap = shipped.load_shipped_capture()
    row = check_int("row", row, 0, len(cap.layers) - 1)
    head = check_int("head", head, 0, cap.queries.shape[1] - 1)
    (unit,) = [u for u in _heads(cap, [row]) if u[5] == head]
    (arrays,) = _arrays(cap, [unit], cap.n_tokens - cap.last, exact=False)
    return arrays[:3]


def token_reads(
    row: int = 0, head: int = 0, position: int = 63, fraction: float = 0.02, methods=("topk", "magicpig", "quest")
) -> dict:
    """For one query of the shipped capture, the keys each method reads at the same budget.

    Parameters
    ----------
    row : int in [0, 3]
        The shipped layer (0..3: layers 2, 13, 19, 25).
    head : int in [0, 2]
        Its query head.
    position : int in [0, 63]
        The query (0..63 of the last 64).
    fraction : float in (0, 1]
        The budget as a fraction of the n visible keys.
    methods : iterable of str or callable
        Names of :data:`BASELINES` or estimators.

    Returns
    -------
    dict
        ``{"layer", "head" (the model's), "position" (the token's), "n", "budget", "fraction",
        "weights" (n,) true attention weights, "methods": {name: {"read" (sorted indices),
        "weight_read" (their share of the true weight), "error"}}}``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range, or as :func:`pigviz.attention.protocol.call`.
    """
    cap = shipped.load_shipped_capture()
    row = check_int("row", row, 0, len(cap.layers) - 1)
    head = check_int("head", head, 0, cap.queries.shape[1] - 1)
    position = check_int("position", position, 0, cap.last - 1)
    fraction = check_float("fraction", fraction, 0.0, 1.0, lo_open=True)
    (unit,) = [u for u in _heads(cap, [row]) if u[5] == head]
    (arrays,) = _arrays(cap, [unit], cap.n_tokens - cap.last)
    q, k, v, kt, vt, qt, exact = arrays
    n = cap.n_tokens - cap.last + position + 1
    scores = k[:n] @ q[position] / math.sqrt(q.shape[1])
    w = np.exp(scores - scores.max())
    w /= w.sum()
    budget = protocol.keys_for(fraction, n)
    heads = int(cap.metadata["n_model_heads"])
    out = {}
    for m in methods:
        est = library_estimator(m, **({"heads": heads} if m in _NEEDS_HEADS else {})) if isinstance(m, str) else m
        if protocol.wants_torch(est):
            o, read = protocol.call(est, qt[position], kt[:n], vt[:n], budget)
        else:
            o, read = protocol.call(est, q[position], k[:n], v[:n], budget)
        err = float(np.linalg.norm(o - exact[position]) / np.linalg.norm(exact[position]))
        out[protocol.estimator_name(est)] = {"read": read, "weight_read": float(w[read].sum()), "error": err}
    return {
        "layer": unit[1],
        "head": unit[3],
        "position": n - 1,
        "n": n,
        "budget": budget,
        "fraction": fraction,
        "weights": w,
        "methods": out,
    }
