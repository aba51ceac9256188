"""Decode a real transformers model with MagicPIG's sampled attention (or a baseline).

How the swap works
------------------
``use_attention(model, "magicpig", **options)`` registers one attention function with
transformers (``AttentionInterface``, plus sdpa's mask function in ``AttentionMaskInterface``
so that the prefill stays causal) and switches the model to it; leaving the ``with`` block
switches it back to whatever it used before, also after an error. Inside:

* **prefill** (``session.phase = "prefill"``): every layer runs transformers' own sdpa, as
  MagicPIG's prefill is ordinary dense attention;
* ``session.prepare(cache)`` builds one LSH index per sampled layer from the cache's post-RoPE
  keys (``cache.layers[i].keys``); no copy of the keys or values is kept;
* **decode** (``phase = "decode"``): each query row is one decode step. In a sampled layer it
  reads, straight from the cache, (a) the indexed tokens (exact sinks + recent window + the
  LSH sample) and (b) every token cached after the index was built, exactly: one call of
  :func:`pigviz.lsh.fused.decode_step` per layer does both (straight on the tensors
  transformers passes in, writing the output in place: per-layer Python and torch work is
  a few small calls, as it adds up over 29 layers a token), or, for a chunk of rows,
  :func:`pigviz.lsh.fused.attend`.

Tokens generated after the prefill form that exact **buffer**. When it would grow past
``buffer`` tokens, its tokens up to the current row's own are INSERTED into the index
(:func:`pigviz.lsh.index.insert_tokens`): only those keys are hashed, with the index's own
hyperplanes and the mean it was built with (the prefill's, unless re-centred: below), and each id
is written at its bucket's end in tables laid out with room to grow (``prepare`` lays them out
right after the build), so no decode step re-hashes or re-sorts the cache. What is read exactly
at every step: the first ``sinks`` tokens, the last ``recent`` INDEXED tokens (the window moves
forward as tokens are inserted: the tokens it leaves become sampleable) and the buffer (tokens
not inserted yet). With ``recentre=r`` (r >= 2, default 2; 0 never re-centres) an insertion
that would bring the index to at least r times the tokens its mean was taken over rebuilds it
instead, over every token up to the same one: a fresh mean, the same hyperplanes (the same
seed). Over a long generation the keys' mean drifts away from the prefill's, and the output
error with it (benchmarks/bench_upkeep_drift.py: about twice a re-centred index's after a
256-token prefill and 7,936 generated tokens); as with a growing array the rebuilds are geometric
(prefill 100, r = 2: at 200, 400, 800, ... tokens), so the keys they re-hash stay below about
r / (r - 1) times the final index and the cost per generated token stays constant, but the step
that re-centres pays for a whole build of its layer. ``DecodeSession.upkeeps`` counts the
per-layer insertions (a re-centring included), ``upkeep_seconds`` their time, ``recentres``,
``recentre_tokens`` and ``recentre_seconds`` the re-centrings, the keys they hashed and their
time (within ``upkeep_seconds``), and ``rebuilds`` whole-index rebuilds of a layer that had no
index yet, which ordinary generation does not make (0).

Joining (a) and (b) needs the normaliser of (a): the compiled path scores both in one list,
one softmax; without numba (or on a GPU) :func:`pigviz.lsh.magicpig.attend` returns (a)'s
log-normaliser and (b) is mixed in by log-sum-exp, like two blocks of a flash-attention pass.
On a GPU that path never waits for the device within a forward: attend takes its padded,
fixed-shape formulation, and each layer's counts (keys read, keys sampled) stay on the GPU
until :meth:`DecodeSession.take_budgets` copies them all to the CPU at once.

Several decode rows can be fed in one forward (teacher forcing): row t sees the keys up to
its own position, exactly as in step-by-step decoding, so the result is the same while the
weights are read once per chunk instead of once per token.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from dataclasses import dataclass

from pigviz import attention as base
from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_choice, check_float, check_int
from pigviz.decode import custom
from pigviz.decode.cache import (
    KV_DTYPES,
    decoding_cache,
    half_copy,
    offload_layers,
    resolve_kv_dtype,
    transformers_cache,
)
from pigviz.decode.offload import OffloadStep
from pigviz.model import loading as models

__all__ = [
    "ATTENTION_NAME",
    "DENSE_KERNELS",
    "METHODS",
    "PLACEMENTS",
    "default_options",
    "DecodeSession",
    "use_attention",
    "check_swappable",
    "check_options",
    "new_cache",
    "transformers_cache",
    "forward",
]

ATTENTION_NAME = "pigviz_decode"
_ROWS_PER_ATTEND = 32
METHODS = ("dense", "magicpig", "topk", "quest", "streaming", "quest_rank_all")
# "device": every part on the model's device (on a GPU the padded all-device form);
# "cpu_offload": MagicPIG's own placement (pigviz.decode.offload).
PLACEMENTS = ("device", "cpu_offload")
# Dense decoding's two forms: "grouped" reads each KV head's K and V once for the query heads
# that share it (torch's SDPA on the group's rows, in the cache's dtype: the fastest dense pigviz has);
# "transformers" is transformers' own SDPA, which repeats K and V for every query head and
# widens a half-size cache to the model's dtype first.
DENSE_KERNELS = ("grouped", "transformers")
_OPTIONS = {
    "dense": {"kernel": "grouped", "kv_dtype": "model"},
    "magicpig": {
        **DEFAULTS.options(),  # K, L, min_hits, sinks, recent, seed, buffer: pigviz._util.config
        "dense_layers": (0,),
        "kv_dtype": "bfloat16",
        "placement": "device",
        "threads": None,
        # 0: never re-centre; r >= 2: rebuild on a fresh mean once the index holds r times the
        # tokens its mean covers (see the module docstring). 2 by default: keeping the prefill's
        # mean doubled the output error after a 256-token prompt and 7,936 generated tokens
        # (benchmarks/bench_upkeep_drift.py), and a prompt at least as long as the generation never
        # re-centres. Not a MagicPIG setting of the paper, so not in pigviz._util.config.
        "recentre": 2,
    },
    "topk": {"budget": 0.05, "dense_layers": (0,)},
    # Quest as its authors run it: current page always read, layers 0 and 1 dense (the paper).
    "quest": {"budget": 0.05, "page": 16, "dense_layers": (0, 1)},
    # pigviz's first Quest: every page ranked by its bound, the current one too.
    "quest_rank_all": {"budget": 0.05, "page": 16, "dense_layers": (0,)},
    "streaming": {"sinks": DEFAULTS.sinks, "recent": DEFAULTS.recent, "budget": None, "dense_layers": (0,)},
    custom.CUSTOM: custom.OPTIONS,  # your estimator (pigviz.decode.custom)
}


def default_options(attention: str) -> dict:
    """The options ``attention`` takes, with their defaults."""
    return dict(_OPTIONS[check_choice("attention", attention, METHODS)])


def check_swappable(model) -> None:
    """Raise unless ``model`` is a transformers model whose attention goes through
    ``AttentionInterface`` (the message names the class that cannot be swapped)."""
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(model, "set_attn_implementation", None)):
        raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    can = getattr(model, "_can_set_attn_implementation", None)
    swappable = can() if callable(can) else bool(getattr(model, "_supports_attention_backend", False))
    if not swappable:
        raise ValueError(
            f"{type(model).__name__} cannot have its attention swapped: it does not route "
            "attention through transformers' AttentionInterface"
        )
    for attr in ("num_attention_heads", "num_key_value_heads", "num_hidden_layers"):
        if not isinstance(getattr(config, attr, None), int):
            raise ValueError(f"{type(model).__name__} cannot have its attention swapped: config.{attr} is missing")
    models.check_supported_attention(config, type(model).__name__)


def _check_options(method: str, options: dict, num_layers: int) -> dict:
    method = check_choice("attention", method, (*METHODS, custom.CUSTOM))
    allowed = _OPTIONS[method]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        names = ", ".join(allowed) or "none"
        raise TypeError(f"unknown option(s) {', '.join(unknown)} for attention={method!r}; it takes: {names}")
    out = dict(allowed, **options)
    if "dense_layers" in out:
        layers = out["dense_layers"]
        if isinstance(layers, int) or layers is None:
            layers = () if layers is None else (layers,)
        out["dense_layers"] = tuple(sorted({check_int("dense_layers entry", x, 0, num_layers - 1) for x in layers}))
    for name, lo, hi in (
        ("K", 1, 30),
        ("L", 1, 4096),
        ("sinks", 0, None),
        ("recent", 0, None),
        ("seed", 0, None),
        ("buffer", 1, None),
        ("page", 1, None),
    ):
        if name in out:
            out[name] = check_int(name, out[name], lo, hi)
    if method == "dense":
        out["kernel"] = check_choice("kernel", out["kernel"], DENSE_KERNELS)
        out["kv_dtype"] = check_choice("kv_dtype", out["kv_dtype"], KV_DTYPES)
    if method == "magicpig":
        out["min_hits"] = check_int("min_hits", out["min_hits"], 1, out["L"])
        out["kv_dtype"] = check_choice("kv_dtype", out["kv_dtype"], KV_DTYPES)
        out["placement"] = check_choice("placement", out["placement"], PLACEMENTS)
        if out["threads"] is not None:
            out["threads"] = check_int("threads", out["threads"], 1, 1024)
        out["recentre"] = check_int("recentre", out["recentre"], 0)
        if out["recentre"] == 1:
            raise ValueError(
                "recentre must be 0 (never re-centre the index) or at least 2 (re-centre when the index has "
                "grown to that many times the tokens its mean covers), got 1"
            )
        if out["sinks"] + out["recent"] < 1:
            raise ValueError("sinks + recent must be at least 1: the exact set anchors the sampled estimate")
    if out.get("budget") is not None:
        out["budget"] = check_float("budget", out["budget"], 0.0, 1.0, lo_open=True)
    if method == custom.CUSTOM:
        out["estimator"] = custom.check_estimator(out["estimator"])
    if method == "streaming" and out["budget"] is None and out["sinks"] + out["recent"] < 1:
        raise ValueError("streaming needs sinks + recent >= 1 (or a budget)")
    return out


def check_options(method: str, options: dict, num_layers: int | None = None) -> dict:
    """``options`` of ``method`` checked and completed with the defaults, as
    :func:`use_attention` will check them, without a model: ``num_layers`` (None: unknown,
    e.g. before the model loads and where its files do not say) bounds ``dense_layers``."""
    return _check_options(method, dict(options), 2**31 if num_layers is None else num_layers)


@dataclass
class _LayerState:
    index: object  # pigviz.lsh.index.LSHIndex over the first n cached tokens
    n: int = 0  # index.n, and the counts the per-step budget needs, as plain ints
    exact: int = 0  # sinks + recent
    sampleable: int = 1  # indexed tokens outside the exact set (at least 1)
    centred_n: int = 0  # tokens indexed when the index's mean was taken (0: now, a fresh build)

    def __post_init__(self):
        self.n = self.index.n
        self.exact = self.index.sinks + self.index.recent
        self.sampleable = max(1, self.n - self.exact)
        self.centred_n = self.centred_n or self.n


class DecodeSession:
    """What the registered attention function does while ``use_attention`` is active.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention goes through transformers' ``AttentionInterface``.
    method : str
        One of ``METHODS``, or ``"custom"`` for an estimator (:mod:`pigviz.decode.custom`).
    **options
        The method's settings, checked and completed with its defaults
        (``default_options(method)`` lists them); in ``options`` after.

    Raises
    ------
    TypeError
        ``model`` not a transformers model, an unknown option, or an option of the wrong type.
    ValueError
        A model whose attention cannot be swapped, an unknown ``method``, or an option outside
        its range.
    """

    def __init__(self, model, method: str, **options):
        check_swappable(model)
        self.config = model.config
        self.method = method
        self.options = _check_options(method, options, model.config.num_hidden_layers)
        self.phase = "prefill"
        self.layers: dict[int, _LayerState] = {}
        self.index_seconds = 0.0
        self.index_cpu_seconds = 0.0  # the same in this thread's CPU time
        self.rebuilds = 0  # whole-index rebuilds: none in ordinary generation (tokens are inserted)
        self.upkeeps = 0  # per-layer insertions of the buffer into the index
        self.upkeep_tokens = 0  # tokens inserted, over all sampled layers
        self.upkeep_seconds = 0.0  # their time (part of attention_seconds)
        self.recentres = 0  # per-layer re-centrings (option recentre): insertions made as a rebuild
        self.recentre_tokens = 0  # keys they re-hashed, over all sampled layers
        self.recentre_seconds = 0.0  # their time (part of upkeep_seconds)
        self.time_attention = False  # True: synchronise the GPU around each attention call
        self.attention_seconds = 0.0  # decode-phase attention time, all layers
        self.attention_cpu_seconds = 0.0  # the same in this thread's CPU time (steady on a busy machine)
        self._seen: set[int] = set()
        self._budgets: dict[int, object] = {}  # layer -> (rows,) budgets of the last forward
        self._sampled: dict[int, object] = {}  # MagicPIG: layer -> (rows,) sampled / sampleable keys
        self._decode_step = None  # pigviz.lsh.fused.decode_step, imported on first use
        self._offloaded: dict[int, tuple] = {}  # cpu_offload: layer -> (OffloadLayer, OffloadStep)
        self.offload_report: dict | None = None  # cpu_offload: what prepare moved off the device
        self.threads = self.options.get("threads")  # compiled step's threads (None: torch's)
        # With count_reads, each decode-phase attention call adds the bytes it must read to
        # read_bytes (for a benchmark's bandwidth floor): dense layers their whole K and V;
        # MagicPIG's sampled layers their key and value rows, the token ids scanned, two offsets
        # per table, the hyperplanes and the hit bit sets. Baselines are not counted.
        self.count_reads = False
        self.read_bytes = 0

    # -- bookkeeping --------------------------------------------------------------------
    def sampled_layer(self, layer: int) -> bool:
        return self.method != "dense" and layer not in self.options.get("dense_layers", ())

    def take_budgets(self):
        """Per-row attention budget of the last forward: mean over sampled layers and heads of
        keys read / keys visible (1.0 for dense). Clears the record; per layer in
        ``last_layer_budgets``.

        Also kept: ``last_all_layer_budget``, the same mean over EVERY layer with the dense
        ones counted as 1 (what the whole model reads), and, for MagicPIG,
        ``last_sampled_budget``: keys sampled / keys the tables could sample (the indexed
        tokens outside the sinks and recent window), mean over sampled layers and heads,
        the share MagicPIG's authors report. Both ``(rows,)`` or None.

        On a GPU the layers' records are still there: this is where they come to the CPU, in
        one copy, so call it once per forward (it waits for the forward to finish).

        Returns
        -------
        torch.Tensor, float, (rows,), or None
            The budget of each row of the forward; None where no sampled layer recorded one
            (dense decoding, whose budget is 1.0).
        """
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        budgets, sampled = _rows(self._budgets, self._sampled)
        self._budgets.clear()
        self._sampled.clear()
        self.last_layer_budgets = dict(budgets)
        self.last_sampled_budget = torch.stack(list(sampled.values())).mean(0) if sampled else None
        self.last_all_layer_budget = None
        if not budgets:
            return None
        per_layer = torch.stack(list(budgets.values()))
        dense = self.config.num_hidden_layers - len(budgets)
        self.last_all_layer_budget = (per_layer.sum(0) + dense) / self.config.num_hidden_layers
        return per_layer.mean(0)

    # -- the cache --------------------------------------------------------------------------
    @property
    def offloading(self) -> bool:
        return self.method == "magicpig" and self.options["placement"] == "cpu_offload"

    def _storage_dtype(self, compute_dtype):

        return resolve_kv_dtype(self.options.get("kv_dtype", "model"), compute_dtype)

    def _own_storage_layers(self) -> tuple:
        """Layers whose K/V this session may store apart from the prefill's: every layer of
        dense, MagicPIG's sampled layers, none for the other methods."""
        every = range(self.config.num_hidden_layers)
        if self.method == "dense":
            return tuple(every)
        return tuple(i for i in every if self.sampled_layer(i)) if self.method == "magicpig" else ()

    def _half_layers(self, compute_dtype) -> tuple:
        """Layers whose K/V get storage of their own dtype, when ``kv_dtype`` differs from the
        model's: MagicPIG's sampled layers (on the model's device), or every layer of dense."""
        if self.offloading or self._storage_dtype(compute_dtype) == compute_dtype:
            return ()
        return self._own_storage_layers()

    def new_cache(self, model):
        """An empty cache for decoding ``model`` with this session: MagicPIG's sampled layers
        keep their K/V in ``kv_dtype`` (bf16 by default) from the first token on (no float32
        copy), every other layer in the model's dtype; all written in place (:func:`new_cache`).

        Parameters
        ----------
        model : transformers.PreTrainedModel
            The model this session decodes.

        Returns
        -------
        transformers.Cache
            The empty cache.
        """

        dtype = next(model.parameters()).dtype
        return decoding_cache(model, self._half_layers(dtype), self._storage_dtype(dtype))

    def decode_cache(self, cache):
        """The cache to decode from, given one a dense prefill filled: ``cache`` itself, or,
        where this session stores the sampled layers otherwise (``kv_dtype``, or the CPU
        offload, which moves them), a copy (:func:`pigviz.decode.cache.half_copy`): ``cache``
        is then left as it was, for other methods to decode from.

        Parameters
        ----------
        cache : transformers.Cache
            Filled by a dense prefill.

        Returns
        -------
        transformers.Cache
            ``cache`` or its copy.
        """

        layers = self._own_storage_layers()
        if not layers or getattr(cache.layers[layers[0]], "keys", None) is None:
            return cache
        dtype = cache.layers[layers[0]].keys.dtype
        if self.offloading:
            return half_copy(cache, layers, dtype)
        half = self._half_layers(dtype)
        return half_copy(cache, half, self._storage_dtype(dtype)) if half else cache

    # -- index ----------------------------------------------------------------------------
    def prepare(self, cache) -> None:
        """Index every sampled layer's cached keys (MagicPIG only; a no-op otherwise). With
        ``placement="cpu_offload"`` each sampled layer's cache is first split: its exact tokens
        stay on the model's device, all its indexed tokens move to the CPU, where the index is
        built; :attr:`offload_report` then says how many device bytes that freed.

        Parameters
        ----------
        cache : transformers.Cache
            The prefilled cache decoding goes on with; with ``cpu_offload`` its sampled layers are
            replaced by offloaded ones.
        """
        if self.method != "magicpig":
            return
        t0, c0, last = time.perf_counter(), time.thread_time(), None
        if self.offloading:
            self._offload(cache)
        for layer in range(self.config.num_hidden_layers):
            if self.sampled_layer(layer):
                if layer in self._offloaded:
                    off = self._offloaded[layer][0]
                    self._build(layer, off.cpu_keys[:, : off.n_indexed], None)
                else:
                    self._build(layer, cache.layers[layer].keys[0], cache.layers[layer].values[0])
                last = cache.layers[layer].keys
        if last is not None and last.is_cuda:  # queued GPU work belongs to the build's time
            import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

            torch.cuda.synchronize(last.device)
        self.index_seconds += time.perf_counter() - t0
        self.index_cpu_seconds += time.thread_time() - c0

    def _offload(self, cache) -> None:
        """The cache moves the sampled layers to the CPU (:func:`offload_layers`); the session
        keeps its handle on each moved layer, for the step, and the report of the first move."""
        o = self.options
        sampled = [layer for layer in range(self.config.num_hidden_layers) if self.sampled_layer(layer)]
        report = offload_layers(
            cache,
            sampled,
            sinks=o["sinks"],
            recent=o["recent"],
            kv_dtype=o.get("kv_dtype", "model"),
            spare=o["buffer"] + 1,
        )
        if report is None:
            return
        for layer in report["layers"]:
            self._offloaded[layer] = (cache.layers[layer], None)
        if self.offload_report is None:
            self.offload_report = report

    def _build(self, layer: int, keys, values) -> None:
        from pigviz.lsh.index import build_index, make_room  # heavy: imports torch

        o = self.options
        n = keys.shape[1]
        if n <= o["sinks"] + o["recent"]:
            self.layers.pop(layer, None)  # too short to sample from: everything stays in the buffer
            return
        # Hashed in float32 block by block; the cache itself is read in place at decode time.
        index = build_index(
            keys, K=o["K"], L=o["L"], sinks=o["sinks"], recent=o["recent"], seed=o["seed"] * 1000 + layer
        )
        # Room to grow now, in the build's time, so that the first insertion does not lay the tables out.
        make_room(index)
        self.layers[layer] = _LayerState(index)
        if layer in self._offloaded:
            off = self._offloaded[layer][0]
            self._offloaded[layer] = (off, OffloadStep(index, off.device))

    def _insert(self, layer: int, keys, stop: int) -> _LayerState:
        """File the cached tokens index.n .. stop - 1 (keys (Hkv, >= stop, d)) in the layer's
        index (:func:`pigviz.lsh.index.insert_tokens`, the same routine on both placements), or,
        with ``recentre=r`` once ``stop`` reaches r times the tokens the index's mean was taken
        over, rebuild it over tokens 0 .. stop - 1 with a fresh mean (:meth:`_build`: the same
        seed, so the same hyperplanes; an offloaded layer gets its step for the new index)."""
        from pigviz.lsh.index import insert_tokens  # heavy: imports torch

        t0 = time.perf_counter()
        state = self.layers[layer]
        self.upkeep_tokens += stop - state.n
        r = self.options.get("recentre", 0)
        recentre = bool(r) and stop >= r * state.centred_n
        if recentre:
            self._build(layer, keys[:, :stop], None)  # a fresh state, centred on these tokens
        else:
            insert_tokens(state.index, keys, stop)
            self.layers[layer] = _LayerState(state.index, centred_n=state.centred_n)
        if keys.is_cuda:  # queued GPU work belongs to the upkeep's time
            import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

            torch.cuda.synchronize(keys.device)
        seconds = time.perf_counter() - t0
        if recentre:
            self.recentres += 1
            self.recentre_tokens += stop
            self.recentre_seconds += seconds
        self.upkeeps += 1
        self.upkeep_seconds += seconds
        return self.layers[layer]

    # -- the attention function ----------------------------------------------------------
    def __call__(self, module, query, key, value, attention_mask, scaling=None, **kwargs):
        layer = module.layer_idx
        self._seen.add(layer)
        if query.shape[0] != 1:
            raise ValueError(f"batch size must be 1 for sampled decoding, got {query.shape[0]}")
        if kwargs.get("sliding_window") or kwargs.get("softcap"):
            raise ValueError(
                "this layer uses a sliding window or soft-capping, which sampled decoding does not support"
            )
        if self.phase == "prefill":
            return _dense(module, query, key, value, attention_mask, scaling, kwargs)
        self._sync(query)
        t0, c0 = time.perf_counter(), time.thread_time()
        if not self.sampled_layer(layer):
            if self.method == "dense" and self.options["kernel"] == "grouped":
                result = _grouped_dense(query, key, value, scaling)
            else:
                result = _dense(module, query, key, value, attention_mask, scaling, kwargs)
            if self.count_reads:
                self.read_bytes += key.numel() * key.element_size() + value.numel() * value.element_size()
        else:
            scaling = float(scaling if scaling is not None else query.shape[-1] ** -0.5)
            if layer in self._offloaded:
                out = self._offload_step(layer, query, scaling)
            elif self.method == "magicpig":
                out = self._magicpig_step(layer, query, key, value, scaling)
            else:
                out = None
            if out is None:
                if self.method == "magicpig":
                    out, budgets = self._magicpig(layer, query[0], key[0], value[0], scaling)
                else:
                    out, budgets = self._baseline(query[0], key[0], value[0], scaling, layer)
                self._budgets[layer] = budgets
                out = out.unsqueeze(0)
            result = (out if out.dtype == query.dtype else out.to(query.dtype)).contiguous(), None
        self._sync(query)
        self.attention_seconds += time.perf_counter() - t0
        self.attention_cpu_seconds += time.thread_time() - c0
        return result

    def _sync(self, tensor) -> None:
        """With ``time_attention`` on a GPU, wait for queued kernels so the clock means something."""
        if self.time_attention and tensor.is_cuda:
            import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

            torch.cuda.synchronize(tensor.device)

    def _baseline(self, q, k, v, scaling, layer=None):
        """Rows one by one, each against the keys up to its own position."""
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        H, T, d = q.shape
        n_total = k.shape[1]
        o = self.options
        if self.method == custom.CUSTOM:
            return custom.decode_rows(o["estimator"], q, k, v, scaling, o["budget"], layer)
        q = q * (scaling * math.sqrt(d))  # the baselines scale by 1/sqrt(d)
        outs, budgets = [], []
        for t in range(T):
            n = n_total - T + t + 1
            qt, kt, vt = q[:, t], k[:, :n], v[:, :n]
            if self.method == "topk":
                out, st = base.topk_attention(qt, kt, vt, o["budget"])
            elif self.method == "quest":
                out, st = base.quest_attention(qt, kt, vt, o["budget"], page=min(o["page"], n))
            elif self.method == "quest_rank_all":
                out, st = base.quest_rank_all_attention(qt, kt, vt, o["budget"], page=min(o["page"], n))
            else:
                sinks = min(o["sinks"], n)
                recent = o["recent"] if o["budget"] is None else max(1, round(o["budget"] * n) - sinks)
                out, st = base.streaming_attention(qt, kt, vt, sinks=sinks, recent=min(recent, n))
            outs.append(out)
            budgets.append(st["budget"])
        return torch.stack(outs, 1).transpose(0, 1), torch.tensor(budgets)

    def _magicpig_step(self, layer, query, key, value, scaling):
        """One decode row per head through the compiled step, with no per-layer tensor work:
        the output (1, 1, H, dv) float32, or None where the general path must run (a chunk of
        rows, no index yet, no compiled path, a non-finite number read)."""
        state = self.layers.get(layer)
        if state is None or query.shape[2] != 1:
            return None
        n_total = key.shape[2]
        if n_total - state.n > self.options["buffer"]:
            state = self._insert(layer, key[0], n_total)
        if self._decode_step is None:
            from pigviz.lsh.fused import decode_step  # heavy: imports torch

            self._decode_step = decode_step
        done = self._decode_step(
            state.index, query, key, value, min_hits=self.options["min_hits"], scale=scaling, threads=self.threads
        )
        if done is None:
            return None
        out, sampled = done
        if self.count_reads:
            H = query.shape[1]
            self.read_bytes += _sampled_layer_bytes(
                state.index, H, sampled + H * (state.exact + n_total - state.n), key, value
            )
        sampled /= query.shape[1]
        # As _magicpig: keys read (exact set, sample, buffer) / keys visible, mean over heads;
        # kept as floats, made tensors once per step by take_budgets.
        self._budgets[layer] = (sampled + state.exact + n_total - state.n) / n_total
        self._sampled[layer] = sampled / state.sampleable
        return out

    def _offload_step(self, layer, query, scaling):
        """A sampled layer in MagicPIG's placement (:mod:`pigviz.decode.offload`): the output
        (1, T, H, dv) on the model's device. As on the device path, once the buffer holds
        more than ``buffer`` tokens they move to the CPU and are inserted into the index."""
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        off, step = self._offloaded[layer]
        state = self.layers[layer]
        o = self.options
        T = query.shape[2]
        if off.buffered > o["buffer"]:
            if T - 1 > o["buffer"]:
                raise ValueError(
                    f"a chunk of {T} decode rows does not fit the exact buffer of "
                    f"{o['buffer']} tokens; raise buffer or feed fewer tokens"
                )
            # Insert everything up to the first row's own token; later rows stay in the buffer.
            off.fold_buffer(off.get_seq_length() - T + 1)
            state = self._insert(layer, off.cpu_keys, off.n_indexed)
        out, sampled = step(state.index, off, query, scale=scaling, min_hits=o["min_hits"], threads=self.threads)
        if self.count_reads:  # the CPU's sampled rows, the device's exact rows
            exact = off.keys.numel() * off.keys.element_size() + off.values.numel() * off.values.element_size()
            self.read_bytes += exact + _sampled_layer_bytes(
                state.index, query.shape[1] * T, int(sampled.sum()), off.cpu_keys, off.cpu_values
            )
        H = query.shape[1]
        # Per row: keys read = sample + exact set + the buffer up to the row's own token.
        own = torch.arange(T, dtype=torch.float32)
        buffer_read = off.buffered - T + 1 + own  # (T,)
        visible = state.n + buffer_read
        sampled_t = torch.from_numpy(sampled).view(-1, T).to(torch.float32)  # (H, T), KV-major = head order
        self._budgets[layer] = ((sampled_t + state.exact + buffer_read) / visible).mean(0)
        self._sampled[layer] = (sampled_t / state.sampleable).mean(0)
        del H
        return out

    def _magicpig(self, layer, q, k, v, scaling):
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        from pigviz.lsh.fused import attend  # heavy: imports torch

        H, T, d = q.shape
        Hkv, n_total, dv = v.shape
        G = H // Hkv
        state = self.layers.get(layer)
        n_idx = state.index.n if state is not None else 0
        if n_total - n_idx > self.options["buffer"]:
            if T - 1 > self.options["buffer"]:
                raise ValueError(
                    f"a chunk of {T} decode rows does not fit the exact buffer of "
                    f"{self.options['buffer']} tokens; raise buffer or feed fewer tokens"
                )
            # Insert everything up to the first row's own token; later rows stay in the buffer.
            if state is None:  # no index yet (a prompt too short to sample from): build one
                self._build(layer, k[:, : n_total - T + 1], v[:, : n_total - T + 1])
                self.rebuilds += 1
            else:
                self._insert(layer, k, n_total - T + 1)
            state = self.layers.get(layer)
            n_idx = state.index.n if state is not None else 0
        qf = q.reshape(Hkv, G * T, d)  # rows of KV group g, head-major
        # Row t of a chunk sees the cache up to its own position n_total - T + t: on the CPU
        # for attend to check, and made again on k's device (a copy there would wait for it).
        ends = n_total - T + 1 + torch.arange(T).repeat(H)  # (H*T,)
        row_ends = n_total - T + 1 + torch.arange(T, device=k.device)
        visible_n = row_ends.to(torch.float32)
        if state is None:  # nothing indexed yet: every visible token is read exactly
            scores = (qf.to(torch.float32) @ k.to(torch.float32).transpose(1, 2)) * scaling
            visible = torch.arange(n_total, device=k.device) < row_ends.repeat(H).view(Hkv, G * T, 1)
            weights = torch.softmax(scores.masked_fill(~visible, -math.inf), -1)
            out = (weights @ v.to(torch.float32)).view(H, T, dv).transpose(0, 1)
            self._sampled[layer] = torch.zeros(T, device=k.device)
            return out, torch.ones(T, device=k.device)
        outs, read, picked = [], [], []
        width = _ROWS_PER_ATTEND * G  # the reference path keeps a hit counter per row and token
        ends = ends.view(Hkv, G * T)
        for c0 in range(0, G * T, width):
            rows = qf[:, c0 : c0 + width]  # (Hkv, w, d): row r reads group r // w
            w = rows.shape[1]
            out, stats = attend(
                state.index,
                rows.reshape(Hkv * w, d),
                k,
                v,
                min_hits=self.options["min_hits"],
                scale=scaling,
                buffer_end=ends[:, c0 : c0 + w].reshape(-1),
                threads=self.threads,
            )
            outs.append(out.view(Hkv, w, dv))
            read.append((stats["keys_read"] + stats["buffer"]).view(Hkv, w))
            picked.append(stats["sampled"].view(Hkv, w))
        out = torch.cat(outs, 1).view(H, T, dv).transpose(0, 1)
        # On k's device, where the padded attend leaves its counts (PIGVIZ_PADDED=0 leaves them on the CPU).
        keys_read = torch.cat(read, 1).view(H, T).to(k.device, torch.float32)
        # The authors' budget: keys sampled / keys the tables could sample (outside sinks and recent).
        sampleable = max(1, state.index.n - state.index.sinks - state.index.recent)
        self._sampled[layer] = (torch.cat(picked, 1).view(H, T).to(k.device, torch.float32) / sampleable).mean(0)
        return out, (keys_read / visible_n).mean(0)


