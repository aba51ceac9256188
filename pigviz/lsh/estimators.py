"""MagicPIG and the estimators a system can afford, written to the estimator protocol of
:mod:`pigviz.attention.protocol`: ``estimator(q, keys, values, budget) -> (output, read)``
for one query head at one position.

**MagicPIG's tables** are built once over the keys of a prompt, as at the end of a prefill,
and kept while later calls pass the same keys grown by at most ``recent`` (the decode steps
after it). The keys written since sit in the exact recent window, so they are read exactly
and never need hashing (:func:`pigviz.lsh.index.grow_index`). A call with other keys builds
new tables; the last few sets are kept.

**Held to a budget.** MagicPIG's tables decide how many keys it samples; the protocol fixes
how many it may read. When the exact set (sinks and recent window) plus the sample would
read more than the budget, the wrapper raises the number of tables a key must share with
the query (``min_hits``: 2, then 3, ...) until the read fits, and corrects each sampled key
by its inclusion probability at that threshold, u = P(at least min_hits of L tables
collide). The estimate stays MagicPIG's self-normalised importance sampling, of the keys
the tighter rule samples. A budget smaller than the exact set leaves no room to sample:
the wrapper then reads the first ``sinks`` keys and the most recent ones that fit
(StreamingLLM). ``last_call`` says what the last call did: the ``min_hits`` it used, the
keys it sampled, the table entries it scanned.

:func:`magicpig_exact_top` (the same reads, the top of the sample trusted as exact),
:func:`vattention` and :func:`sparq` wrap :mod:`pigviz.lsh.affordable`'s estimators the same
way. Each returns its library function's output and read set on the row. torch and the
LSH modules load on the first call, so importing this module is cheap.
"""

from __future__ import annotations

from collections import OrderedDict

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_float, check_int
from pigviz.attention import baselines, cost
from pigviz.attention.protocol import LibraryEstimator

__all__ = ["MagicPIGEstimator", "magicpig", "magicpig_exact_top", "vattention", "sparq", "KEPT_TABLES"]

KEPT_TABLES = 8  # sets of tables a MagicPIG estimator keeps (one per prompt it has seen)


