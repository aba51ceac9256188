"""Your estimator inside real decoding: ``use_attention(model, estimator, budget=0.05)``.

:func:`pigviz.decode.session.use_attention` takes, besides a method's name, any estimator of
the protocol (:mod:`pigviz.attention.protocol`), ``estimator(q, keys, values, budget) ->
(output, read)``. In every layer it makes sparse (all but ``dense_layers``, default layer 0),
each decode row of each query head becomes one call: ``q`` that head's query (scaled so that
the estimator's own ``q·k / sqrt(d)`` is the model's score), ``keys`` and ``values`` its KV
head's cache up to the row's own token, ``budget = max(1, round(budget fraction * n))``.
The prefill stays dense, as for every method. Reading past the budget raises the protocol's
ValueError, naming the estimator.

An estimator with a build step (``build(keys) -> index``, :mod:`pigviz.attention.protocol`)
gets it called once per sparse layer and KV head, at the first decode step, on that KV head's
keys before it (the prefill's); each row then calls ``estimator(q, keys, values, budget,
index=index)`` with the whole visible cache: the tokens written since the build, the buffer,
follow the indexed ones. The indexes are kept per estimator (:func:`indexes_of`) and built
again for a new prompt.

An estimator is called once per query head, row and sparse layer (SmolLM2-135M: 9 heads x 29
layers per token), on float64 copies of the cache made once per layer and forward: a numpy
estimator that takes a millisecond makes a token cost about a quarter of a second.

:func:`resolve` turns ``"module:function"`` or ``"path/to/file.py:function"`` (what ``pigviz
eval --attention`` takes) into the estimator.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import weakref
from pathlib import Path

import numpy as np

from pigviz.attention import protocol

__all__ = ["CUSTOM", "OPTIONS", "check_estimator", "decode_rows", "indexes_of", "resolve", "is_spec"]

CUSTOM = "custom"  # the method name a session with your estimator runs under
OPTIONS = {"estimator": None, "budget": 0.05, "dense_layers": (0,)}


def check_estimator(estimator):
    """``estimator`` if it is callable, else TypeError saying what the protocol is.

    Parameters
    ----------
    estimator : object
        What was passed as the attention.

    Returns
    -------
    callable
        ``estimator`` itself.

    Raises
    ------
    TypeError
        ``estimator`` not callable.
    """
    if not callable(estimator):
        raise TypeError(
            f"attention must be a method name or an estimator callable as {protocol.SIGNATURE}, "
            f"got {type(estimator).__name__}"
        )
    return estimator


_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # estimator -> protocol.Indexes
_INDEXES_BY_ID: dict = {}  # id -> (estimator, Indexes), for an estimator no weak reference can hold


def indexes_of(estimator) -> protocol.Indexes:
    """The indexes decoding keeps for ``estimator`` (one with a build step): one per (layer, KV
    head), as long as the estimator lives (:class:`pigviz.attention.protocol.Indexes`).

    Parameters
    ----------
    estimator : callable
        An estimator with a ``build(keys)`` method.

    Returns
    -------
    pigviz.attention.protocol.Indexes
        The same object at every call for the same estimator.

    Raises
    ------
    TypeError
        ``estimator`` has no ``build`` method.
    """
    try:
        kept = _INDEXES.get(estimator)
        if kept is None:
            kept = _INDEXES[estimator] = protocol.Indexes(estimator)
        return kept
    except TypeError:  # not weakly referenceable
        pair = _INDEXES_BY_ID.get(id(estimator))
        if pair is None or pair[0] is not estimator:
            pair = _INDEXES_BY_ID[id(estimator)] = (estimator, protocol.Indexes(estimator))
        return pair[1]


def decode_rows(
    estimator, q, k, v, scaling: float, budget: float, layer: int | None = None, indexes: protocol.Indexes | None = None
):
    """The decode rows of one layer, the T rows' own tokens last in the cache: row t sees the
    cache up to n_total - T + t, and each of its query heads is one call of the estimator
    (:func:`pigviz.attention.protocol.call`).

    An estimator with a build step gets, per KV head, the index of ``(layer, kv head)`` from
    ``indexes`` (default :func:`indexes_of`): built over the cache before these T rows (at
    least its first token) when none is kept for these keys, and passed to every row.

    Parameters
    ----------
    estimator : callable
        An estimator of the protocol (:mod:`pigviz.attention.protocol`).
    q : torch.Tensor, (H, T, d)
        The rows' queries, as the model's attention gets them.
    k, v : torch.Tensor, (Hkv, n_total, d) and (Hkv, n_total, dv)
        The layer's cache, the T rows' own tokens last; H a multiple of Hkv.
    scaling : float
        The model's score scale (score = q·k · scaling): the estimator gets q multiplied by
        scaling · sqrt(d), so that its own q·k / sqrt(d) is the model's score.
    budget : float in (0, 1]
        A row that sees n keys may read max(1, round(budget · n)) of them
        (:func:`pigviz.attention.protocol.keys_for`).
    layer : int, optional
        The model layer: it names the layer in the note an error of the estimator gains
        (:func:`pigviz.attention.protocol.add_row_note`), and the place of its indexes.
    indexes : pigviz.attention.protocol.Indexes, optional
        Where the indexes of an estimator with a build step are kept.

    Returns
    -------
    output : torch.Tensor, float32, (T, H, dv)
        The outputs, on ``q``'s device.
    used : torch.Tensor, float32, (T,)
        The per-row budget used: keys read / keys visible, mean over heads.

    Raises
    ------
    pigviz.attention.protocol.OverBudget, ValueError, TypeError
        As :func:`pigviz.attention.protocol.call`, or ``budget`` outside (0, 1]; an error of the
        estimator (whatever it raises) gains a note naming the layer, the head and the position.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, T, d = q.shape
    Hkv, n_total, dv = v.shape
    group = H // Hkv
    wants_torch = protocol.wants_torch(estimator)
    # One float64 copy per layer and forward, sliced per row (a view): not one per call.
    k64 = k.detach().to("cpu", torch.float64)
    v64 = v.detach().to("cpu", torch.float64)
    q64 = (q.detach() * (scaling * math.sqrt(d))).to("cpu", torch.float64)
    if not wants_torch:
        k64, v64, q64 = k64.numpy(), v64.numpy(), q64.numpy()
    out = np.zeros((T, H, dv))
    used = torch.zeros(T, dtype=torch.float32)
    index = [None] * Hkv
    if protocol.builds(estimator):
        indexes = indexes if indexes is not None else indexes_of(estimator)
        first = n_total - T + 1  # the keys the first row sees
        for g in range(Hkv):
            try:
                index[g] = indexes.get((layer, g), k64[g, :first], max(1, n_total - T))[0]
            except Exception as exc:
                protocol.add_row_note(exc, estimator, "sampled decoding", layer=layer, kv_head=g, n=first - 1)
                raise
    for t in range(T):
        n = n_total - T + t + 1
        m = protocol.keys_for(budget, n)
        read_total = 0
        for h in range(H):
            g = h // group
            try:
                o, read = protocol.call(estimator, q64[h, t], k64[g, :n], v64[g, :n], m, index=index[g])
            except Exception as exc:
                protocol.add_row_note(
                    exc, estimator, "sampled decoding", layer=layer, head=h, position=n - 1, n=n, budget=f"{m} keys"
                )
                raise
            out[t, h] = o
            read_total += read.size
        used[t] = read_total / (H * n)
    return torch.from_numpy(out).to(q.device, torch.float32), used


