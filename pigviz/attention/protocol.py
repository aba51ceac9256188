"""The estimator protocol: one way to write an attention estimator, the library's and yours.

    estimator(q, keys, values, budget) -> (output, read)

for ONE query head at ONE decode position:

* ``q`` (d,) is the query; ``keys`` (n, d) and ``values`` (n, dv) are the keys and values it
  can see (causal: positions 0 .. n-1, the last one its own token). They are float64 numpy
  arrays, or float64 torch tensors if the estimator says so (an attribute ``torch = True``).
* ``budget`` (an int >= 1) is the number of DISTINCT keys it may read.
* ``output`` (dv,) is its estimate of exact attention, softmax(keys @ q / sqrt(d)) @ values.
* ``read`` holds the indices (0 .. n-1) of the keys it read: every key whose score or value
  enters the output. A key read twice counts once. A boolean mask of length n works as well.

Reading more than ``budget`` distinct keys is refused: :func:`call` raises
:class:`OverBudget`, a ValueError that names the estimator, the count and the budget.

What an estimator scans to CHOOSE its keys is not counted as keys read: every score for
TopK, a min and max per page for Quest, a few channels of every key for SparQ, hash tables
for MagicPIG. That is the estimator's index, and it may declare it in bytes with a method
``bytes_read(n, d, dv, keys_read) -> float``: everything one step reads, counted like
:func:`pigviz.attention.cost.bytes_read` (fp16 cache). ``costs_like("topk")`` makes one
that counts like a library method. ``pigviz.study.estimators.evaluate_estimator`` asks for
it right after each call, so an index whose cost depends on the query (MagicPIG's tables)
may answer from what that call did.

Other optional attributes: ``name`` (how tables and figures call it; default the function's
``__name__``). :func:`declare` sets them and works as a decorator.

**An index built once: ``build``.** An estimator that keeps an index over the cache, as
MagicPIG keeps its hash tables, has a method ``build(keys) -> index``. ``keys`` (n, d) are one
KV head's keys at the end of the prefill (float64, numpy or torch as for a call), and ``index``
is whatever the estimator wants back. It is then called as::

    estimator(q, keys, values, budget, index=index)

with ``keys`` and ``values`` the whole visible cache, as for any estimator: the index covers
the first ``n_indexed`` of them, and the tokens written since, the *buffer*, follow (the
estimator keeps ``n_indexed`` in its index if it needs it). Decoding
(:func:`pigviz.decode.custom.decode_rows`) builds once per layer and KV head, at the first
decode step, over the cache before it; ``evaluate_estimator`` once per shipped head, over the
keys before its first position. :class:`Indexes` keeps them and builds again when a call's
keys are not the ones an index was built over (a new prompt). :func:`call` with no index
builds one over all but the row's own token, as a first decode step would.

The library's own methods follow the same protocol, so a learner's estimator meets them as
peers: :func:`exact`, :func:`topk`, :func:`quest`, :func:`quest_rank_all`, :func:`oracle`,
:func:`hybrid` and :func:`streaming` here; MagicPIG and the estimators a system can afford in
:mod:`pigviz.lsh.estimators`. Each calls the library's function on the one row (one query
head, one KV head) and returns its output and its read set, so it equals that function.
The one rule they share with yours: no method may read more than the budget. Quest is
therefore sparse in every layer here (its paper reads layers 0 and 1 densely).
"""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_choice, check_float, check_int
from pigviz.attention import baselines, cost

__all__ = [
    "SIGNATURE",
    "OverBudget",
    "declare",
    "costs_like",
    "estimator_name",
    "wants_torch",
    "builds",
    "build",
    "Indexes",
    "keys_for",
    "call",
    "add_row_note",
    "exact_output",
    "LibraryEstimator",
    "exact",
    "topk",
    "quest",
    "quest_rank_all",
    "oracle",
    "hybrid",
    "streaming",
]