class MagicPIGEstimator:
    """MagicPIG at (K, L) as an estimator of the protocol (module docstring):
    ``estimator(q, keys, values, budget) -> (output, read)`` on one row. ``last_call`` says what
    the last call did.

    Parameters
    ----------
    K : int in [1, 30]
        Bits per table.
    L : int in [1, 4096]
        Tables.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled, before the budget raises it.
    sinks, recent : int >= 0
        The first and last keys, read exactly; sinks + recent >= 1 (the exact set anchors the
        sampled estimate).
    seed : int >= 0
        Seed of the hyperplanes.
    heads : int >= 1
        Query heads sharing the hyperplanes, for :meth:`bytes_read`.
    top_fraction : float in [0, 1], optional
        Weight the best ``top_fraction`` of the sample as exact
        (:func:`pigviz.lsh.affordable.magicpig_exact_top`); None: MagicPIG's own weights.
    name : str, optional
        The estimator's name in results (default ``"magicpig"``, or ``"mp_exact_top"`` with
        ``top_fraction``).

    Raises
    ------
    ValueError, TypeError
        A parameter outside its range.
    """

    torch = True

    def __init__(
        self,
        K: int = DEFAULTS.K,
        L: int = DEFAULTS.L,
        *,
        min_hits: int = DEFAULTS.min_hits,
        sinks: int = DEFAULTS.sinks,
        recent: int = DEFAULTS.recent,
        seed: int = 0,
        heads: int = 1,
        top_fraction: float | None = None,
        name: str | None = None,
    ):
        self.K, self.L = check_int("K", K, 1, 30), check_int("L", L, 1, 4096)
        self.min_hits = check_int("min_hits", min_hits, 1, self.L)
        self.sinks, self.recent = check_int("sinks", sinks, 0), check_int("recent", recent, 0)
        if self.sinks + self.recent < 1:
            raise ValueError("sinks + recent must be at least 1: the exact set anchors the sampled estimate")
        self.seed = check_int("seed", seed, 0)
        self.heads = check_int("heads", heads, 1)  # query heads sharing the hyperplanes, for bytes_read
        self.top_fraction = None if top_fraction is None else check_float("top_fraction", top_fraction, 0.0, 1.0)
        default = "magicpig" if top_fraction is None else "mp_exact_top"
        self.name = name or default
        self.last_call: dict = {}
        self._tables: OrderedDict = OrderedDict()
        self._grown: tuple | None = None  # (prompt index id, n, grown index): heads of a group share it

    def __repr__(self) -> str:
        return f"<estimator {self.name!r}: MagicPIG K={self.K} L={self.L} min_hits>={self.min_hits}>"

    def tables(self, keys):
        """The LSH index over ``keys``: kept from an earlier call on the same prompt (at most
        ``recent`` keys ago), else built now.

        Parameters
        ----------
        keys : torch.Tensor, (n, d)
            The row's keys.

        Returns
        -------
        LSHIndex
            The tables (grown by :func:`pigviz.lsh.index.grow_index` for a kept prompt).
        """
        import torch  # heavy: torch loads in ~1 s; only a call needs it

        from pigviz.lsh.index import build_index, grow_index  # heavy: imports torch

        n = keys.shape[0]
        where = (keys.data_ptr(), keys.stride(0), keys.shape[1], keys.dtype, str(keys.device))
        kept = self._tables.get(where)
        if kept is not None:
            index, n0, last_row = kept
            if n0 <= n <= n0 + self.recent and torch.equal(keys[n0 - 1], last_row):
                self._tables.move_to_end(where)
                if self._grown is not None and self._grown[0] is index and self._grown[1] == n:
                    return self._grown[2]
                grown = grow_index(index, keys[None], n)
                self._grown = (index, n, grown)
                return grown
        index = build_index(
            keys[None].float(), K=self.K, L=self.L, sinks=self.sinks, recent=self.recent, seed=self.seed
        )
        self._tables[where] = (index, n, keys[n - 1].clone())
        while len(self._tables) > KEPT_TABLES:
            self._tables.popitem(last=False)
        return index

    def __call__(self, q, keys, values, budget):
        from pigviz.lsh.magicpig import attend  # heavy: imports torch

        n = keys.shape[0]
        m = min(check_int("budget", budget, 1), n)
        if n <= self.sinks + self.recent or m < self.sinks + self.recent:
            return self._streaming(q, keys, values, m)
        index = self.tables(keys)
        q1, k1, v1 = q[None], keys[None], values[None]
        for min_hits in range(self.min_hits, self.L + 1):
            out, stats = attend(index, q1, k1, v1, min_hits=min_hits, return_read_mask=True)
            if int(stats["keys_read"][0]) <= m:
                break
        else:  # even all L tables sample too many keys: the exact set alone
            return self._streaming(q, keys, values, m)
        read = stats["read_mask"][0]
        if self.top_fraction is not None:
            from pigviz.lsh.affordable import magicpig_exact_top  # heavy: imports torch

            out, _ = magicpig_exact_top(index, q1, k1, v1, top_fraction=self.top_fraction, min_hits=min_hits)
        self.last_call = {
            "min_hits": min_hits,
            "sampled": int(stats["sampled"][0]),
            "candidates": int(stats["candidates"][0]),
            "keys_read": int(stats["keys_read"][0]),
            "fallback": False,
        }
        return out[0], read.nonzero()[:, 0]

    def _streaming(self, q, keys, values, m: int):
        sinks = min(self.sinks, m)
        out, stats = baselines.streaming_attention(q[None], keys[None], values[None], sinks=sinks, recent=m - sinks)
        self.last_call = {"min_hits": None, "sampled": 0, "candidates": 0, "keys_read": m, "fallback": True}
        return out[0], stats["read_mask"][0].nonzero()[:, 0]

    def bytes_read(self, n, d, dv, keys_read):
        """Bytes of the last call (:mod:`pigviz.attention.cost`): planes, table offsets, the ids
        scanned and their hit counters, the sampled keys' norms, keys and values read.

        Parameters
        ----------
        n : int
            Keys in the row.
        d, dv : int
            Key and value dimensions.
        keys_read : int
            Keys whose values entered the output.

        Returns
        -------
        float
            Bytes; a call that fell back to the exact set alone counts as StreamingLLM's.
        """
        last = self.last_call
        if not last or last["fallback"]:
            return cost.bytes_read("streaming", n=n, d=d, dv=dv, keys_read=keys_read)
        return cost.bytes_read(
            "magicpig",
            n=n,
            d=d,
            dv=dv,
            keys_read=keys_read,
            K=self.K,
            L=self.L,
            heads=self.heads,
            candidates=last["candidates"],
            sampled=last["sampled"],
        )


