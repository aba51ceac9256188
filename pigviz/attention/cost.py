"""What one decode step reads, in bytes: the cost axis beside the budget axis.

A budget counts the keys whose values enter the output. It hides what a method reads to
choose them: TopK and the oracles score every key; Quest reads a min and a max vector per
page; SparQ reads a few channels of every key; MagicPIG reads its hyperplanes, one bucket's
offsets and ids per table, and a hit counter per id. :func:`bytes_read` counts all of it, per
query head and decode step, so methods can be compared at the cost a system pays:

================  ==========================================================================
method            bytes read (m = keys whose values enter the output, n = keys visible)
================  ==========================================================================
dense             n (d + dv) B
topk, oracle,     n d B + m dv B: every key is scored, m values are read. These are the
hybrid            yardsticks "what m keys can buy at best"; a real system cannot choose so.
streaming         m (d + dv) B
quest, rank_all,  ceil(n / page) 2 d B (each page's min and max key) + m (d + dv) B
vattention
sparq             n r B (r channels of every key, stored channel-major as SparQ does)
                  + m (d + dv) B + dv B (the running mean value)
magicpig,         K L d B / heads (the layer's hyperplanes, shared by its heads) + 2 L I
mp_exact_top      (each table's bucket offsets) + c (I + 2) (c ids scanned; a one-byte hit
                  counter bumped, then tested) + s 4 (the stored |k - mean| of the s
                  sampled keys, float32) + d 4 (the mean) + m (d + dv) B
================  ==========================================================================

The MagicPIG row follows the reference estimator (:func:`pigviz.lsh.magicpig.attend`), which
reads the stored |k - mean|; the compiled step (:mod:`pigviz.lsh.fused`) recomputes it from the
key row it reads anyway and counts hits in bit sets, so it reads slightly less.

B is the bytes of one cache element (2: fp16/bf16), I of one stored id (4: int32). Counted
per query head as if nothing were shared across the heads of a grouped-query group: dense
attention and TopK, whose heads read the same keys, would gain most from sharing; the
sampled methods' heads read different keys. Compute and random numbers are free here: this
is the memory traffic that bounds a decode step.
"""

from __future__ import annotations

import math

from pigviz._util.validate import check_choice, check_int

__all__ = ["COSTED_METHODS", "dense_bytes", "bytes_read"]

COSTED_METHODS = (
    "dense",
    "topk",
    "oracle",
    "hybrid",
    "streaming",
    "quest",
    "rank_all",
    "vattention",
    "sparq",
    "magicpig",
    "mp_exact_top",
)


def dense_bytes(n: int, d: int, dv: int | None = None, dtype_bytes: int = 2) -> int:
    """Bytes one query head reads to attend over ``n`` keys and values: n (d + dv) B.

    Parameters
    ----------
    n : int >= 1
        Keys (and values) visible.
    d : int >= 1
        Head dimension of a key.
    dv : int >= 1, optional
        Of a value; default ``d``.
    dtype_bytes : int in [1, 8]
        B, the bytes of one cache element (2: fp16/bf16).

    Returns
    -------
    int
        The bytes read.

    Raises
    ------
    TypeError
        An argument that is not an integer.
    ValueError
        An argument outside its range.
    """
    n, d = check_int("n", n, 1), check_int("d", d, 1)
    dv = d if dv is None else check_int("dv", dv, 1)
    return n * (d + dv) * check_int("dtype_bytes", dtype_bytes, 1, 8)


def bytes_read(
    method: str,
    *,
    n: int,
    d: int,
    keys_read: float,
    dv: int | None = None,
    dtype_bytes: int = 2,
    id_bytes: int = 4,
    page: int = 16,
    r: int | None = None,
    K: int | None = None,
    L: int | None = None,
    heads: int = 1,
    candidates: float = 0.0,
    sampled: float = 0.0,
) -> float:
    """Bytes one query head reads in one decode step with ``method`` (table in the module
    docstring).

    Parameters
    ----------
    method : str, one of COSTED_METHODS
        The method (:data:`COSTED_METHODS`).
    n : int >= 1
        Keys visible.
    d : int >= 1
        Head dimension of a key.
    keys_read : float in [0, n]
        m, the keys whose values enter the output (a mean over heads or steps may be fractional).
    dv : int >= 1, optional
        Head dimension of a value; default ``d``.
    dtype_bytes : int in [1, 8]
        B, the bytes of one cache element (2: fp16/bf16).
    id_bytes : int in [1, 8]
        I, the bytes of one stored token id (4: int32).
    page : int >= 1
        Tokens per page, for the page-based methods (quest, rank_all, vattention).
    r : int in [1, d], optional
        Query channels SparQ reads of every key; required for sparq.
    K : int in [1, 64], optional
        Bits per table; required for magicpig and mp_exact_top.
    L : int >= 1, optional
        Tables; required for magicpig and mp_exact_top.
    heads : int >= 1
        Query heads sharing the layer's hyperplanes (MagicPIG).
    candidates : float >= 0
        Table ids scanned (c, MagicPIG).
    sampled : float >= 0
        Keys sampled (s = |S|, MagicPIG).

    Returns
    -------
    float
        The bytes read.

    Raises
    ------
    TypeError
        An integer argument that is not an integer.
    ValueError
        An unknown ``method``, an argument outside its range, or ``r`` (sparq), ``K`` or ``L``
        (magicpig, mp_exact_top) missing.
    """
    method = check_choice("method", method, COSTED_METHODS)
    n, d = check_int("n", n, 1), check_int("d", d, 1)
    dv = d if dv is None else check_int("dv", dv, 1)
    B = check_int("dtype_bytes", dtype_bytes, 1, 8)
    I = check_int("id_bytes", id_bytes, 1, 8)  # noqa: E741 -- the docstring's name
    if not (0 <= keys_read <= n):
        raise ValueError(f"keys_read must be in [0, n={n}], got {keys_read!r}")
    m = float(keys_read)
    if method == "dense":
        return float(dense_bytes(n, d, dv, B))
    if method in ("topk", "oracle", "hybrid"):
        return n * d * B + m * dv * B
    if method == "streaming":
        return m * (d + dv) * B
    if method in ("quest", "rank_all", "vattention"):
        pages = math.ceil(n / check_int("page", page, 1))
        return pages * 2 * d * B + m * (d + dv) * B
    if method == "sparq":
        if r is None:
            raise ValueError("r (query channels SparQ reads of every key) is required for sparq")
        r = check_int("r", r, 1, d)
        return n * r * B + m * (d + dv) * B + dv * B
    # magicpig, mp_exact_top
    if K is None or L is None:
        raise ValueError(f"K and L are required for {method}")
    K, L = check_int("K", K, 1, 64), check_int("L", L, 1)
    heads = check_int("heads", heads, 1)
    if candidates < 0 or sampled < 0:
        raise ValueError(f"candidates and sampled must be >= 0, got {candidates!r}, {sampled!r}")
    planes = K * L * d * B / heads
    tables = 2 * L * I + candidates * (I + 2)
    return planes + tables + sampled * 4 + d * 4 + m * (d + dv) * B
