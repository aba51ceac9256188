"""Model shapes: the handful of integers that decide what a cached token costs.

A KV-cache budget needs only layers, KV heads and head size; parameter counts and
hidden sizes come along because the fetch-versus-recompute trade needs them. A shape
comes from the shipped table (``known_models.json``), from a Hugging Face
``config.json`` (path, directory or dict), or from a ``transformers`` config object.

``max_context`` is the context a model is documented for: the shipped table's ``context_length``
(from the model card) where it has one, else the config's ``max_position_embeddings``. The field
``max_position_embeddings`` keeps the config's value (they differ for Qwen2.5-1.5B: 32,768
documented, 131,072 in its config).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pigviz._util.validate import check_int

__all__ = [
    "ModelShape",
    "known_models",
    "get_model_shape",
    "shape_from_config",
    "count_params",
]

# Different model families spell the same field differently; first match wins.
_FIELD_ALIASES = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "max_context": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
}
# Families whose q/k/v projections carry a bias although their config does not say so.
_QKV_BIAS_FAMILIES = {"qwen2"}


@dataclass(frozen=True)
class ModelShape:
    """The attention geometry of a decoder-only transformer."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    params: int | None  # total parameters; None when the config cannot say
    max_context: int | None  # the documented context (else max_position_embeddings); None when unknown
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    sliding_window: int | None = None
    hf_id: str = ""
    max_position_embeddings: int | None = None  # the config's field, as written there

    def __post_init__(self):
        for field in ("layers", "attention_heads", "kv_heads", "head_dim", "hidden_size", "max_context"):
            if field != "max_context" or self.max_context is not None:
                check_int(f"{self.name or 'model'}.{field}", getattr(self, field), 1)
        if self.kv_heads > self.attention_heads or self.attention_heads % self.kv_heads:
            raise ValueError(
                f"{self.name}: kv_heads ({self.kv_heads}) must divide attention_heads ({self.attention_heads})"
            )

    @property
    def query_heads_per_kv_head(self) -> int:
        """How many query heads share one cached key/value head (1 = no GQA)."""
        return self.attention_heads // self.kv_heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """Bytes one token adds to the cache: K and V, in every layer and KV head."""
        dtype_bytes = check_int("dtype_bytes", dtype_bytes, 1, 8)
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def with_kv_heads(self, kv_heads: int) -> "ModelShape":
        """The same model with a different number of KV heads (e.g. without GQA)."""
        return dataclasses.replace(self, kv_heads=kv_heads, name=f"{self.name} ({kv_heads} KV heads)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def count_params(shape: ModelShape) -> int:
    """Parameters of a Llama-style decoder (gated MLP, RMSNorm, optional q/k/v bias).

    Embeddings, an untied output head, per layer the four attention projections, three
    MLP matrices and two norm vectors, and one final norm.
    """
    if shape.intermediate_size is None or shape.vocab_size is None:
        raise ValueError(f"{shape.name}: count_params needs intermediate_size and vocab_size")
    h, q_width, kv_width = shape.hidden_size, shape.attention_heads * shape.head_dim, shape.kv_heads * shape.head_dim
    attention = 2 * h * q_width + 2 * h * kv_width
    if shape.attention_bias:
        attention += q_width + 2 * kv_width
    per_layer = attention + 3 * h * shape.intermediate_size + 2 * h
    embeddings = shape.vocab_size * h * (1 if shape.tie_word_embeddings else 2)
    return embeddings + shape.layers * per_layer + h


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict, ...]:
    text = resources.files("pigviz.memory").joinpath("known_models.json").read_text(encoding="utf-8")
    return tuple(json.loads(text)["models"])


def known_models() -> list[str]:
    """Canonical names of the models in the shipped table."""
    return [entry["name"] for entry in _table()]


def _normalise(name: str) -> str:
    name = name.strip().lower().rsplit("/", 1)[-1]
    name = re.sub(r"[-_ ]instruct$", "", name)  # instruct checkpoints share the base shape
    return re.sub(r"[-_ ]", "", name)