def magicpig(K: int = DEFAULTS.K, L: int = DEFAULTS.L, **options) -> MagicPIGEstimator:
    """MagicPIG (:func:`pigviz.lsh.magicpig.attend`) at (K, L), held to the budget (module docstring).

    Parameters
    ----------
    K, L : int
        Bits per table, tables.
    **options
        :class:`MagicPIGEstimator`'s others: ``min_hits`` (2), ``sinks`` (4), ``recent`` (64),
        ``seed`` (0), ``heads`` (query heads sharing the hyperplanes, for ``bytes_read``), ``name``.

    Returns
    -------
    MagicPIGEstimator
        The estimator.
    """
    return MagicPIGEstimator(K, L, **options)


def magicpig_exact_top(
    K: int = DEFAULTS.K, L: int = DEFAULTS.L, *, top_fraction: float = 0.5, **options
) -> MagicPIGEstimator:
    """MagicPIG's reads with the best ``top_fraction`` of the sample weighted as exact
    (:func:`pigviz.lsh.affordable.magicpig_exact_top`).

    Parameters
    ----------
    K, L : int
        Bits per table, tables.
    top_fraction : float in [0, 1]
        The share of the sample, best scores first, weighted as exact.
    **options
        As :func:`magicpig`'s.

    Returns
    -------
    MagicPIGEstimator
        The estimator (named ``"mp_exact_top"`` unless ``name`` is given).
    """
    return MagicPIGEstimator(K, L, top_fraction=top_fraction, **options)


class _VAttention(LibraryEstimator):
    """vAttention-style: the exact set and Quest's pages, then a uniform sample; the exact
    set is cut to the budget when the budget is smaller."""

    def run(self, q, keys, values, budget):
        from pigviz.lsh.affordable import vattention  # heavy: imports torch

        n = keys.shape[0]
        m = min(budget, n)
        sinks = min(self.options["sinks"], m)
        recent = min(self.options["recent"], m - sinks)
        opts = dict(self.options, sinks=sinks, recent=recent, page=min(self.page, n))
        return vattention(q[None], keys[None], values[None], m / n, **opts)


def vattention(
    sinks: int = DEFAULTS.sinks, recent: int = DEFAULTS.recent, page: int = 16, seed: int = 0, name: str = "vattention"
):
    """vAttention-style (:func:`pigviz.lsh.affordable.vattention`) at the budget: the exact set and
    Quest's pages, then a uniform sample; the exact set is cut to the budget when the budget is
    smaller.

    Parameters
    ----------
    sinks, recent : int >= 0
        The first and last keys, read exactly.
    page : int >= 1
        Quest's page size, in keys (cut to the row's length).
    seed : int >= 0
        Seed of the uniform sample.
    name : str
        The estimator's name in results.

    Returns
    -------
    LibraryEstimator
        The estimator (:class:`pigviz.attention.protocol.LibraryEstimator`).

    Raises
    ------
    ValueError, TypeError
        A parameter outside its range.
    """
    est = _VAttention(
        name,
        _library("vattention"),
        "vattention",
        page=check_int("page", page, 1),
        sinks=check_int("sinks", sinks, 0),
        recent=check_int("recent", recent, 0),
        seed=check_int("seed", seed, 0),
    )
    return est


class _SparQ(LibraryEstimator):
    def run(self, q, keys, values, budget):
        from pigviz.lsh.affordable import sparq  # heavy: imports torch

        n = keys.shape[0]
        return sparq(q[None], keys[None], values[None], min(budget, n) / n, r=self.options["r"])

    def bytes_read(self, n, d, dv, keys_read):
        r = self.options["r"] or max(1, d // 8)  # SparQ's default, pigviz.lsh.affordable.sparq_channels
        return cost.bytes_read("sparq", n=n, d=d, dv=dv, keys_read=keys_read, r=r)


def sparq(r: int | None = None, name: str = "sparq"):
    """SparQ (:func:`pigviz.lsh.affordable.sparq`): the top keys by ``r`` query channels, exact
    attention over them, mixed with the mean value.

    Parameters
    ----------
    r : int >= 1, optional
        Query channels that approximate the scores (default d // 8, at least 1).
    name : str
        The estimator's name in results.

    Returns
    -------
    LibraryEstimator
        The estimator (:class:`pigviz.attention.protocol.LibraryEstimator`).

    Raises
    ------
    ValueError, TypeError
        ``r`` not an integer >= 1.
    """
    return _SparQ(name, _library("sparq"), "sparq", r=None if r is None else check_int("r", r, 1))


def _library(name: str):
    """A stand-in for an affordable estimator's function (``LibraryEstimator.function``) that
    imports pigviz.lsh.affordable only when called."""

    def call(*args, **kwargs):
        import pigviz.lsh.affordable  # heavy: imports torch

        return getattr(pigviz.lsh.affordable, name)(*args, **kwargs)

    call.__name__ = name
    return call