SIGNATURE = "estimator(q, keys, values, budget) -> (output, read)"


class OverBudget(ValueError):
    """An estimator read more distinct keys than its budget.

    Parameters
    ----------
    *args, **kwargs
        As ValueError's: the message (:func:`call` names the estimator, the count and the budget).
    """


def declare(fn=None, *, name: str | None = None, torch: bool | None = None, bytes_read=None):
    """Set an estimator's optional attributes and return it; ``@declare(name="mine")`` works
    as a decorator.

    Parameters
    ----------
    fn : callable, optional
        The estimator. Without it, ``declare`` returns a decorator that sets the attributes on
        the function it decorates.
    name : str, optional
        Non-empty: how tables and figures call it (default the function's ``__name__``).
    torch : bool, optional
        True: it wants float64 torch tensors instead of numpy arrays.
    bytes_read : callable, optional
        ``f(n, d, dv, keys_read) -> bytes`` one step reads (module docstring; :func:`costs_like`
        makes one).

    Returns
    -------
    callable
        ``fn`` with the attributes set, or without ``fn`` the decorator.

    Raises
    ------
    TypeError
        The estimator or ``bytes_read`` not callable.
    ValueError
        ``name`` not a non-empty string.
    """

    def apply(f):
        if not callable(f):
            raise TypeError(f"an estimator must be callable, got {type(f).__name__}")
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"name must be a non-empty string, got {name!r}")
            f.name = name
        if torch is not None:
            f.torch = bool(torch)
        if bytes_read is not None:
            if not callable(bytes_read):
                raise TypeError(f"bytes_read must be callable f(n, d, dv, keys_read), got {type(bytes_read).__name__}")
            f.bytes_read = bytes_read
        return f

    return apply if fn is None else apply(fn)


def costs_like(method: str, **options):
    """A ``bytes_read(n, d, dv, keys_read)`` that counts like the library's ``method``:
    ``costs_like("topk")`` for an estimator that scores every key and reads the values of the
    keys it keeps.

    Parameters
    ----------
    method : str, one of COSTED_METHODS
        A method of :data:`pigviz.attention.cost.COSTED_METHODS`.
    **options
        Passed to :func:`pigviz.attention.cost.bytes_read` at each count (``page``, ``r``, ``K``,
        ``L``, ...); tried once now, on a small step, so that bad options fail here, not mid-run.

    Returns
    -------
    callable
        ``bytes_read(n, d, dv, keys_read) -> float``, with an attribute ``method``.

    Raises
    ------
    ValueError, TypeError
        An unknown ``method``, or options :func:`pigviz.attention.cost.bytes_read` refuses.
    """
    method = check_choice("method", method, cost.COSTED_METHODS)
    # Bad options fail here, not mid-run: tried on a step large enough for any good one (SparQ's r
    # up to the head size, Quest's page up to the context), so only a bad one is refused.
    probe_d, probe_n = max(4, _as_int(options.get("r"))), max(16, _as_int(options.get("page")))
    cost.bytes_read(method, n=probe_n, d=probe_d, keys_read=1, **options)

    def bytes_read(n, d, dv, keys_read):
        return cost.bytes_read(method, n=n, d=d, dv=dv, keys_read=keys_read, **options)

    bytes_read.method = method
    return bytes_read


def _as_int(x) -> int:
    return x if isinstance(x, int) and not isinstance(x, bool) else 0


