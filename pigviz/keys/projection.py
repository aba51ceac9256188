"""A 2-D picture of one head's keys: the plane of the query and the mean key (``HeadView.mean_key``,
the mean of the hashed keys that centring subtracts, as in ``pigviz.lsh.index``).

The x axis is the mean key's direction, the y axis the part of the query perpendicular to
it, so the query lies in the plane and is drawn exactly while every key is drawn at its
projection. SimHash hyperplanes appear as the lines where they cut the plane. Because keys
are projected, the picture's wedge and real d-dimensional buckets can disagree;
``key_cloud`` reports both shares so a lesson can say how much.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pigviz._util.validate import check_choice, check_int
from pigviz.keys.geometry import VARIANTS, HeadView, head_pairs, head_view, non_exact_mask, unit_rows
from pigviz.lsh import simhash_checks

__all__ = [
    "KeyCloud",
    "key_cloud",
    "hyperplanes",
    "PlaneSplits",
    "plane_splits",
    "picture_cosines",
    "bucket_shares",
    "all_bucket_shares",
]


def hyperplanes(dim: int, count: int, seed: int = 0) -> np.ndarray:
    """``count`` Gaussian hyperplane normals ``(count, dim)``; a larger count keeps the first ones."""
    rng = np.random.default_rng(check_int("seed", seed, 0))
    return rng.standard_normal((check_int("count", count, 1, 64), check_int("dim", dim, 1)))


@dataclass
class KeyCloud:
    """What the 2-D picture of one query and its keys draws (see ``key_cloud``)."""

    layer: int
    head: int
    query_index: int
    position: int
    variant: str
    xy: np.ndarray  # (m, 2) drawn keys in the plane of the query and the mean key
    drawn: np.ndarray  # (m,) their positions
    cos_query: np.ndarray  # (m,) cos(query, key) in d dimensions
    sink_xy: np.ndarray  # (2,) key 0
    mean_xy: np.ndarray  # (2,) the mean key (the origin once centred)
    query_dir: np.ndarray  # (2,) unit direction of the query (it lies in the plane)
    normals: np.ndarray  # (planes, 2) traces of the hyperplanes in the plane
    wedge: tuple[float, float]
    in_wedge: np.ndarray  # (m,) drawn key inside the query's wedge in the picture
    share_picture: float  # fraction of hashed keys inside the query's wedge in the picture
    share_real: float  # fraction of hashed keys sharing the query's bucket in d dimensions
    extent: float  # half-width of the axes, equal for raw and centred keys


def key_cloud(
    view: HeadView, query_index: int = -1, variant: str = "raw", n_planes: int = 6, seed: int = 0, n_draw: int = 2000
) -> KeyCloud:
    """Project the keys onto the plane spanned by the mean key (x axis) and the part of the
    query orthogonal to it (y axis). The query lies in that plane, so its side of every
    hyperplane is the same in the picture as in d dimensions; a key's need not be."""
    T = len(view.queries)
    query_index = check_int("query_index", query_index, -T, T - 1) % T
    check_choice("variant", variant, VARIANTS)
    n_planes = check_int("n_planes", n_planes, 1, 64)
    n_draw = check_int("n_draw", n_draw, 1)
    hashed, kt, norms, drawn = _cloud_arrays(view, n_draw)
    q = view.queries[query_index]
    mu = view.mean_key
    basis = _plane_basis(mu, q)
    # Projection and hashing are linear, so centred keys are the raw results minus the mean's.
    centred = variant == "centred"
    raw_xy = basis @ kt  # (2, hashed keys)
    mu_xy = basis @ mu
    xy_all = raw_xy - mu_xy[:, None] if centred else raw_xy
    sink = view.keys_as(variant)[0]
    both = np.concatenate([np.abs(raw_xy).max(axis=0), np.abs(raw_xy - mu_xy[:, None]).max(axis=0)])
    extent = 1.1 * max(float(np.quantile(both, 0.995)), float(np.abs(basis @ sink).max()))
    planes = hyperplanes(len(q), n_planes, seed)
    sides = planes @ kt - ((planes @ mu)[:, None] if centred else 0.0)
    normals = planes @ basis.T
    qdir = unit_rows((basis @ q)[None])[0]
    q_side = normals @ qdir >= 0
    in_picture = np.all((normals @ xy_all >= 0) == q_side[:, None], axis=0)
    in_real = np.all((sides >= 0) == (planes @ q >= 0)[:, None], axis=0)
    dots = q @ kt[:, drawn] - (q @ mu if centred else 0.0)
    norm = np.linalg.norm(q) * norms[variant][drawn]
    return KeyCloud(
        view.layer,
        view.head,
        query_index,
        int(view.positions[query_index]),
        variant,
        xy_all[:, drawn].T,
        hashed[drawn],
        np.divide(dots, norm, out=np.zeros_like(dots), where=norm > 0),
        basis @ sink,
        mu_xy if not centred else np.zeros(2),
        qdir,
        normals,
        simhash_checks.bucket_wedge(qdir, normals),
        in_picture[drawn],
        float(in_picture.mean()),
        float(in_real.mean()),
        extent,
    )


