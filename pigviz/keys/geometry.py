"""Where a real model's keys live, and why MagicPIG centres them before hashing.

Everything reads a ``Capture`` (post-RoPE queries, keys and values of one prefill; by default
the small one shipped in ``pigviz/data/``) one (layer, query head) at a time:

* the cone: the mean cosine of the keys with their mean direction (``cone_width``);
* how far the queries point from it: cos(query, mean key), also as an angle;
* the attention sink: the weight the last queries put on position 0, and the sink key's
  norm relative to the median key norm;
* the headline claims of notebooks 02, 03 and 04. The 2-D picture of a key cloud lives in
  ``pigviz.keys.projection``; the hashing statistics (raw against centred collisions, one
  real query's S-curve) in ``pigviz.keys.hashing``.

MagicPIG reads an exact set anyway: the first ``EXACT_SINKS`` and the last ``EXACT_RECENT``
positions. Only the other keys are hashed, and "centred" keys are ``k - mu`` with ``mu`` the
mean of those hashed keys (``centring_mean``), exactly as ``pigviz.lsh.index.build_index``
centres them. Every score then drops by the same ``q . mu``, which softmax ignores, so
attention is unchanged. The query is never centred. Statistics about hashing skip the
exact set.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_choice, check_int
from pigviz.model.shipped import load_shipped_capture

__all__ = [
    "EXACT_SINKS",
    "EXACT_RECENT",
    "GRID_K",
    "GRID_L",
    "VARIANTS",
    "SCURVE_HEAD",
    "HeadView",
    "head_view",
    "shipped_capture",
    "head_pairs",
    "non_exact_mask",
    "centring_mean",
    "unit_rows",
    "cone_width",
    "cone_tightness",
    "HeadGeometry",
    "head_geometry",
    "geometry_table",
    "sink_table",
    "sink_onset",
    "cos_to_mean_direction",
    "cos_with_query",
    "shift_invariance",
    "shift_passes",
    "SHIFT_TOL_FP64",
    "SHIFT_TOL_FP32",
]

EXACT_SINKS = DEFAULTS.sinks
EXACT_RECENT = DEFAULTS.recent
GRID_K = (6, 7, 8, 9, 10, 11, 12)
GRID_L = (50, 100, 150, 200, 250, 300)
VARIANTS = ("raw", "centred")
# Centring may move outputs by rounding only: float64 below this (absolute), float32 below
# this fraction of the largest output. Printed as bounds: the residues themselves depend on BLAS.
SHIFT_TOL_FP64 = 1e-12
SHIFT_TOL_FP32 = 1e-4
# The query notebook 04b draws its real S-curve for: a sink layer, the last captured position.
SCURVE_HEAD = dict(layer=19, head=6, query_index=63)


# --------------------------------------------------------------------------- one head


@dataclass
class HeadView:
    """One (layer, query head) of a capture in float64: keys/values ``(n, d)`` of its KV
    head, its queries ``(T, d)`` at ``positions``, and the model's outputs if captured."""

    layer: int
    head: int
    kv_head: int
    keys: np.ndarray
    values: np.ndarray
    queries: np.ndarray
    positions: np.ndarray
    scaling: float
    outputs: np.ndarray | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.keys.shape[0]

    @property
    def mean_key(self) -> np.ndarray:
        """The centring mean: the mean of the hashed keys (``centring_mean``)."""
        if "mean" not in self._cache:
            self._cache["mean"] = centring_mean(self.keys)
        return self._cache["mean"]

    def keys_as(self, variant: str) -> np.ndarray:
        """``"raw"`` keys or ``"centred"`` keys (``mean_key`` subtracted from every key)."""
        check_choice("variant", variant, VARIANTS)
        if variant == "raw":
            return self.keys
        if "centred" not in self._cache:
            self._cache["centred"] = self.keys - self.mean_key
        return self._cache["centred"]

    def attention_weights(self, keys=None) -> np.ndarray:
        """Causal softmax weights ``(T, n)`` of the queries over ``keys`` (default: raw)."""
        keys = self.keys if keys is None else keys
        scores = self.queries @ keys.T * self.scaling
        scores[np.arange(self.n)[None, :] > self.positions[:, None]] = -np.inf
        scores -= scores.max(axis=1, keepdims=True)
        w = np.exp(scores)
        return w / w.sum(axis=1, keepdims=True)


def _numpy(t):
    return None if t is None else t.detach().float().cpu().numpy().astype(np.float64)


def head_view(cap, layer, head) -> HeadView:
    """The (model) ``layer`` and (model) query ``head`` of ``cap``; ValueError naming which
    layers, and which heads of that layer, the capture holds."""
    layer = check_int("layer", layer)
    if layer not in cap.layers:
        raise ValueError(f"layer must be one of {cap.layers} (the layers in this capture), got {layer}")
    row = cap.layers.index(layer)
    heads = cap.query_heads[row]
    head = check_int("head", head)
    if head not in heads:
        raise ValueError(
            f"head must be one of {heads} for layer {layer} (the query heads of its captured KV head), got {head}"
        )
    j = heads.index(head)
    col = j // cap.group_size
    return HeadView(
        layer,
        head,
        cap.kv_heads[row][col],
        _numpy(cap.keys[row, col]),
        _numpy(cap.values[row, col]),
        _numpy(cap.queries[row, j]),
        cap.query_positions.numpy().astype(np.int64),
        cap.scaling,
        None if cap.outputs is None else _numpy(cap.outputs[row, j]),
    )