def _sampled_layer_bytes(index, rows: int, keys_read: int, key, value) -> int:
    """Bytes a compiled MagicPIG step of ``rows`` query rows must read, ``keys_read`` key and
    value rows in all (see ``DecodeSession.count_reads``)."""
    from pigviz.lsh.fused import last_candidates  # heavy: imports torch and numba

    row = key.shape[-1] * key.element_size() + value.shape[-1] * value.element_size()
    return (
        keys_read * row
        + last_candidates(index) * index.entries.element_size()
        + rows * index.L * 2 * index.offsets.element_size()
        + index.planes.nbytes
        + rows * index.n // 2  # two bit sets of n bits per row, scanned and cleared (as bench_attend)
    )


def _dense(module, query, key, value, attention_mask, scaling, kwargs):
    """transformers' sdpa; a half-size layer read densely (a prefill chunk after the first)
    is widened to the query's dtype first."""
    if key.dtype != query.dtype:
        key, value = key.to(query.dtype), value.to(query.dtype)
    return _sdpa()(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _grouped_dense(query, key, value, scaling):
    """Dense decode attention with each KV head's K and V read once, in the cache's dtype:
    the query heads of a group are stacked as rows of one SDPA call per group. ``query``
    (1, H, T, d), ``key``/``value`` (1, Hkv, n, d); row t sees the keys up to n - T + t.
    Returns transformers' ``(output (1, T, H, dv), None)`` in the query's dtype."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    _, H, T, d = query.shape
    Hkv, n, dv = key.shape[1], key.shape[2], value.shape[-1]
    G = H // Hkv
    q = query.to(key.dtype).reshape(1, Hkv, G * T, d)  # group g's rows: heads g*G .. g*G+G-1, T rows each
    mask = None
    if T > 1:  # a chunk of rows (teacher forcing): row t must not see the tokens after its own
        ends = (n - T + torch.arange(T, device=key.device)).repeat(G)
        mask = torch.arange(n, device=key.device)[None, :] <= ends[:, None]
    scale = float(scaling if scaling is not None else d**-0.5)
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, scale=scale)
    return out.view(1, H, T, dv).transpose(1, 2).to(query.dtype).contiguous(), None


def _rows(*records: dict) -> tuple[dict, ...]:
    """Each per-layer record (layer -> record) as (rows,) float32 CPU tensors: the compiled
    decode step keeps a plain float per layer (one row), the other paths a tensor. On a GPU
    those tensors stayed there all forward; the tensors of all the records come over in one
    copy, so a forward waits for the GPU once, not once per layer."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    records = tuple(dict(per_layer) for per_layer in records)
    on_device: dict = {}  # device -> [(which record, layer)]
    for which, per_layer in enumerate(records):
        for layer, record in per_layer.items():
            if isinstance(record, torch.Tensor) and not record.is_cpu:
                on_device.setdefault(record.device, []).append((which, layer))
    for places in on_device.values():
        parts = [records[which][layer].reshape(-1).to(torch.float32) for which, layer in places]
        host = torch.cat(parts).cpu()
        for (which, layer), part in zip(places, host.split([p.numel() for p in parts])):
            records[which][layer] = part
    return tuple(_host_rows(per_layer) for per_layer in records)


def _host_rows(per_layer: dict) -> dict:
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    if not per_layer:
        return {}
    values = [[v] if isinstance(v, float) else v.tolist() for v in per_layer.values()]
    if len({len(v) for v in values}) == 1:  # one conversion for the whole step
        return dict(zip(per_layer, torch.tensor(values, dtype=torch.float32).unbind(0)))
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in zip(per_layer, values)}