def _plane_basis(mu, q) -> np.ndarray:
    """``(2, d)``: the mean key's direction, then the part of the query orthogonal to it."""
    e1 = unit_rows(mu[None])[0]
    off = q - (q @ e1) * e1
    e2 = unit_rows(off[None])[0] if np.linalg.norm(off) > 1e-9 * np.linalg.norm(q) else _any_orthogonal(e1)
    return np.stack([e1, e2])


@dataclass
class PlaneSplits:
    """How each hyperplane of the picture splits one head's hashed keys: the share of them on the
    query's side, as the 2-D picture shows it (``picture``) and in d dimensions (``real``)."""

    layer: int
    head: int
    variant: str
    picture: np.ndarray  # (planes,) share of hashed keys on the query's side in the picture
    real: np.ndarray  # (planes,) the same in d dimensions

    def crosses(self, at_least: float = 0.01) -> np.ndarray:
        """``(planes,)`` bool: the line leaves at least ``at_least`` of the keys on each side in the picture."""
        return (self.picture >= at_least) & (self.picture <= 1 - at_least)


def plane_splits(
    view: HeadView, query_index: int = -1, variant: str = "raw", n_planes: int = 6, seed: int = 0
) -> PlaneSplits:
    """For the hyperplanes ``key_cloud`` draws (same ``n_planes`` and ``seed``), the share of the
    hashed keys on the query's side of each, in the picture (keys projected onto the plane of the
    query and the mean key) and in d dimensions. A line that misses the cloud in the picture can
    still split the keys in d dimensions: projecting drops the coordinates it cuts them along."""
    T = len(view.queries)
    query_index = check_int("query_index", query_index, -T, T - 1) % T
    check_choice("variant", variant, VARIANTS)
    n_planes = check_int("n_planes", n_planes, 1, 64)
    q = view.queries[query_index]
    keys = view.keys_as(variant)[non_exact_mask(view.n)]
    basis = _plane_basis(view.mean_key, q)
    planes = hyperplanes(len(q), n_planes, seed)
    normals = planes @ basis.T  # (planes, 2): each line's normal in the picture
    q_side = planes @ q >= 0  # the query lies in the plane: the same side in both
    picture = ((normals @ (basis @ keys.T)) >= 0) == q_side[:, None]
    real = ((planes @ keys.T) >= 0) == q_side[:, None]
    return PlaneSplits(view.layer, view.head, variant, picture.mean(axis=1), real.mean(axis=1))


def bucket_shares(view: HeadView, variant: str = "raw", n_planes: int = 6, seed: int = 0) -> np.ndarray:
    """``(queries,)``: for every captured query of ``view``, the share of its hashed keys that share
    its bucket in the one ``n_planes``-bit table ``key_cloud`` draws (same ``seed``), counted in d
    dimensions: ``key_cloud(view, i, variant, n_planes, seed).share_real`` for every ``i`` at once."""
    check_choice("variant", variant, VARIANTS)
    n_planes = check_int("n_planes", n_planes, 1, 64)
    keys = view.keys_as(variant)[non_exact_mask(view.n)]
    planes = hyperplanes(keys.shape[-1], n_planes, seed)
    weights = 1 << np.arange(n_planes, dtype=np.int64)
    key_codes = (keys @ planes.T >= 0) @ weights  # (keys,)
    query_codes = (view.queries @ planes.T >= 0) @ weights  # (queries,)
    return (query_codes[:, None] == key_codes[None, :]).mean(axis=1)


def all_bucket_shares(cap, n_planes: int = 6, seed: int = 0) -> dict:
    """``bucket_shares`` for every captured head and query, raw and centred: ``{"heads": [(layer,
    head), ...], "raw": (heads, queries), "centred": (heads, queries)}``."""
    heads = head_pairs(cap)
    out = {"heads": heads}
    views = [head_view(cap, layer, head) for layer, head in heads]
    for variant in VARIANTS:
        out[variant] = np.array([bucket_shares(v, variant, n_planes, seed) for v in views])
    return out


def picture_cosines(cloud: KeyCloud) -> np.ndarray:
    """``(m,)`` the cosine of each drawn key with the query *in the picture* (projected key against
    the query's direction); ``cloud.cos_query`` holds the real, d-dimensional ones. Projecting keeps
    the sign of ``q . k`` and shortens ``k``, so the picture's cosines are larger in magnitude."""
    norm = np.linalg.norm(cloud.xy, axis=1)
    dots = cloud.xy @ cloud.query_dir
    return np.divide(dots, norm, out=np.zeros_like(dots), where=norm > 0)


def _cloud_arrays(view: HeadView, n_draw: int):
    """Per head, computed once: hashed positions, their raw keys transposed ``(d, n)``, key
    norms raw and centred, and which of them the picture draws (the same for every query)."""
    key = ("cloud", n_draw)
    if key not in view._cache:
        hashed = np.flatnonzero(non_exact_mask(view.n))
        norms = {v: np.linalg.norm(view.keys_as(v)[hashed], axis=1) for v in VARIANTS}
        rng = np.random.default_rng(view.layer * 1000 + view.head)
        drawn = np.sort(rng.choice(len(hashed), size=min(n_draw, len(hashed)), replace=False))
        view._cache[key] = (hashed, np.ascontiguousarray(view.keys[hashed].T), norms, drawn)
    return view._cache[key]


def _any_orthogonal(e1):
    v = np.zeros_like(e1)
    v[np.argmin(np.abs(e1))] = 1.0
    return unit_rows((v - (v @ e1) * e1)[None])[0]