@functools.lru_cache(maxsize=1)
def shipped_capture():
    """The shipped capture, loaded (and checked against its manifest) once per process."""
    return load_shipped_capture()


def head_pairs(cap) -> list[tuple[int, int]]:
    """Every (layer, query head) the capture holds."""
    return [(layer, h) for layer, heads in zip(cap.layers, cap.query_heads) for h in heads]


def non_exact_mask(n: int, sinks: int = EXACT_SINKS, recent: int = EXACT_RECENT) -> np.ndarray:
    """True for positions MagicPIG would hash (neither the first ``sinks`` nor the last ``recent``)."""
    n = check_int("n", n, 1)
    sinks = check_int("sinks", sinks, 0, n)
    recent = check_int("recent", recent, 0, n - sinks)
    mask = np.ones(n, dtype=bool)
    mask[:sinks] = False
    mask[n - recent :] = False
    return mask


def centring_mean(keys, sinks: int = EXACT_SINKS, recent: int = EXACT_RECENT) -> np.ndarray:
    """Mean of the keys MagicPIG hashes (all but the first ``sinks`` and last ``recent``), the
    vector ``pigviz.lsh.index.build_index`` subtracts. The exact set is left out as MagicPIG
    leaves it out: its keys are not hashed, and the sink key points its own way."""
    keys = np.asarray(keys)
    if keys.ndim != 2:
        raise ValueError(f"keys must be an (n, d) array, got shape {keys.shape}")
    mask = non_exact_mask(len(keys), sinks, recent)
    if not mask.any():
        raise ValueError(
            f"keys must hold more than sinks + recent = {sinks + recent} rows so that some are hashed, got {len(keys)}"
        )
    return keys[mask].mean(axis=0)


# --------------------------------------------------------------------------- geometry


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (an all-zero row stays zero)."""
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x, dtype=np.float64), where=norm > 0)


def cone_width(keys) -> float:
    """Mean cosine of the keys with their mean direction, i.e. the length of the average unit
    key: near 1 for a narrow cone, near 0 (about 1/sqrt(n)) for directions spread evenly."""
    keys = np.asarray(keys, dtype=np.float64)
    if keys.ndim != 2 or len(keys) == 0:
        raise ValueError(f"keys must be a non-empty (n, d) array, got shape {keys.shape}")
    return float(np.linalg.norm(unit_rows(keys).mean(axis=0)))


# Notebook 02's name for the same number (its exercise 02.cone_tightness): it grows as the keys bunch
# more tightly, so "tightness" reads the right way round where "width" did not.
cone_tightness = cone_width


@dataclass
class HeadGeometry:
    layer: int
    head: int
    kv_head: int
    cone_raw: float  # mean cosine of raw keys with their mean direction
    cone_centred: float  # the same for the centred hashed keys
    query_cos: float  # cos(query, mean key), mean over the captured queries
    query_angle_deg: float  # the angle, mean over the captured queries
    sink_weight: float  # attention weight on position 0, mean over the captured queries
    sink_norm_ratio: float  # |key 0| / median |key|
    sink_cos_raw: float  # cos(query, key 0), mean over queries
    sink_cos_centred: float  # cos(query, key 0 - mean key)
    sink_score: float  # scaled score q . k0 / sqrt(d), mean over queries
    median_score: float  # median score of the other keys before the last EXACT_RECENT
    best_other_score: float  # best of those, mean over queries
    sink_wins: float  # share of queries for which key 0 outscores all of those


def _scores_before_recent(view: HeadView):
    """Scores of every query against keys 1 .. n - EXACT_RECENT - 1 that it can see (a query
    earlier than n - EXACT_RECENT must not see later keys), -inf elsewhere; only the queries
    that see at least one such key. Also key 0's score for those queries."""
    cut = view.n - EXACT_RECENT
    if cut < 2:
        raise ValueError(
            f"the head needs more than {EXACT_RECENT + 1} keys to compare the sink with older keys, got {view.n}"
        )
    scores = view.queries @ view.keys[:cut].T * view.scaling
    scores[np.arange(cut)[None, :] > view.positions[:, None]] = -np.inf
    seen = np.isfinite(scores[:, 1:]).any(axis=1)
    if not seen.any():
        raise ValueError("every captured query sits at position 0; none can compare key 0 with another key")
    return scores[seen, 0], scores[seen, 1:]