def estimator_name(estimator) -> str:
    """What tables call ``estimator``: its ``name`` attribute, else its ``__name__``.

    Parameters
    ----------
    estimator : callable
        An estimator of the protocol.

    Returns
    -------
    str
        Its name; its type's name if it has neither attribute.
    """
    name = getattr(estimator, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(estimator, "__name__", None) or type(estimator).__name__


def wants_torch(estimator) -> bool:
    """Does ``estimator`` want float64 torch tensors instead of numpy arrays (an attribute
    ``torch = True``)?

    Parameters
    ----------
    estimator : callable
        An estimator of the protocol.

    Returns
    -------
    bool
        True if it does.
    """
    return bool(getattr(estimator, "torch", False))


def builds(estimator) -> bool:
    """Does ``estimator`` keep an index: has it a callable ``build(keys) -> index``?

    Parameters
    ----------
    estimator : callable
        An estimator of the protocol.

    Returns
    -------
    bool
        True if it has.
    """
    return callable(getattr(estimator, "build", None))


def build(estimator, keys):
    """``estimator.build(keys)`` on ``keys`` in the form it wants (float64 numpy, or torch where
    it says so), with its error naming the estimator (a note).

    Parameters
    ----------
    estimator : callable
        An estimator with a ``build(keys)`` method.
    keys : numpy.ndarray or torch.Tensor, (n, d), n >= 1
        One KV head's keys.

    Returns
    -------
    object
        The index, whatever ``estimator.build`` returns.

    Raises
    ------
    TypeError
        ``estimator`` has no ``build`` method.
    ValueError
        ``keys`` not (n, d) with n >= 1.
    Exception
        Whatever ``estimator.build`` raises, with a note (:func:`add_row_note`) naming it.
    """
    if not builds(estimator):
        raise TypeError(f"estimator {estimator_name(estimator)!r} has no build(keys) method")
    keys = _inputs(estimator, keys, keys, keys)[1]
    if keys.ndim != 2 or keys.shape[0] < 1:
        raise ValueError(f"build needs keys (n, d) with n >= 1, got shape {tuple(keys.shape)}")
    try:
        return estimator.build(keys)
    except Exception as exc:
        add_row_note(exc, estimator, "build", n=keys.shape[0])
        raise


class Indexes:
    """The indexes of an estimator with a ``build`` step, one per place (any key: decoding
    uses (layer, KV head)). :meth:`get` builds a place's index once, over the keys before the
    first row it serves, and hands it back while later calls pass the same keys grown: the
    first ``n_indexed`` rows equal to those it was built over (their first and last row and
    their sum, checked at each get). Other keys, a new prompt, build it again. ``builds``
    counts the builds.

    Parameters
    ----------
    estimator : callable
        An estimator with a ``build(keys)`` method.

    Raises
    ------
    TypeError
        ``estimator`` has no ``build`` method.
    """

    def __init__(self, estimator):
        if not builds(estimator):
            raise TypeError(f"estimator {estimator_name(estimator)!r} has no build(keys) method")
        self.estimator = estimator
        self.builds = 0
        self._kept: dict = {}

    def __len__(self) -> int:
        return len(self._kept)

    @staticmethod
    def _mark(keys, n: int) -> tuple:
        rows = np.asarray(_numpy(keys[:n], "keys"), dtype=np.float64)
        return rows[0].copy(), rows[n - 1].copy(), rows.sum(axis=0)

    def get(self, where, keys, n_indexed: int):
        """The kept index of ``where`` if ``keys`` start with the ones it was built over, else
        one built now over ``keys[:n_indexed]``.

        Parameters
        ----------
        where : hashable
            The place, e.g. (layer, KV head).
        keys : numpy.ndarray or torch.Tensor, (n, d)
            The keys the next row sees.
        n_indexed : int in [1, n]
            The keys a new index is built over (not read when the kept one serves).

        Returns
        -------
        index : object
            What the estimator's ``build`` returned.
        n_indexed : int
            The keys it was built over: the first ``n_indexed`` of ``keys``.

        Raises
        ------
        ValueError, TypeError
            ``n_indexed`` outside [1, n] when an index is built, or as :func:`build`.
        """
        n = keys.shape[0]
        kept = self._kept.get(where)
        if kept is not None:
            index, n0, mark = kept
            if n0 <= n and all(np.array_equal(a, b) for a, b in zip(mark, self._mark(keys, n0))):
                return index, n0
        n_indexed = check_int("n_indexed", n_indexed, 1, n)
        index = build(self.estimator, keys[:n_indexed])
        self.builds += 1
        self._kept[where] = (index, n_indexed, self._mark(keys, n_indexed))
        return index, n_indexed


def keys_for(fraction, n: int) -> int:
    """The budget of a query that sees ``n`` keys at ``fraction`` of them:
    max(1, round(fraction * n)), at most n.

    Parameters
    ----------
    fraction : float in (0, 1]
        The budget as a fraction of the keys.
    n : int >= 1
        The keys the query sees.

    Returns
    -------
    int in [1, n]
        The budget in distinct keys.

    Raises
    ------
    TypeError
        ``fraction`` not a real number or ``n`` not an integer.
    ValueError
        ``fraction`` or ``n`` outside its range.
    """
    fraction = check_float("fraction", fraction, 0.0, 1.0, lo_open=True)
    n = check_int("n", n, 1)
    return min(n, max(1, round(fraction * n)))


def _numpy(x, what: str):
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu()
        x = x.double() if x.is_floating_point() else x
        return x.numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # noqa: BLE001 - any unreadable result is the estimator's to fix
        raise TypeError(f"{what} must be an array, got {type(x).__name__}") from exc


def _inputs(estimator, q, keys, values):
    """The row in the form the estimator wants: float64 numpy, or float64 torch tensors."""
    if wants_torch(estimator):
        import torch  # heavy: torch loads in ~1 s; numpy-only estimators never need it

        def as_tensor(x):
            if isinstance(x, torch.Tensor):
                return x if x.dtype == torch.float64 else x.double()
            return torch.from_numpy(np.asarray(x, dtype=np.float64))

        return as_tensor(q), as_tensor(keys), as_tensor(values)
    return tuple(np.asarray(_numpy(x, "input"), dtype=np.float64) for x in (q, keys, values))


def call(estimator, q, keys, values, budget, *, index=None):
    """Run ``estimator`` on one row and check what it returns.

    The row is handed over as the estimator wants it. An estimator with a ``build`` step
    gets ``index=index`` (with none given, one built now over ``keys[:max(1, n - 1)]``, all
    but the row's own token); ``index`` is refused for any other.

    Parameters
    ----------
    estimator : callable
        ``estimator(q, keys, values, budget) -> (output, read)``, the protocol (module docstring).
    q : numpy.ndarray or torch.Tensor, (d,)
        The query.
    keys, values : numpy.ndarray or torch.Tensor, (n, d) and (n, dv), n >= 1
        The keys and values it sees.
    budget : int >= 1
        Distinct keys it may read.
    index : object, optional
        For an estimator with a ``build`` step: its index over the first keys.

    Returns
    -------
    output : numpy.ndarray, float64, (dv,)
        Its estimate.
    read : numpy.ndarray, int64
        The sorted distinct indices it read.

    Raises
    ------
    OverBudget
        It read more than ``budget`` distinct keys.
    ValueError, TypeError
        Naming the estimator: a result of the wrong shape or kind, NaN or inf in the output,
        or indices outside 0 .. n-1; also an estimator that is not callable, ``budget`` < 1,
        inputs of the wrong shape, or an ``index`` for an estimator without ``build``.
    """
    if not callable(estimator):
        raise TypeError(f"estimator must be callable as {SIGNATURE}, got {type(estimator).__name__}")
    name = estimator_name(estimator)
    budget = check_int("budget", budget, 1)
    q_in, k_in, v_in = _inputs(estimator, q, keys, values)
    if q_in.ndim != 1 or k_in.ndim != 2 or v_in.ndim != 2 or k_in.shape[1] != q_in.shape[0]:
        raise ValueError(
            f"q must be (d,), keys (n, d) and values (n, dv), got {tuple(q_in.shape)}, "
            f"{tuple(k_in.shape)}, {tuple(v_in.shape)}"
        )
    n, dv = k_in.shape[0], v_in.shape[1]
    if v_in.shape[0] != n or n < 1:
        raise ValueError(f"keys and values must hold the same n >= 1 rows, got {k_in.shape[0]} and {v_in.shape[0]}")
    if builds(estimator):
        if index is None:
            index = build(estimator, k_in[: max(1, n - 1)])
        result = estimator(q_in, k_in, v_in, budget, index=index)
    elif index is not None:
        raise TypeError(f"estimator {name!r} has no build step, so it takes no index")
    else:
        result = estimator(q_in, k_in, v_in, budget)
    if not isinstance(result, tuple) or len(result) != 2:
        got = "None" if result is None else type(result).__name__
        raise TypeError(f"estimator {name!r} must return a pair (output, read), got {got}")
    output = np.asarray(_numpy(result[0], f"estimator {name!r}'s output"), dtype=np.float64)
    if output.shape != (dv,):
        raise ValueError(f"estimator {name!r} returned an output of shape {output.shape}; expected ({dv},)")
    if not np.isfinite(output).all():
        raise ValueError(f"estimator {name!r} returned NaN or inf in its output")
    read = _read_indices(name, _numpy(result[1], f"estimator {name!r}'s read"), n)
    if read.size > budget:
        raise OverBudget(f"estimator {name!r} read {read.size} distinct keys, more than its budget of {budget}")
    return output, read


def add_row_note(exc: BaseException, estimator, where: str, **row) -> BaseException:
    """Add a PEP 678 note to ``exc`` naming ``estimator`` and the row it was on, so an error
    raised inside a learner's estimator keeps its own traceback and says where it happened.
    On Python 3.10, which has no ``add_note``, the note goes to ``__notes__`` all the same.

    Parameters
    ----------
    exc : BaseException
        The error.
    estimator : callable
        The estimator it came from.
    where : str
        What was running (``"build"``, a decoding step, ...): the note's first word.
    **row
        The row, e.g. layer, head, position, budget; a None value is left out.

    Returns
    -------
    BaseException
        ``exc`` (re-raise it with ``raise``).
    """
    fields = ", ".join(f"{k} {v}" for k, v in row.items() if v is not None)
    note = f"{where}: estimator {estimator_name(estimator)!r} at {fields}"
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]
    return exc


