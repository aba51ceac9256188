"""KV caches for sampled decoding: half-size storage, and MagicPIG's own CPU placement.

**Written in place.** :class:`GrowingLayer` keeps a layer's keys and values in one block with
room to grow and writes each new token into it; transformers' ``DynamicLayer`` concatenates,
i.e. copies the whole layer, at every token (at 8k tokens of SmolLM2, 360 MB per token).
:func:`pigviz.decode.session.new_cache` makes every method's cache of such layers.

**Half-size storage.** A CPU model computes in float32, and transformers' cache keeps every
key and value in the model's dtype. MagicPIG's authors keep the cache they sample in bfloat16
(their CPU attention reads bf16 rows), and the compiled step reads 16-bit rows as they are, so
a float32 cache makes it fetch twice the bytes it needs. A :class:`GrowingLayer` can keep its
keys and values in a storage dtype of its own (bf16 for MagicPIG's sampled layers). Only the
storage copy exists: the float32 states of a prefill are written into it and dropped (the
prefill's own attention reads them before they are rounded).

:func:`decoding_cache` makes a cache whose chosen layers are half-size from the first token
(``pigviz generate``); :func:`half_copy` makes one from an existing cache (the teacher-forced
evaluation, whose float32 cache stays the reference for the other methods).

**CPU offload** (``placement="cpu_offload"``, :class:`OffloadLayer`): MagicPIG's paper runs the
model, the query hashing and the exact sink and window tokens on the GPU and keeps the rest of
the cache, the hash tables and the sampled attention on the CPU, merging the two parts by
log-sum-exp. An offloaded layer keeps on the model's device only [sinks | recent window |
decode buffer]; every indexed token's key and value row sits in CPU memory (pinned when the
model is on a GPU), in the storage dtype. :func:`offload_layers` makes the move; the session
(:mod:`pigviz.decode.session`) owns the step and only calls down into this storage, which never
calls back.

Each layer's ``keys`` / ``values`` are views of its storage; their heads lie ``capacity`` rows
apart, which :func:`pigviz.lsh.fused.attend` reads in place.
"""

from __future__ import annotations

import copy

from pigviz._util.validate import check_choice

__all__ = [
    "KV_DTYPES",
    "layer_classes",
    "decoding_cache",
    "half_copy",
    "offload_layers",
    "storage_bytes",
    "resolve_kv_dtype",
    "transformers_cache",
]

KV_DTYPES = ("bfloat16", "float16", "float32", "model")
_GROW_TOKENS = 256  # spare rows a layer takes when it grows: a decode step then writes in place


def resolve_kv_dtype(name: str, compute_dtype):
    """The storage dtype for ``name`` (one of :data:`KV_DTYPES`; "model": the model's own)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    name = check_choice("kv_dtype", name, KV_DTYPES)
    return compute_dtype if name == "model" else getattr(torch, name)


def _dynamic_layer():
    from transformers.cache_utils import DynamicLayer  # heavy: transformers loads in seconds

    return DynamicLayer


def layer_classes():
    """``(GrowingLayer, OffloadLayer)``, made once: they subclass transformers'
    ``DynamicLayer``, which this module imports only when a cache is made (``pigviz --help``
    and the numpy-only lessons never load transformers)."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _make_classes(_dynamic_layer())
    return _CLASSES


_CLASSES = None