def head_geometry(view: HeadView) -> HeadGeometry:
    q = unit_rows(view.queries)
    cos_q = q @ unit_rows(view.mean_key[None])[0]
    norms = np.linalg.norm(view.keys, axis=1)
    centred = view.keys_as("centred")
    sink_scores, others = _scores_before_recent(view)
    best_other = others.max(axis=1)
    return HeadGeometry(
        view.layer,
        view.head,
        view.kv_head,
        cone_width(view.keys),
        cone_width(centred[non_exact_mask(view.n)]),
        float(cos_q.mean()),
        float(np.degrees(np.arccos(np.clip(cos_q, -1, 1))).mean()),
        float(view.attention_weights()[:, 0].mean()),
        float(norms[0] / np.median(norms)),
        float((q @ unit_rows(view.keys[:1])[0]).mean()),
        float((q @ unit_rows(centred[:1])[0]).mean()),
        float(sink_scores.mean()),
        float(np.median(others[np.isfinite(others)])),
        float(best_other.mean()),
        float(np.mean(sink_scores > best_other)),
    )


def geometry_table(cap) -> list[HeadGeometry]:
    """``head_geometry`` of every captured head (computed once per capture object)."""
    return list(
        _memo(cap, "geometry", lambda: [head_geometry(head_view(cap, layer, h)) for layer, h in head_pairs(cap)])
    )


def sink_onset(cap, threshold: float = 0.1) -> tuple[int, np.ndarray]:
    """The first layer whose query heads put, on average, more than ``threshold`` of their
    weight on token 0 (from the all-layer summary; the number of layers if none does), and
    that mean per layer."""
    per_layer = sink_table(cap)["sink_weight"].mean(axis=1)
    above = np.flatnonzero(per_layer > threshold)
    return (int(above[0]) if len(above) else len(per_layer)), per_layer


def cos_to_mean_direction(keys) -> np.ndarray:
    """Each key's cosine with the keys' mean direction (their average unit vector)."""
    unit = unit_rows(np.asarray(keys, dtype=np.float64))
    return unit @ unit_rows(unit.mean(axis=0)[None])[0]


def cos_with_query(view: HeadView, query_index: int = -1, variant: str = "raw") -> np.ndarray:
    """cos(query, key) for every key of the head, raw or centred."""
    T = len(view.queries)
    query_index = check_int("query_index", query_index, -T, T - 1)
    return unit_rows(view.keys_as(variant)) @ unit_rows(view.queries[query_index][None])[0]


def sink_table(cap) -> dict:
    """All-layer summaries shipped with the capture: ``sink_weight`` (layers, query heads) and
    ``norm_ratio`` (layers, KV heads) = |key 0| / median |key|."""
    missing = [k for k in ("sink_weight", "key_norm_pos0", "key_norm_median") if k not in cap.extras]
    if missing:
        raise ValueError(f"the capture lacks the all-layer summaries {missing}; use the shipped capture")
    ratio = cap.extras["key_norm_pos0"].double() / cap.extras["key_norm_median"].double()
    return {"sink_weight": cap.extras["sink_weight"].double().numpy(), "norm_ratio": ratio.numpy()}


def _causal_output(view: HeadView, keys, dtype) -> np.ndarray:
    q, k, v = (np.asarray(a, dtype=dtype) for a in (view.queries, keys, view.values))
    scores = q @ k.T * dtype(view.scaling)
    scores[np.arange(len(k))[None, :] > view.positions[:, None]] = -np.inf
    scores -= scores.max(axis=1, keepdims=True)
    w = np.exp(scores)
    return (w / w.sum(axis=1, keepdims=True) @ v).astype(np.float64)


def shift_invariance(cap) -> dict:
    """Largest |output(raw keys) - output(centred keys)| over every captured query, in float64
    and in float32, next to the size of the outputs and the gap to what the model computed.
    Keys are centred as everywhere here: minus the mean of the hashed keys."""

    def compute():
        worst = {"fp64": 0.0, "fp32": 0.0, "model": 0.0, "scale": 0.0}
        for layer, head in head_pairs(cap):
            v = head_view(cap, layer, head)
            for name, dtype in (("fp64", np.float64), ("fp32", np.float32)):
                keys = v.keys.astype(dtype)
                raw = _causal_output(v, keys, dtype)
                centred = _causal_output(v, keys - centring_mean(keys), dtype)
                worst[name] = max(worst[name], float(np.abs(raw - centred).max()))
                if name == "fp64":
                    worst["scale"] = max(worst["scale"], float(np.abs(raw).max()))
                    if v.outputs is not None:
                        worst["model"] = max(worst["model"], float(np.abs(raw - v.outputs).max()))
        return worst

    return dict(_memo(cap, "shift", compute))


def shift_passes(shift: dict) -> bool:
    return shift["fp64"] < SHIFT_TOL_FP64 and shift["fp32"] < SHIFT_TOL_FP32 * shift["scale"]


_MEMO: dict = {}


def _memo(cap, name: str, compute):
    """Compute once per capture object: notebooks and ``claims()`` ask for the same tables."""
    key = (id(cap), name)
    if key not in _MEMO:
        _MEMO[key] = compute()
        weakref.finalize(cap, _MEMO.pop, key, None)
    return _MEMO[key]


# --------------------------------------------------------------------------- claims