def _read_indices(name: str, read: np.ndarray, n: int) -> np.ndarray:
    read = np.asarray(read)
    if read.dtype == bool:
        if read.shape != (n,):
            raise ValueError(f"estimator {name!r} returned a read mask of shape {read.shape}; expected ({n},)")
        return np.flatnonzero(read).astype(np.int64)
    read = read.reshape(-1)
    if read.size and read.dtype.kind not in "iu":
        if read.dtype.kind == "f" and np.all(np.isfinite(read)) and np.all(read == np.round(read)):
            read = read.astype(np.int64)
        else:
            raise TypeError(f"estimator {name!r} must return integer indices as read, got dtype {read.dtype}")
    read = np.unique(read.astype(np.int64))
    if read.size and (read[0] < 0 or read[-1] >= n):
        raise ValueError(
            f"estimator {name!r} read index {int(read[0] if read[0] < 0 else read[-1])}, outside 0..{n - 1}"
        )
    return read


def exact_output(q, keys, values) -> np.ndarray:
    """Exact attention of one row in float64 numpy: softmax(keys @ q / sqrt(d)) @ values.

    Parameters
    ----------
    q : array-like, (d,)
        The query.
    keys, values : array-like, (n, d) and (n, dv)
        The keys and values it sees.

    Returns
    -------
    numpy.ndarray, float64, (dv,)
        The attention output.
    """
    q = np.asarray(q, dtype=np.float64)
    scores = np.asarray(keys, dtype=np.float64) @ q / math.sqrt(q.shape[0])
    w = np.exp(scores - scores.max())
    return (w / w.sum()) @ np.asarray(values, dtype=np.float64)