def is_spec(text) -> bool:
    """Does ``text`` name an estimator (``module:function``) rather than a method?

    Parameters
    ----------
    text : object
        What was passed as the attention (a method's name or a spec).

    Returns
    -------
    bool
        True for a str with a colon.
    """
    return isinstance(text, str) and ":" in text


def resolve(spec: str):
    """The estimator named by ``"module:function"`` (the current folder is searched too) or
    ``"path/to/file.py:function"``.

    Parameters
    ----------
    spec : str
        ``module:function`` or ``path/to/file.py:function`` (what ``pigviz eval --attention``
        takes).

    Returns
    -------
    callable
        The estimator.

    Raises
    ------
    ValueError
        Naming what could not be found: a malformed spec, no such file, a module that cannot be
        imported, or no such attribute.
    TypeError
        The attribute is not callable.
    """
    if not is_spec(spec):
        raise ValueError(f"an estimator is named module:function or file.py:function, got {spec!r}")
    where, _, attr = spec.rpartition(":")
    if not where or not attr.isidentifier():
        raise ValueError(f"an estimator is named module:function or file.py:function, got {spec!r}")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise ValueError(f"{spec}: no file {path}")
        module_spec = importlib.util.spec_from_file_location(f"pigviz_estimator_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        added = str(Path.cwd())
        sys.path.insert(0, added)
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"{spec}: cannot import {where} ({exc})") from None
        finally:
            sys.path.remove(added)
    estimator = getattr(module, attr, None)
    if estimator is None:
        raise ValueError(f"{spec}: {where} has no {attr}")
    return check_estimator(estimator)
