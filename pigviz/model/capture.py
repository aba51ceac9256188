"""Record what a real model's attention reads: post-RoPE queries, keys and values.

``capture`` runs ONE prefill of the real model. Its attention implementation is swapped for a
registered wrapper that calls transformers' own sdpa function unchanged and copies, for each
layer, the keys and values of all N positions and the queries of the last T positions (plus
the attention output sdpa produced for those queries, so anyone can check that
``softmax(q k^T / sqrt(d)) v`` over the stored tensors gives back what the model computed).
The causal mask is the one sdpa gets: the mask function registered for the wrapper's name is
sdpa's own.

A ``Capture`` is saved as ONE safetensors file (no pickle): tensors ``queries``, ``keys``,
``values``, ``query_positions``, optional ``outputs`` and ``extra.<name>``; metadata is a
str->str dict whose values are JSON. The header is rewritten with sorted keys, because
safetensors writes its metadata map in a random order and the shipped file must be
reproducible byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import pigviz
from pigviz._util.io import atomic_path
from pigviz._util.validate import check_int
from pigviz.model import loading as models
from pigviz.model import texts
from pigviz.model.loading import resolve_dtype

if TYPE_CHECKING:  # annotations only; torch itself loads lazily
    import torch

__all__ = ["Capture", "capture", "save_capture", "load_capture", "CAPTURE_ATTN_IMPLEMENTATION", "REQUIRED_METADATA"]

CAPTURE_ATTN_IMPLEMENTATION = "pigviz_capture_sdpa"
FORMAT = "pigviz-capture-v1"
REQUIRED_METADATA = (
    "format",
    "model_name",
    "model_kind",
    "model_revision",
    "text_source",
    "text_sha256",
    "token_ids_sha256",
    "n_tokens",
    "last",
    "layers",
    "kv_heads",
    "n_model_layers",
    "n_model_heads",
    "n_model_kv_heads",
    "head_dim",
    "scaling",
    "dtype",
    "pigviz_version",
    "torch_version",
    "transformers_version",
    "python_version",
)


@dataclass
class Capture:
    """Post-RoPE attention inputs of one prefill.

    queries ``(layers, Hq, T, d)``; keys and values ``(layers, Hkv, N, d)``; query_positions
    ``(T,)``. ``metadata["layers"]`` lists the model layer of each row, ``metadata["kv_heads"]``
    the model KV heads kept in each of those layers. Query row ``j`` of a layer belongs to
    kept KV head ``j // group_size``, the same GQA rule as the model's ``h // (H // Hkv)``.
    """

    queries: "torch.Tensor"
    keys: "torch.Tensor"
    values: "torch.Tensor"
    query_positions: "torch.Tensor"
    metadata: dict
    outputs: "torch.Tensor | None" = None
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    # -- shape bookkeeping -----------------------------------------------------------------
    @property
    def layers(self) -> list[int]:
        return list(self.metadata["layers"])

    @property
    def kv_heads(self) -> list[list[int]]:
        return [list(h) for h in self.metadata["kv_heads"]]

    @property
    def group_size(self) -> int:
        return self.metadata["n_model_heads"] // self.metadata["n_model_kv_heads"]

    @property
    def query_heads(self) -> list[list[int]]:
        g = self.group_size
        return [[k * g + j for k in heads for j in range(g)] for heads in self.kv_heads]

    @property
    def n_tokens(self) -> int:
        return int(self.keys.shape[2])

    @property
    def last(self) -> int:
        return int(self.queries.shape[2])

    @property
    def scaling(self) -> float:
        return float(self.metadata["scaling"])

    def validate(self) -> None:
        """Raise ValueError unless tensors and metadata describe the same shapes."""
        missing = [k for k in REQUIRED_METADATA if k not in self.metadata]
        if missing:
            raise ValueError(f"capture metadata lacks required keys: {', '.join(missing)}")
        if self.metadata["format"] != FORMAT:
            raise ValueError(f"capture format must be {FORMAT!r}, got {self.metadata['format']!r}")
        q, k, v, pos = self.queries, self.keys, self.values, self.query_positions
        if q.ndim != 4 or k.ndim != 4 or tuple(k.shape) != tuple(v.shape):
            raise ValueError(
                f"queries and keys/values must be 4-D with keys.shape == values.shape; got "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )
        layers, kv_heads, d = self.metadata["layers"], self.metadata["kv_heads"], self.metadata["head_dim"]
        n_kv = {len(h) for h in kv_heads}
        expected_q = (len(layers), k.shape[1] * self.group_size, self.metadata["last"], d)
        expected_k = (len(layers), next(iter(n_kv), 0), self.metadata["n_tokens"], d)
        if len(kv_heads) != len(layers) or len(n_kv) != 1:
            raise ValueError("metadata kv_heads must list the same number of KV heads for every kept layer")
        if tuple(k.shape) != expected_k or tuple(q.shape) != expected_q:
            raise ValueError(
                f"shapes disagree with metadata: keys {tuple(k.shape)} (expected {expected_k}), "
                f"queries {tuple(q.shape)} (expected {expected_q})"
            )
        if tuple(pos.shape) != (q.shape[2],) or int(pos[-1]) != k.shape[2] - 1:
            raise ValueError("query_positions must hold the last T positions, ending at n_tokens - 1")
        if self.outputs is not None and tuple(self.outputs.shape) != tuple(q.shape):
            raise ValueError(f"outputs must have the queries' shape {tuple(q.shape)}, got {tuple(self.outputs.shape)}")

    # -- derived views ---------------------------------------------------------------------
    def subset(self, layers=None, kv_heads=None) -> "Capture":
        """Keep some model layers and, per layer, some model KV heads (with their query heads).

        ``kv_heads``: a list of KV head indices used for every kept layer, or one such list
        per kept layer.
        """
        layers = self.layers if layers is None else [int(x) for x in layers]
        unknown = [x for x in layers if x not in self.layers]
        if unknown or not layers or len(set(layers)) != len(layers):
            raise ValueError(f"layers must be distinct entries of {self.layers}; got {layers}")
        rows = [self.layers.index(x) for x in layers]
        if kv_heads is None:
            per_layer = [self.kv_heads[r] for r in rows]
        elif all(isinstance(h, (int, np.integer)) for h in kv_heads):
            per_layer = [[int(h) for h in kv_heads]] * len(rows)
        else:
            per_layer = [[int(h) for h in hs] for hs in kv_heads]
        if len(per_layer) != len(rows) or len({len(h) for h in per_layer}) != 1 or not per_layer[0]:
            raise ValueError("kv_heads must be one non-empty list, or one list of equal length per kept layer")
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        g = self.group_size
        k_idx, q_idx = [], []
        for r, heads in zip(rows, per_layer):
            present = self.kv_heads[r]
            if any(h not in present for h in heads):
                raise ValueError(f"kv_heads for layer {self.layers[r]} must be drawn from {present}; got {heads}")
            cols = [present.index(h) for h in heads]
            k_idx.append(cols)
            q_idx.append([c * g + j for c in cols for j in range(g)])
        pick_k = lambda t: torch.stack([t[r][c] for r, c in zip(rows, k_idx)])  # noqa: E731
        pick_q = lambda t: torch.stack([t[r][c] for r, c in zip(rows, q_idx)])  # noqa: E731
        meta = dict(self.metadata, layers=layers, kv_heads=per_layer)
        return replace(
            self,
            queries=pick_q(self.queries),
            keys=pick_k(self.keys),
            values=pick_k(self.values),
            outputs=None if self.outputs is None else pick_q(self.outputs),
            metadata=meta,
        )

    def astype(self, dtype) -> "Capture":
        """Same capture with queries, keys, values and outputs stored as ``dtype`` (e.g. fp16)."""
        if dtype is None:
            raise ValueError("dtype must be one of 'float32', 'float16', 'bfloat16' (or a torch dtype), got None")
        dtype = resolve_dtype(dtype, "cpu")
        conv = lambda t: None if t is None else t.to(dtype)  # noqa: E731
        meta = dict(self.metadata, dtype=str(dtype).replace("torch.", ""))
        return replace(
            self,
            queries=conv(self.queries),
            keys=conv(self.keys),
            values=conv(self.values),
            outputs=conv(self.outputs),
            metadata=meta,
        )

    def attention_weights(self, row: int) -> "torch.Tensor":
        """Causal softmax weights ``(Hq, T, N)`` in fp32 for kept layer ``row`` (0-based row)."""
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        row = check_int("row", row, lo=0, hi=len(self.layers) - 1)
        q = self.queries[row].float()
        k = self.keys[row].float().repeat_interleave(self.group_size, dim=0)
        logits = torch.matmul(q, k.transpose(-1, -2)) * self.scaling
        future = torch.arange(self.n_tokens)[None, :] > self.query_positions[:, None]
        return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)

    def reference_outputs(self, row: int) -> "torch.Tensor":
        """``softmax(q k^T * scaling) v`` for kept layer ``row``: ``(Hq, T, d)`` in fp32."""
        weights = self.attention_weights(row)
        v = self.values[row].float().repeat_interleave(self.group_size, dim=0)
        return weights @ v


# -- the capturing attention function ----------------------------------------------------------
class _Recorder:
    def __init__(self, layers, kv_heads, n_tokens, last, config, dtype, progress):
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
        from tqdm.auto import tqdm  # heavy: progress bars only for long runs

        self.row_of = {layer: i for i, layer in enumerate(layers)}
        self.kv_heads = list(kv_heads)
        groups = config.num_attention_heads // config.num_key_value_heads
        self.q_heads = [h * groups + j for h in kv_heads for j in range(groups)]
        d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.queries = torch.empty(len(layers), len(self.q_heads), last, d, dtype=dtype)
        self.outputs = torch.empty_like(self.queries)
        self.keys = torch.empty(len(layers), len(kv_heads), n_tokens, d, dtype=dtype)
        self.values = torch.empty_like(self.keys)
        self.last, self.seen, self.scaling = last, set(), None
        self.bar = tqdm(total=config.num_hidden_layers, desc="prefill", unit="layer", disable=not progress)

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        from transformers.integrations.sdpa_attention import (
            sdpa_attention_forward,  # heavy: transformers loads in seconds; only model code needs it
        )

        output, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        row = self.row_of.get(module.layer_idx)
        if row is not None:
            # query/key/value: (1, heads, N, d); output: (1, N, Hq, d)
            self.queries[row] = query[0, self.q_heads, -self.last :]
            self.keys[row] = key[0, self.kv_heads]
            self.values[row] = value[0, self.kv_heads]
            self.outputs[row] = output[0, -self.last :, self.q_heads].transpose(0, 1)
            self.scaling = kwargs.get("scaling")
            self.seen.add(module.layer_idx)
        self.bar.update(1)
        return output, weights


_ACTIVE: list = []


def _dispatch(module, query, key, value, attention_mask, **kwargs):
    if not _ACTIVE:  # someone left the implementation switched on: behave exactly like sdpa
        from transformers.integrations.sdpa_attention import (
            sdpa_attention_forward,  # heavy: transformers loads in seconds; only model code needs it
        )

        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return _ACTIVE[-1](module, query, key, value, attention_mask, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface  # heavy: transformers loads in seconds; only model code needs it
    from transformers.masking_utils import (  # heavy: transformers loads in seconds; only model code needs it
        AttentionMaskInterface,
        sdpa_mask,
    )

    AttentionInterface.register(CAPTURE_ATTN_IMPLEMENTATION, _dispatch)
    AttentionMaskInterface.register(CAPTURE_ATTN_IMPLEMENTATION, sdpa_mask)


def capture(
    model,
    tokenizer,
    n_tokens: int = 8192,
    last: int = 64,
    text: str | None = None,
    layers=None,
    progress: bool = True,
    *,
    kv_heads=None,
    allow_long_context: bool = False,
) -> Capture:
    """One prefill of the first ``n_tokens`` tokens of ``text`` (default: ``texts.long_text()``)
    through ``model``, recording every kept layer's post-RoPE q (last ``last`` positions), k and
    v (all positions). ``layers``/``kv_heads``: model indices to keep (default all). The
    arguments are checked before anything heavy is imported or run."""
    cfg = model.config
    models.check_supported_attention(cfg, type(model).__name__)
    n_tokens = models.check_context(model, n_tokens, allow_long_context)
    last = check_int("last", last, lo=1)
    if last > n_tokens:
        raise ValueError(f"last must be at most n_tokens={n_tokens} (queries come from the context), got {last}")
    layers = _check_indices("layers", layers, cfg.num_hidden_layers)
    kv_heads = _check_indices("kv_heads", kv_heads, cfg.num_key_value_heads)

    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    import transformers  # heavy: transformers loads in seconds; only model code needs it

    if text is None:
        text, text_sha = texts.long_text()
        text_source = texts.text_source_description()
    else:
        text_sha, text_source = hashlib.sha256(str(text).encode("utf-8")).hexdigest(), "caller-supplied text"
    ids = texts.first_tokens(tokenizer, n_tokens, text)
    device = next(model.parameters()).device
    recorder = _Recorder(layers, kv_heads, n_tokens, last, cfg, next(model.parameters()).dtype, progress)

    _register()
    previous = cfg._attn_implementation
    _ACTIVE.append(recorder)
    try:
        model.set_attn_implementation(CAPTURE_ATTN_IMPLEMENTATION)
        with torch.inference_mode():
            # use_cache=False: the recorder holds the only copy of k/v; logits_to_keep=1 avoids
            # materialising n_tokens x vocab logits (1.6 GB at 8k).
            model(input_ids=ids[None].to(device), use_cache=False, logits_to_keep=1)
    finally:
        _ACTIVE.remove(recorder)
        model.set_attn_implementation(previous)
        recorder.bar.close()
    if recorder.seen != set(layers):
        raise RuntimeError(
            f"the model's attention never called the capture wrapper for layers "
            f"{sorted(set(layers) - recorder.seen)}; is it a transformers AttentionInterface model?"
        )

    source = models.model_source(model)
    meta = {
        "format": FORMAT,
        "model_name": source.name,
        "model_kind": source.kind,
        "model_revision": source.revision,
        "text_source": text_source,
        "text_sha256": text_sha,
        "token_ids_sha256": hashlib.sha256(ids.numpy().astype("<i8").tobytes()).hexdigest(),
        "n_tokens": n_tokens,
        "last": last,
        "layers": layers,
        "kv_heads": [kv_heads] * len(layers),
        "n_model_layers": cfg.num_hidden_layers,
        "n_model_heads": cfg.num_attention_heads,
        "n_model_kv_heads": cfg.num_key_value_heads,
        "head_dim": int(recorder.keys.shape[-1]),
        "scaling": float(recorder.scaling),
        "dtype": str(recorder.keys.dtype).replace("torch.", ""),
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
    }
    return Capture(
        queries=recorder.queries,
        keys=recorder.keys,
        values=recorder.values,
        query_positions=torch.arange(n_tokens - last, n_tokens),
        metadata=meta,
        outputs=recorder.outputs,
    )


_check_indices = models.check_indices  # the same check before the model loads (check_model_args)


# -- one-file storage --------------------------------------------------------------------------
def save_capture(cap: Capture, path, *, dtype=None) -> Path:
    """Write ``cap`` (optionally cast to ``dtype``) as one safetensors file, atomically."""
    from safetensors.torch import save_file  # heavy: only file I/O of captures needs it

    if dtype is not None:
        cap = cap.astype(dtype)
    tensors = {"queries": cap.queries, "keys": cap.keys, "values": cap.values, "query_positions": cap.query_positions}
    if cap.outputs is not None:
        tensors["outputs"] = cap.outputs
    tensors.update({f"extra.{name}": t for name, t in sorted(cap.extras.items())})
    tensors = {k: t.detach().cpu().contiguous() for k, t in tensors.items()}
    metadata = {k: json.dumps(cap.metadata[k], sort_keys=True) for k in sorted(cap.metadata)}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
        _canonicalise_header(tmp)
        _chmod_like_a_normal_file(tmp)
    return Path(path)


def _chmod_like_a_normal_file(path: Path) -> None:
    """The temporary file is private (0600); a saved capture should obey the umask like any other."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _canonicalise_header(path: Path) -> None:
    """Rewrite the JSON header with sorted keys; same length, so the data offsets stay valid."""
    with open(path, "r+b") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        raw = fh.read(length)
        header = json.loads(raw)
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(text) > length:
            raise RuntimeError("canonical safetensors header came out longer than the original")
        fh.seek(8)
        fh.write(text + b" " * (length - len(text)))


def load_capture(path) -> Capture:
    """Read a file written by ``save_capture``; ValueError naming the file if it is damaged."""
    from safetensors import safe_open  # heavy: only file I/O of captures needs it

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"capture file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as fh:
            raw_meta = fh.metadata() or {}
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}
    except Exception as exc:  # safetensors raises its own error types for truncated/garbled files
        raise ValueError(f"{path} is not a readable safetensors capture (truncated or corrupt?): {exc}") from None
    try:
        metadata = {k: json.loads(v) for k, v in raw_meta.items()}
        missing = [name for name in ("queries", "keys", "values", "query_positions") if name not in tensors]
        if missing:
            raise ValueError(f"missing tensors: {', '.join(missing)}")
        extras = {name[len("extra.") :]: t for name, t in tensors.items() if name.startswith("extra.")}
        return Capture(
            queries=tensors["queries"],
            keys=tensors["keys"],
            values=tensors["values"],
            query_positions=tensors["query_positions"],
            metadata=metadata,
            outputs=tensors.get("outputs"),
            extras=extras,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a valid pigviz capture: {exc}") from None