# --------------------------------------------------------------------------- the library's methods


class LibraryEstimator:
    """One of the library's decode-step methods as an estimator of the protocol: it runs
    ``function(q[None], keys[None], values[None], budget / n, **options)`` on the row (one
    query head over one KV head) and returns that call's output and read set. Its
    ``bytes_read`` counts like ``cost_method`` in :mod:`pigviz.attention.cost`.

    Parameters
    ----------
    name : str
        How tables and figures call it.
    function : callable
        A decode-step function such as :func:`pigviz.attention.topk_attention`:
        ``function(q, k, v, budget, **options) -> (output, stats)`` with ``stats["read_mask"]``.
    cost_method : str, one of COSTED_METHODS
        How :meth:`bytes_read` counts (:data:`pigviz.attention.cost.COSTED_METHODS`).
    page : int >= 1, optional
        For a page-based method: the page size, passed as ``page=`` after :meth:`page_for`.
    **options
        Passed to ``function`` at each call (e.g. ``seed``).

    Raises
    ------
    ValueError
        ``cost_method`` not one of them.
    """

    torch = True

    def __init__(self, name: str, function, cost_method: str, *, page: int | None = None, **options):
        self.name = name
        self.function = function
        self.cost_method = check_choice("cost_method", cost_method, cost.COSTED_METHODS)
        self.page = page
        self.options = options

    def __repr__(self) -> str:
        opts = dict(self.options, **({"page": self.page} if self.page else {}))
        return f"<estimator {self.name!r}: {self.function.__name__}({', '.join(f'{k}={v}' for k, v in opts.items())})>"

    def run(self, q, keys, values, budget):
        """The library call on one row.

        Parameters
        ----------
        q : torch.Tensor, float64, (d,)
            The query.
        keys, values : torch.Tensor, float64, (n, d) and (n, dv)
            The keys and values it sees.
        budget : int >= 1
            Distinct keys it may read (a budget over n reads n).

        Returns
        -------
        output : torch.Tensor, (1, dv)
            The function's output.
        stats : dict
            The function's stats, ``read_mask`` (1, n) among them.
        """
        n = keys.shape[0]
        opts = dict(self.options)
        if self.page is not None:
            opts["page"] = self.last_page = self.page_for(n, budget)
        return self.function(q[None], keys[None], values[None], min(budget, n) / n, **opts)

    def page_for(self, n: int, budget: int) -> int:
        """The page size used on a row: ``page``, but no larger than the row or the budget
        (Quest always reads at least one whole page, which must fit).

        Parameters
        ----------
        n : int >= 1
            Keys of the row.
        budget : int >= 1
            Distinct keys it may read.

        Returns
        -------
        int >= 1
            The page size.
        """
        return max(1, min(self.page, n, budget))

    def __call__(self, q, keys, values, budget):
        out, stats = self.run(q, keys, values, budget)
        return out[0], stats["read_mask"][0].nonzero()[:, 0]

    def bytes_read(self, n, d, dv, keys_read):
        """Bytes of the last call (for a page-based method, at the page size it used).

        Parameters
        ----------
        n, d, dv : int >= 1
            Keys visible and the head dimensions of a key and a value.
        keys_read : float in [0, n]
            Keys whose values entered the output.

        Returns
        -------
        float
            As :func:`pigviz.attention.cost.bytes_read` with ``cost_method``.
        """
        page = {"page": min(getattr(self, "last_page", self.page), n)} if self.page is not None else {}
        return cost.bytes_read(self.cost_method, n=n, d=d, dv=dv, keys_read=keys_read, **page)