# -- registration and switching -------------------------------------------------------------
_ACTIVE: list[DecodeSession] = []


def _sdpa():
    """transformers' sdpa attention function (imported once: the decode loop calls per layer)."""
    global _SDPA
    if _SDPA is None:
        from transformers.integrations.sdpa_attention import (
            sdpa_attention_forward,  # heavy: transformers loads in seconds; only model code needs it
        )

        _SDPA = sdpa_attention_forward
    return _SDPA


_SDPA = None


def _dispatch(module, query, key, value, attention_mask, **kwargs):
    for session in reversed(_ACTIVE):
        if module.config is session.config:
            return session(module, query, key, value, attention_mask, **kwargs)
    return _sdpa()(module, query, key, value, attention_mask, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface  # heavy: transformers loads in seconds; only model code needs it
    from transformers.masking_utils import (  # heavy: transformers loads in seconds; only model code needs it
        AttentionMaskInterface,
        sdpa_mask,
    )

    AttentionInterface.register(ATTENTION_NAME, _dispatch)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)


@contextlib.contextmanager
def use_attention(model, attention: str = "magicpig", **options):
    """Switch ``model`` to the decode attention for the ``with`` block. The previous attention
    implementation comes back on exit, whatever happens inside.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention goes through transformers' ``AttentionInterface``.
    attention : str or callable
        One of ``METHODS``, or an estimator of the protocol (:mod:`pigviz.decode.custom`):
        ``use_attention(model, my_estimator, budget=0.05)``.
    **options
        The method's settings (``default_options(attention)`` lists them with their defaults).

    Yields
    ------
    DecodeSession
        The session the registered attention function runs.

    Raises
    ------
    TypeError, ValueError
        As :class:`DecodeSession`.
    """
    if callable(attention):
        attention, options = custom.CUSTOM, dict(options, estimator=attention)
    session = DecodeSession(model, attention, **options)
    _register()
    previous = model.config._attn_implementation
    _ACTIVE.append(session)
    try:
        model.set_attn_implementation(ATTENTION_NAME)
        yield session
    finally:
        _ACTIVE.remove(session)
        model.set_attn_implementation(previous)


def new_cache(model):
    """An empty cache for ``model`` whose layers write each new token in place
    (:class:`pigviz.decode.cache.GrowingLayer`, in the model's dtype) where transformers'
    ``DynamicLayer`` concatenates, i.e. copies the whole layer, at every token: every method
    then does the same work outside attention, and none pays for that copy."""

    return decoding_cache(model)


def forward(model, ids, cache, *, logits_to_keep: int = 0):
    """One forward of ``ids`` (1-D) appended to ``cache``; returns float32 logits (rows, vocab).
    Works with transformers that call the cache ``cache=`` (5.2x) or ``past_key_values=``."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model(input_ids=ids[None].to(device), use_cache=True, logits_to_keep=logits_to_keep, **{name: cache})
    return out.logits[0].float()


def _check_seen(session, model) -> None:
    missing = set(range(model.config.num_hidden_layers)) - session._seen
    if missing:
        raise ValueError(
            f"{type(model).__name__} cannot have its attention swapped: layers {sorted(missing)[:5]} "
            "never called the registered attention function"
        )
