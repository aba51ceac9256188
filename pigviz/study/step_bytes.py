"""What one decode step reads, per query head, with nothing shared: the rows finding 2 shows.

:func:`pigviz.attention.cost.bytes_read` counts each query head on its own, as if nothing
were shared within a grouped-query group (dense attention, TopK and Quest would gain most from
sharing), except MagicPIG's hyperplanes, which it divides by ``heads``, the query heads that
hash with them. The shipped study (:mod:`pigviz.study.run`) passed the layer's ``H`` query
heads, so its MagicPIG ``bytes_share`` counts the planes once per layer and splits them over
``H``. :func:`planes_per_query_head` recounts those series by the rule applied to every other
method: each query head reads the planes itself (``heads = 1``). The recount is exact: the
planes cost the same ``K L d B`` bytes at every position, so each stored mean over positions
gains ``K L d B (1 - 1/H)`` times the mean of ``1 / dense_bytes(n)`` over the positions it
averaged.

:func:`step_rows` counts one decode step (:func:`pigviz.study.experiments.decode_step_pieces`)
for each method reading as many keys as MagicPIG did, and :func:`magicpig_parts` splits
MagicPIG's bytes into what it reads.
"""

from __future__ import annotations

import copy

from pigviz._util.validate import check_int
from pigviz.attention import cost

__all__ = ["PLANE_READERS", "STEP_METHODS", "plane_bytes", "planes_per_query_head", "step_rows", "magicpig_parts"]

PLANE_READERS = ("magicpig", "mp_exact_top")  # the study's series that hash the query with the layer's planes
STEP_METHODS = ("topk", "quest", "sparq", "magicpig")
_MARK = "bytes_planes"  # set on a recounted copy, so that it is never recounted twice


def plane_bytes(K: int, L: int, d: int, dtype_bytes: int = 2) -> int:
    """Bytes of a layer's hyperplanes: ``K L`` planes of ``d`` elements."""
    return (
        check_int("K", K, 1, 64)
        * check_int("L", L, 1)
        * check_int("d", d, 1)
        * check_int("dtype_bytes", dtype_bytes, 1, 8)
    )


def planes_per_query_head(results: dict) -> dict:
    """A copy of study ``results`` in which every MagicPIG series (:data:`PLANE_READERS`)
    counts the hyperplanes once per query head, as ``bytes_read`` counts every other method's
    reads. Other series are unchanged. Raises on results without ``bytes_share`` and on a copy
    already recounted."""
    if results.get(_MARK) == "per query head":
        raise ValueError("these results already count the planes per query head")
    H, d = check_int("heads", results["heads"], 1), check_int("head_dim", results["head_dim"], 1)
    context, last = (
        check_int("context", results["context"], 1),
        check_int("last", results["last"], 1, results["context"]),
    )
    out = copy.deepcopy(results)
    for name, s in out["series"].items():
        if s["method"] not in PLANE_READERS:
            continue
        if "bytes_share" not in s:
            raise ValueError(f"series {name!r} carries no bytes_share; re-run the study with this version of pigviz")
        ns = [context - last + 1 + t for t in range(check_int("positions", s["positions"], 1, last))]
        inv_dense = sum(1 / cost.dense_bytes(n, d) for n in ns) / len(ns)
        extra = plane_bytes(*s["setting"], d) * (1 - 1 / H) * inv_dense
        s["bytes_share"] = [[[x + extra for x in heads] for heads in seeds] for seeds in s["bytes_share"]]
    out[_MARK] = "per query head"
    return out


def _step(step: dict) -> tuple[int, int]:
    for key in ("n", "q", "K", "L", "K_S", "keys_read"):
        if key not in step:
            raise ValueError(f"step must be experiments.decode_step_pieces' dict; it has no {key!r}")
    return check_int("n", step["n"], 1), len(step["q"])


def _kwargs(method: str, step: dict, d: int, heads: int) -> dict:
    if method == "sparq":
        from pigviz.lsh.affordable import sparq_channels  # heavy: imports torch

        return {"r": sparq_channels(d)}
    if method == "magicpig":
        from pigviz.lsh.index import expected_candidates  # heavy: imports torch

        cand = expected_candidates(step["n"], step["K"], step["L"])
        return {"K": step["K"], "L": step["L"], "heads": heads, "candidates": cand, "sampled": len(step["K_S"])}
    return {}


def step_rows(step: dict, heads: int = 1) -> list[dict]:
    """Per method of :data:`STEP_METHODS`, reading ``step["keys_read"]`` keys on ``step``:
    ``method``, ``bytes``, ``share`` (of dense attention's bytes) and ``choose_share`` (what it
    reads with ``keys_read = 0``, None for MagicPIG, whose tables are its choice). ``heads``:
    the query heads that share MagicPIG's planes (1: nothing shared, the rule of every row)."""
    n, d = _step(step)
    heads = check_int("heads", heads, 1)
    dense = cost.dense_bytes(n, d)
    rows = []
    for method in STEP_METHODS:
        kw = _kwargs(method, step, d, heads)
        b = cost.bytes_read(method, n=n, d=d, keys_read=step["keys_read"], **kw)
        choose = None if method == "magicpig" else cost.bytes_read(method, n=n, d=d, keys_read=0, **kw) / dense
        rows.append({"method": method, "bytes": b, "share": b / dense, "choose_share": choose})
    return rows


def magicpig_parts(step: dict, id_bytes: int = 4, dtype_bytes: int = 2) -> list[dict]:
    """MagicPIG's bytes on ``step``, nothing shared, split into ``part`` / ``bytes`` / ``share``
    (of dense attention's bytes); the parts sum to ``bytes_read("magicpig", heads=1)``."""
    n, d = _step(step)
    I, B = check_int("id_bytes", id_bytes, 1, 8), check_int("dtype_bytes", dtype_bytes, 1, 8)  # noqa: E741
    cand = _kwargs("magicpig", step, d, 1)["candidates"]
    parts = [
        ("hyperplanes", plane_bytes(step["K"], step["L"], d, B)),
        ("bucket offsets", 2 * step["L"] * I),
        ("ids scanned and hit counters", cand * (I + 2)),
        ("|k - mean| of the sampled keys and the mean", len(step["K_S"]) * 4 + d * 4),
        ("keys and values read", step["keys_read"] * 2 * d * B),
    ]
    dense = cost.dense_bytes(n, d, dtype_bytes=B)
    return [{"part": p, "bytes": float(b), "share": b / dense} for p, b in parts]