class _Exact(LibraryEstimator):
    """Dense attention: reads every key, so only a budget of n lets it run."""

    def run(self, q, keys, values, budget):
        return baselines.dense_attention(q[None], keys[None], values[None])


class _Streaming(LibraryEstimator):
    """StreamingLLM held to the budget: the first ``sinks`` keys and the most recent ones."""

    def run(self, q, keys, values, budget):
        n = keys.shape[0]
        m = min(budget, n)
        sinks = min(self.options["sinks"], m)
        return baselines.streaming_attention(q[None], keys[None], values[None], sinks=sinks, recent=m - sinks)


def exact() -> LibraryEstimator:
    """Exact attention over every key (:func:`pigviz.attention.dense_attention`): within
    budget only when the budget is every key (a budget fraction of 1.0).

    Returns
    -------
    LibraryEstimator
        Named "exact".
    """
    return _Exact("exact", baselines.dense_attention, "dense")


def topk(name: str = "topk") -> LibraryEstimator:
    """TopK (:func:`pigviz.attention.topk_attention`): the ``budget`` highest scores, exactly.

    Parameters
    ----------
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.
    """
    return LibraryEstimator(name, baselines.topk_attention, "topk")


def quest(page: int = 16, name: str = "quest") -> LibraryEstimator:
    """Quest as its authors run it (:func:`pigviz.attention.quest_attention`): the current
    page always read, then pages by their bound while they fit the budget. A budget smaller
    than a page shrinks the pages to the budget, so that the current page fits.

    Parameters
    ----------
    page : int >= 1
        Tokens per page, shrunk on a row to at most its keys and the budget
        (:meth:`LibraryEstimator.page_for`).
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.

    Raises
    ------
    ValueError, TypeError
        ``page`` not an integer >= 1.
    """
    page = check_int("page", page, 1)
    return LibraryEstimator(name, baselines.quest_attention, "quest", page=page)