def _make_classes(DynamicLayer):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    class GrowingLayer(DynamicLayer):
        """One layer's keys and values in a block of storage, written in place.

        ``dtype``: the storage dtype (None: the dtype of the first states written). Keeps
        ``_GROW_TOKENS`` spare rows and grows by an eighth, so a decode step rarely copies the
        layer (transformers' ``DynamicLayer`` copies it at every token).
        ``keys`` / ``values`` are views ``storage[..., :length, :]``. The first update of an
        empty layer returns the states it was given (a prefill's attention reads them
        unrounded); later ones return the views, in the storage dtype."""

        def __init__(self, dtype=None):
            super().__init__()
            self.store_dtype = dtype
            self._k = self._v = None

        def lazy_initialization(self, key_states, value_states):
            super().lazy_initialization(key_states, value_states)
            dtype = self.store_dtype or key_states.dtype
            self._k = key_states.new_empty((*key_states.shape[:2], 0, key_states.shape[3]), dtype=dtype)
            self._v = value_states.new_empty((*value_states.shape[:2], 0, value_states.shape[3]), dtype=dtype)
            self.keys, self.values = self._k, self._v

        @property
        def capacity(self) -> int:
            return 0 if self._k is None else self._k.shape[-2]

        def _adopted(self) -> bool:
            """Whether ``keys`` is still a view of the storage (transformers' beam search and
            batch selection replace it with a new tensor)."""
            if self.keys is None:
                return False
            return self.keys.untyped_storage().data_ptr() == self._k.untyped_storage().data_ptr()

        def _reserve(self, length: int) -> None:
            if not self._adopted():  # re-adopt whatever keys/values now hold
                self._k = self.keys.to(self._k.dtype).contiguous()
                self._v = self.values.to(self._v.dtype).contiguous()
                self.keys, self.values = self._k, self._v
            if length <= self.capacity:
                return
            n = self.keys.shape[-2]
            cap = max(length + _GROW_TOKENS, self.capacity + self.capacity // 8)
            k = self._k.new_empty((*self._k.shape[:2], cap, self._k.shape[3]))
            v = self._v.new_empty((*self._v.shape[:2], cap, self._v.shape[3]))
            k[..., :n, :] = self.keys
            v[..., :n, :] = self.values
            self._k, self._v = k, v
            self.keys, self.values = k[..., :n, :], v[..., :n, :]

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, T = self.keys.shape[-2], key_states.shape[-2]
            self._reserve(n + T)
            self._k[..., n : n + T, :] = key_states
            self._v[..., n : n + T, :] = value_states
            self.keys, self.values = self._k[..., : n + T, :], self._v[..., : n + T, :]
            if n == 0 and key_states.dtype != self._k.dtype:
                return key_states, value_states
            return self.keys, self.values

        def reset(self) -> None:
            super().reset()
            self._k = self._v = None

        @property
        def nbytes(self) -> int:
            """Bytes of the storage, spare rows included."""
            return 0 if self._k is None else self._k.nbytes + self._v.nbytes

    class OffloadLayer(DynamicLayer):
        """A sampled layer in MagicPIG's placement: the tokens it always reads exactly on the
        model's device, the tokens it samples (and their tables) on the CPU.

        ``cpu_keys`` / ``cpu_values`` (Hkv, capacity, d): every indexed token (0 .. n_indexed - 1)
        in ``dtype``, pinned when the device is a GPU. ``keys`` / ``values`` (1, Hkv, m, d) on the
        device: [the first ``sinks`` tokens | the last ``recent`` indexed tokens | the decode
        buffer], which ``update`` extends and returns. ``get_seq_length`` counts every token.
        ``crop`` may remove buffer tokens only."""

        is_croppable = True

        def __init__(self, keys, values, *, sinks: int, recent: int, dtype, spare: int = _GROW_TOKENS):
            super().__init__()
            self.spare = spare  # device rows kept free for the buffer (the session's buffer + 1)
            self.device = keys.device
            self.dtype = keys.dtype
            self.is_initialized = True
            self.sinks, self.recent = sinks, recent
            pinned = keys.device.type == "cuda"
            n = keys.shape[2]
            # Blocking copies: the index is built from cpu_keys right after.
            self.cpu_keys = self._host(keys[0], dtype, pinned, n)
            self.cpu_values = self._host(values[0], dtype, pinned, n)
            self.n_indexed = n
            self.buffered = 0
            self._exact_k = self._exact_v = None
            self._set_exact(
                torch.cat([keys[:, :, :sinks], keys[:, :, n - recent :]], 2),
                torch.cat([values[:, :, :sinks], values[:, :, n - recent :]], 2),
                spare,
            )

        @staticmethod
        def _host(x, dtype, pinned: bool, rows: int, spare: int = _GROW_TOKENS):
            out = torch.empty((x.shape[0], rows + spare, x.shape[2]), dtype=dtype, pin_memory=pinned)
            out[:, : x.shape[1]].copy_(x)
            return out

        def _set_exact(self, k, v, spare: int):
            """Device storage [sinks | recent | buffer] with room for ``spare`` more tokens."""
            m = k.shape[2]
            self._exact_k = k.new_empty((*k.shape[:2], m + spare, k.shape[3]))
            self._exact_v = v.new_empty((*v.shape[:2], m + spare, v.shape[3]))
            self._exact_k[:, :, :m] = k
            self._exact_v[:, :, :m] = v
            self.keys, self.values = self._exact_k[:, :, :m], self._exact_v[:, :, :m]

        @property
        def exact_length(self) -> int:
            return self.keys.shape[2]

        def update(self, key_states, value_states, *args, **kwargs):
            m, T = self.exact_length, key_states.shape[2]
            if m + T > self._exact_k.shape[2]:
                self._set_exact(self.keys, self.values, max(self.spare, T))
            self._exact_k[:, :, m : m + T] = key_states
            self._exact_v[:, :, m : m + T] = value_states
            self.keys, self.values = self._exact_k[:, :, : m + T], self._exact_v[:, :, : m + T]
            self.buffered += T
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.n_indexed + self.buffered

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.get_seq_length() + query_length, 0

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes a negative count (tokens to remove)")
            drop = -tokens_to_remove
            if drop > self.buffered:
                raise ValueError(
                    f"an offloaded layer can drop only the {self.buffered} tokens of its decode buffer, "
                    f"not {drop}: its older tokens are in the CPU's index"
                )
            if drop:
                m = self.exact_length - drop
                self.keys, self.values = self._exact_k[:, :, :m], self._exact_v[:, :, :m]
                self.buffered -= drop

        def fold_buffer(self, upto: int) -> None:
            """Move the buffer's tokens below position ``upto`` to the CPU (before they are
            inserted into the index, which then covers tokens 0 .. upto - 1); the device keeps
            the sinks, the new last ``recent`` indexed tokens and the rest of the buffer."""
            move = upto - self.n_indexed
            if move <= 0:
                return
            start = self.sinks + self.recent  # the buffer's first token on the device
            pinned = self.device.type == "cuda"
            if upto > self.cpu_keys.shape[1]:
                grow = max(_GROW_TOKENS, upto // 8)
                self.cpu_keys = self._host(self.cpu_keys[:, : self.n_indexed], self.cpu_keys.dtype, pinned, upto, grow)
                self.cpu_values = self._host(
                    self.cpu_values[:, : self.n_indexed], self.cpu_values.dtype, pinned, upto, grow
                )
            self.cpu_keys[:, self.n_indexed : upto].copy_(self.keys[0, :, start : start + move])
            self.cpu_values[:, self.n_indexed : upto].copy_(self.values[0, :, start : start + move])
            # The device part: sinks, then the last `recent` tokens before upto, then the rest of the buffer.
            total = self.exact_length
            keep_from = start + move - self.recent
            k = torch.cat([self.keys[:, :, : self.sinks], self.keys[:, :, keep_from:total]], 2)
            v = torch.cat([self.values[:, :, : self.sinks], self.values[:, :, keep_from:total]], 2)
            self._set_exact(k, v, self.spare)
            self.n_indexed = upto
            self.buffered -= move

        def reset(self) -> None:
            raise ValueError("an offloaded layer cannot be reset; make a new cache")

        @property
        def nbytes(self) -> int:
            """(device bytes, CPU bytes) of the storage, spare rows included."""
            return self._exact_k.nbytes + self._exact_v.nbytes, self.cpu_keys.nbytes + self.cpu_values.nbytes

    return GrowingLayer, OffloadLayer


def transformers_cache(model):
    """transformers' own ``DynamicCache`` for ``model`` (its layers concatenate)."""
    from transformers import DynamicCache  # heavy: transformers loads in seconds; only model code needs it

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()


def decoding_cache(model, half_layers=(), dtype=None):
    """A transformers cache for ``model`` whose layers are :class:`GrowingLayer`: the layers
    ``half_layers`` store their keys and values in ``dtype`` (a torch dtype; None: the model's)
    from the first token on, the others in the model's dtype. A layer of another kind (a
    sliding window) is left as transformers made it."""
    cache = transformers_cache(model)
    Growing = layer_classes()[0]
    _fill_layers(cache, model.config.num_hidden_layers)
    half = set(half_layers)
    for layer in range(len(cache.layers)):
        if type(cache.layers[layer]) is _dynamic_layer():
            cache.layers[layer] = Growing(dtype if layer in half else None)
    return cache


def _fill_layers(cache, count: int) -> None:
    """Caches made without a config add their layers lazily: make them now."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError("this transformers version's cache has no per-layer objects; upgrade transformers to 5.x")
    make = getattr(cache, "layer_class_to_replicate", None) or _dynamic_layer()
    while len(layers) < count:
        layers.append(make())


def half_copy(cache, half_layers, dtype):
    """A new cache holding ``cache``'s tokens: layers ``half_layers`` copied into
    :class:`GrowingLayer` storage of ``dtype``, the others sharing ``cache``'s tensors (a
    ``DynamicLayer`` appends by concatenation, so the original is never written). ``cache`` is
    left as it was."""
    Growing = layer_classes()[0]
    out = copy.copy(cache)
    out.layers = []
    half = set(half_layers)
    for i, layer in enumerate(cache.layers):
        filled = layer.is_initialized and layer.keys is not None and layer.keys.numel()
        if filled and (i in half or isinstance(layer, Growing)):
            # A GrowingLayer writes in place, so even one kept in its dtype is copied, not shared.
            new = Growing(dtype if i in half else layer.keys.dtype)
            new.update(layer.keys, layer.values)
        else:
            new = copy.copy(layer)
        out.layers.append(new)
    return out


def offload_layers(cache, layers, *, sinks: int, recent: int, kv_dtype: str, spare: int) -> dict | None:
    """Move ``layers`` of a prefilled ``cache`` into MagicPIG's CPU placement: each becomes an
    :class:`OffloadLayer` (its exact tokens on the model's device, its indexed tokens on the CPU,
    in ``kv_dtype``). A layer already offloaded, not filled, or holding no more than
    ``sinks + recent`` tokens (nothing to sample: it stays whole on the device) is left as it is.

    Parameters
    ----------
    cache : transformers.Cache
        Filled by a prefill; its chosen layers are replaced in place.
    layers : iterable of int
        The layers the decoder samples.
    sinks, recent : int >= 0
        Tokens at the start and at the end of the prefill that stay on the device, read exactly.
    kv_dtype : str, one of KV_DTYPES
        The CPU copy's dtype (``"model"``: the keys' own).
    spare : int >= 1
        Device rows kept free for the decode buffer.

    Returns
    -------
    dict or None
        None where no layer moved; otherwise what moved: ``layers``, ``device``,
        ``device_bytes_before`` / ``_after`` / ``_freed``, ``cpu_bytes`` (and, on a GPU, the
        ``cuda_allocated_*`` figures the allocator reports).
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    OffloadLayer = layer_classes()[1]
    moved, device, report = [], None, None
    for layer in layers:
        current = cache.layers[layer]
        keys = getattr(current, "keys", None)
        if isinstance(current, OffloadLayer) or keys is None or keys.shape[2] <= sinks + recent:
            continue
        device = keys.device
        if report is None:  # the storage before the first move
            allocated = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
            report = {"device_bytes_before": storage_bytes(cache)["device"], "cuda_allocated_before": allocated}
        dtype = resolve_kv_dtype(kv_dtype, keys.dtype)
        cache.layers[layer] = OffloadLayer(keys, current.values, sinks=sinks, recent=recent, dtype=dtype, spare=spare)
        del current, keys  # the device copy goes once the cache no longer holds it
        moved.append(layer)
    if report is None:
        return None
    after = storage_bytes(cache)
    report.update(
        device=str(device),
        device_bytes_after=after["device"],
        cpu_bytes=after["cpu"],
        device_bytes_freed=report["device_bytes_before"] - after["device"],
        layers=moved,
    )
    if device.type == "cuda":
        report["cuda_allocated_after"] = torch.cuda.memory_allocated(device)
        report["cuda_allocated_freed"] = report["cuda_allocated_before"] - report["cuda_allocated_after"]
    return report


def storage_bytes(cache) -> dict:
    """Bytes the cache's layers hold: ``{"device": ..., "cpu": ...}``; ``device`` is the
    model's device (the CPU for a CPU model, whose offloaded layers count in ``cpu``)."""
    device = cpu = 0
    Growing, Offload = layer_classes()
    for layer in cache.layers:
        if isinstance(layer, Offload):
            on_device, on_cpu = layer.nbytes
            device += on_device
            cpu += on_cpu
        elif isinstance(layer, Growing):
            device += layer.nbytes
        elif getattr(layer, "keys", None) is not None:
            device += layer.keys.nbytes + layer.values.nbytes
    return {"device": device, "cpu": cpu}