@functools.lru_cache(maxsize=1)
def _name_index() -> dict[str, dict]:
    index = {}
    for entry in _table():
        for alias in [entry["name"], entry.get("hf_id", ""), *entry.get("aliases", [])]:
            if alias:
                index[_normalise(alias)] = entry
    return index


def _first(config: Mapping, key: str, default=None):
    for candidate in _FIELD_ALIASES[key]:
        if config.get(candidate) is not None:
            return config[candidate]
    return default


def _config_int(config: Mapping, key: str, default=None):
    """The first alias of ``key`` present, checked as a positive integer under the name the
    config actually uses, so ``num_attention_heads: 0`` is reported as that field."""
    for candidate in _FIELD_ALIASES.get(key, (key,)):
        if config.get(candidate) is not None:
            return check_int(candidate, config[candidate], 1)
    return default


def shape_from_config(config, name: str | None = None) -> ModelShape:
    """Build a shape from a config mapping or a ``transformers.PretrainedConfig``."""
    if hasattr(config, "to_dict") and not isinstance(config, Mapping):
        config = config.to_dict()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping or a PretrainedConfig, got {type(config).__name__}")
    if isinstance(config.get("text_config"), Mapping) and _first(config, "layers") is None:
        # multimodal checkpoints keep the language model's shape one level down
        config = {**config["text_config"], "_name_or_path": config.get("_name_or_path", "")}

    missing = [key for key in ("layers", "attention_heads", "hidden_size") if _first(config, key) is None]
    if missing:
        wanted = ", ".join(_FIELD_ALIASES[key][0] for key in missing)
        raise ValueError(f"config is missing {wanted}; cannot work out the attention shape")
    heads = _config_int(config, "attention_heads")
    hidden = _config_int(config, "hidden_size")
    head_dim = _config_int(config, "head_dim") or hidden // heads
    if head_dim < 1:
        raise ValueError(
            f"hidden_size ({hidden}) must be at least num_attention_heads ({heads}) when the config gives no head_dim"
        )
    model_type = str(config.get("model_type", ""))
    bias = config.get("attention_bias")
    if bias is None:
        bias = model_type in _QKV_BIAS_FAMILIES
    name = name or config.get("name") or config.get("_name_or_path") or model_type or "custom model"
    shape = ModelShape(
        name=str(name),
        layers=_config_int(config, "layers"),
        attention_heads=heads,
        kv_heads=_config_int(config, "kv_heads", heads),
        head_dim=head_dim,
        hidden_size=hidden,
        params=None,
        max_context=_config_int(config, "context_length") or _config_int(config, "max_context"),
        max_position_embeddings=_config_int(config, "max_context"),
        intermediate_size=_config_int(config, "intermediate_size"),
        vocab_size=_config_int(config, "vocab_size"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(bias),
        sliding_window=_config_int(config, "sliding_window") if config.get("use_sliding_window", True) else None,
        hf_id=str(config.get("hf_id") or config.get("_name_or_path") or ""),
    )
    params = _config_int(config, "params")
    if params is None and shape.intermediate_size and shape.vocab_size:
        params = count_params(shape)
    return dataclasses.replace(shape, params=params)


def _load_config_path(path: Path) -> ModelShape:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"model config not found: {path}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"model config {path} is not valid JSON: {exc}") from None
    default_name = path.parent.name if path.name == "config.json" else path.stem
    return shape_from_config(config, name=config.get("_name_or_path") or default_name)


def get_model_shape(model) -> ModelShape:
    """Resolve a known name (case-insensitive, aliases allowed), a config.json path or
    directory, a config mapping, a ``PretrainedConfig`` or a ``ModelShape``."""
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, os.PathLike):
        return _load_config_path(Path(model))
    if isinstance(model, str):
        entry = _name_index().get(_normalise(model))
        if entry is not None:
            return shape_from_config(entry, name=entry["name"])
        path = Path(model).expanduser()
        if model.endswith(".json") or path.exists():
            return _load_config_path(path)
        raise ValueError(
            f"model must be a known name or an existing config.json path; {model!r} is neither. "
            f"Known models: {', '.join(known_models())}"
        )
    return shape_from_config(model)