def quest_rank_all(page: int = 16, name: str = "quest_rank_all") -> LibraryEstimator:
    """Quest with every page ranked by its bound (:func:`pigviz.attention.quest_rank_all_attention`).

    Parameters
    ----------
    page : int >= 1
        Tokens per page, shrunk on a row to at most its keys and the budget
        (:meth:`LibraryEstimator.page_for`).
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.

    Raises
    ------
    ValueError, TypeError
        ``page`` not an integer >= 1.
    """
    page = check_int("page", page, 1)
    return LibraryEstimator(name, baselines.quest_rank_all_attention, "rank_all", page=page)


def oracle(seed: int = 0, name: str = "oracle") -> LibraryEstimator:
    """Oracle sampling from the true weights (:func:`pigviz.attention.oracle_sampling_attention`).

    Parameters
    ----------
    seed : int >= 0
        Seed of the draws (the same at every call).
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.

    Raises
    ------
    ValueError, TypeError
        ``seed`` not an integer >= 0.
    """
    return LibraryEstimator(name, baselines.oracle_sampling_attention, "oracle", seed=check_int("seed", seed, 0))


def hybrid(seed: int = 0, name: str = "hybrid") -> LibraryEstimator:
    """The top half of the budget exactly, the rest sampled from the true weights
    (:func:`pigviz.attention.hybrid_attention`).

    Parameters
    ----------
    seed : int >= 0
        Seed of the draws (the same at every call).
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.

    Raises
    ------
    ValueError, TypeError
        ``seed`` not an integer >= 0.
    """
    return LibraryEstimator(name, baselines.hybrid_attention, "hybrid", seed=check_int("seed", seed, 0))


def streaming(sinks: int = DEFAULTS.sinks, name: str = "streaming") -> LibraryEstimator:
    """StreamingLLM at the budget: the first keys, the rest of the budget the most recent.

    Parameters
    ----------
    sinks : int >= 0
        The first keys read (fewer if the budget is smaller).
    name : str
        How tables call it.

    Returns
    -------
    LibraryEstimator
        The estimator.

    Raises
    ------
    ValueError, TypeError
        ``sinks`` not an integer >= 0.
    """
    return _Streaming(name, baselines.streaming_attention, "streaming", sinks=check_int("sinks", sinks, 0))
