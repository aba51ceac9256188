"""The small real-model capture that ships in ``pigviz/data/``, so lessons need no model load.

What ships (``pigviz/data/smollm2_8k_capture.safetensors``, fp16, about 8.6 MB):

* One prefill of the first 8192 tokens of ``texts.long_text()`` through SmolLM2-135M (fp32).
* Four (layer, KV head) pairs, each with all 8192 post-RoPE keys and values, the last 64
  queries of the three query heads that share that KV head, and the attention output the
  model computed for them. Layers are fixed: 2 (early, almost no weight on position 0),
  then 13, 19 and 25 (middle to late, where position 0 is an attention sink). In each, the
  KV head kept is the one whose query heads put the most mean weight on position 0 --
  computed from the full capture, not typed in.
* All-layer summaries from the full fp32 capture: ``sink_weight`` (30 x 9), the mean weight
  that the last 64 queries put on position 0, per (layer, query head); ``key_norm_pos0`` and
  ``key_norm_median`` (30 x 3), per (layer, KV head).

``pigviz/data/manifest.json`` records each file's sha256, size, contents, the command that made it
and the library versions. ``pigviz data regenerate --check`` rebuilds it and checks that it agrees with the shipped file
to the precision it is stored in (bit for bit only on the CPU it was made on).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pigviz._util.io import sha256_file, write_json_atomic
from pigviz.model.capture import capture, load_capture, save_capture
from pigviz.model.loading import load_model

if TYPE_CHECKING:  # annotations only; torch itself loads lazily
    import torch

__all__ = [
    "CAPTURE_FILE",
    "SHIPPED_LAYERS",
    "SHIPPED_N_TOKENS",
    "SHIPPED_LAST",
    "SHIPPED_MODEL",
    "data_dir",
    "manifest_path",
    "read_manifest",
    "check_shipped",
    "load_shipped_capture",
    "sink_weights",
    "key_norm_stats",
    "choose_kv_heads",
    "build_shipped_capture",
    "regenerate_shipped",
    "compare_captures",
    "largest_difference",
]

CAPTURE_FILE = "smollm2_8k_capture.safetensors"
SHIPPED_MODEL = "smollm2-135m"
SHIPPED_N_TOKENS = 8192
SHIPPED_LAST = 64
SHIPPED_LAYERS = (2, 13, 19, 25)
REGENERATE_COMMAND = "pigviz data regenerate"
MANIFEST_FORMAT = "pigviz-data-manifest-v1"
_ENTRY_KEYS = ("sha256", "bytes", "what", "command", "pigviz_version", "torch_version", "transformers_version")


def data_dir() -> Path:
    """``$PIGVIZ_DATA_DIR`` if set, else the package's own ``pigviz/data/`` folder.

    The data are package data, so a wheel or a ``pip install git+...`` carries them; in a clone
    with an editable install this is the repository's ``pigviz/data/``, which is where
    ``pigviz data regenerate`` and the benchmarks write."""
    override = os.environ.get("PIGVIZ_DATA_DIR")
    if override:
        return Path(override).expanduser()
    # files() gives a real folder for an installed or editable package; a zipped install would
    # need as_file(), but the data are read by path (safetensors, json) and pip never zips.
    return Path(str(resources.files("pigviz").joinpath("data")))


def manifest_path(directory=None) -> Path:
    return Path(directory or data_dir()) / "manifest.json"


def read_manifest(directory=None) -> dict:
    """Parse ``manifest.json``; ValueError naming the file if it lacks the expected fields."""
    path = manifest_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"data manifest {path} does not exist; run `{REGENERATE_COMMAND}`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path} must be a {MANIFEST_FORMAT} manifest (a JSON object) with a 'files' table")
    for name, entry in files.items():
        if not isinstance(entry, dict):
            raise ValueError(
                f"{path}: entry {name!r} must be an object with {', '.join(_ENTRY_KEYS)}, got {type(entry).__name__}"
            )
        missing = [k for k in _ENTRY_KEYS if k not in entry]
        if missing:
            raise ValueError(f"{path}: entry {name!r} lacks {', '.join(missing)}")
    return manifest


def check_shipped(directory=None) -> list[str]:
    """Problems found comparing every file in the manifest with what is on disk (empty = fine)."""
    directory = Path(directory or data_dir())
    problems = []
    for name, entry in read_manifest(directory)["files"].items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            problems.append(f"{path} does not match its manifest sha256/size")
    return problems


def verified_path(name: str, command: str | None = None, *, verify: bool = True) -> Path:
    """Path of the shipped file ``name``; with ``verify``, it must exist and match its manifest
    sha256. Errors say how to re-create it (``command``, else the manifest's own command)."""
    path = data_dir() / name
    if not verify:
        return path
    entry = read_manifest()["files"].get(name)
    if entry is None:
        raise ValueError(f"{manifest_path()} has no entry for {name}" + (f"; run `{command}`" if command else ""))
    command = command or entry.get("command", "see pigviz/data/manifest.json")
    if not path.is_file():
        raise FileNotFoundError(f"shipped file {path} is missing; restore it from git or run `{command}`")
    if sha256_file(path) != entry["sha256"]:
        raise ValueError(
            f"{path} does not match its manifest sha256 ({manifest_path()}); restore it from git or run `{command}`"
        )
    return path


def load_shipped_capture(*, verify: bool = True):
    """The shipped ``Capture`` (fp16 tensors, fp32 summaries in ``.extras``)."""
    return load_capture(verified_path(CAPTURE_FILE, REGENERATE_COMMAND, verify=verify))


# -- summaries of a full capture ---------------------------------------------------------------
def sink_weights(cap) -> "torch.Tensor":
    """Mean causal-softmax weight on position 0 over the captured queries: ``(layers, Hq)`` fp32."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    return torch.stack([cap.attention_weights(row)[:, :, 0].mean(dim=1) for row in range(len(cap.layers))])


def key_norm_stats(cap) -> tuple["torch.Tensor", "torch.Tensor"]:
    """``(norm of key 0, median key norm)``, each ``(layers, Hkv)`` fp32."""
    norms = cap.keys.float().norm(dim=-1)
    return norms[:, :, 0].contiguous(), norms.median(dim=-1).values.contiguous()


def choose_kv_heads(sink_weight, group_size: int, layers) -> list[list[int]]:
    """Per layer in ``layers``, the KV head whose query heads put the most weight on position 0."""
    per_kv = sink_weight.reshape(sink_weight.shape[0], -1, group_size).mean(dim=-1)
    return [[int(per_kv[layer].argmax())] for layer in layers]


def build_shipped_capture(model, tokenizer, *, progress: bool = True):
    """Full fp32 capture -> all-layer summaries -> the four chosen pairs in fp16."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    full = capture(model, tokenizer, n_tokens=SHIPPED_N_TOKENS, last=SHIPPED_LAST, progress=progress)
    sink = sink_weights(full)
    key0, key_median = key_norm_stats(full)
    small = full.subset(layers=list(SHIPPED_LAYERS), kv_heads=choose_kv_heads(sink, full.group_size, SHIPPED_LAYERS))
    del full
    small = small.astype(torch.float16)
    small.extras = {"sink_weight": sink, "key_norm_pos0": key0, "key_norm_median": key_median}
    return small


# Regenerating on another CPU gives the same data to the precision it is stored in, not the same
# bits: floating-point kernels sum in another order. How far apart two honest rebuilds can be:
#
# * fp32 drift. The model runs in fp32 (unit roundoff u32 = 2**-24). Reordering a sum of n terms
#   moves it by about sqrt(n) * u32 relative (the probabilistic bound of Higham & Mary, 2019). Each
#   of the network's 30 layers runs about four reductions in sequence (the attention scores, the
#   softmax-weighted mix of values over up to 8,192 positions, the output projection, the MLP),
#   and the residual stream carries each layer's perturbation into the next, so after the whole
#   depth the fp32 activations can drift by up to
#       DRIFT = 4 * 30 * sqrt(8192) * 2**-24 = 6.5e-4 (relative).
#   Measured rebuilds drift far less; the bound is what any CPU may do, not what one did.
# * fp16 storage. The file stores each value rounded to fp16, whose neighbouring numbers near x
#   are at most 2**-10 |x| apart (10 fraction bits). Two rebuilds whose fp32 values are x and
#   x + dx store values at most |dx| + 2**-10 |x| apart (each rounding moves by half a step).
#
# Per row (one key, one query, one value or one output vector of 64 numbers), summing those over
# the row's elements: |stored - rebuilt| <= (DRIFT + 2**-10) |row| = 1.6e-3 |row|. An element
# that is a small difference of large terms may move by many of its own fp16 steps; measured on
# its row's scale it cannot move by more than this.
# Per tensor, rounding flips are rare and scattered: an element's two roundings differ (by one
# step) only when the drift carries it across a rounding midpoint, with probability about
# |dx| / step, so the mean squared difference is at most |dx| * step + dx**2, and the tensor's
# normwise relative difference at most sqrt(DRIFT * 2**-10 + DRIFT**2) = 1.0e-3.
# Noise of 1e-2 relative on one head, or two key rows swapped, is well outside either bound.
# The fp32 summaries (means of softmax weights, key norms) are computed from the fp32
# activations and never stored in fp16: they may drift by DRIFT, relative, plus a tiny absolute
# floor for weights that are almost exactly 0.
FP16_STEP = 2.0**-10
FP32_DRIFT = 4 * 30 * 8192**0.5 * 2.0**-24
ROW_RTOL = FP32_DRIFT + FP16_STEP
TENSOR_RTOL = (FP32_DRIFT * FP16_STEP + FP32_DRIFT**2) ** 0.5
FP32_SUMMARY_RTOL = FP32_DRIFT
FP32_SUMMARY_ATOL = 1e-7
# What must be identical: the metadata that says what was captured.
IDENTICAL_METADATA = ("text_sha256", "token_ids_sha256", "n_tokens", "last", "model_revision")


def _compare_fp16(name: str, old, new) -> tuple[dict, list[str]]:
    """Normwise per tensor and per row (the last axis), relative to the shipped tensor's scale."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    a, b = old.double(), new.double()
    diff = a - b
    scale = float(a.norm())
    tensor_rel = float(diff.norm()) / scale if scale > 0 else float(diff.norm() > 0)
    rows_a, rows_d = a.reshape(-1, a.shape[-1]), diff.reshape(-1, a.shape[-1])
    row_scale = rows_a.norm(dim=1)
    row_rel = rows_d.norm(dim=1) / row_scale.clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(row_rel.argmax())
    entry = {
        "normwise_rel": tensor_rel,
        "worst_row_rel": float(row_rel[worst]),
        "worst_row": [int(i) for i in _unravel(worst, a.shape[:-1])],
        "max_abs": float(diff.abs().max()),
        "differing_fraction": float((diff != 0).double().mean()),
    }
    problems = []
    if tensor_rel > TENSOR_RTOL:
        problems.append(f"{name}: differs by {tensor_rel:.1e} normwise relative (at most {TENSOR_RTOL:.1e} allowed)")
    if entry["worst_row_rel"] > ROW_RTOL:
        bad = int((row_rel > ROW_RTOL).sum())
        problems.append(
            f"{name}: {bad} row(s) differ beyond {ROW_RTOL:.1e} of their own norm, the worst at index "
            f"{tuple(entry['worst_row'])} by {entry['worst_row_rel']:.1e}"
        )
    return entry, problems


def _unravel(flat: int, shape) -> list[int]:
    out = []
    for size in reversed(tuple(shape)):
        out.append(flat % size)
        flat //= size
    return out[::-1]


def compare_captures(shipped, rebuilt) -> dict:
    """How far a rebuilt capture is from the shipped one, tensor by tensor.

    Returns ``{"within_precision": bool, "problems": [...], "tensors": {name: {...}}}``. Every fp16
    tensor must lie within ``TENSOR_RTOL`` of the shipped one normwise and each of its rows within
    ``ROW_RTOL`` of that row's norm; every fp32 summary within ``FP32_SUMMARY_RTOL`` relative (plus
    ``FP32_SUMMARY_ATOL``); and the metadata that says what was captured (text, token ids, layers,
    heads) must be identical. The comment above these constants derives them. Each problem names
    its tensor."""
    problems, report = [], {}
    for key in IDENTICAL_METADATA:
        if shipped.metadata.get(key) != rebuilt.metadata.get(key):
            problems.append(
                f"metadata {key}: shipped {shipped.metadata.get(key)!r}, rebuilt {rebuilt.metadata.get(key)!r}"
            )
    if shipped.layers != rebuilt.layers or shipped.kv_heads != rebuilt.kv_heads:
        problems.append(
            f"layers/KV heads: shipped {shipped.layers}/{shipped.kv_heads}, rebuilt {rebuilt.layers}/{rebuilt.kv_heads}"
        )
    pairs = {
        name: (getattr(shipped, name), getattr(rebuilt, name)) for name in ("queries", "keys", "values", "outputs")
    }
    pairs.update({f"extra.{name}": (t, rebuilt.extras.get(name)) for name, t in shipped.extras.items()})
    for name, (old, new) in pairs.items():
        if old is None and new is None:
            continue
        if old is None or new is None or old.shape != new.shape or old.dtype != new.dtype:
            problems.append(f"{name}: shipped {_describe(old)}, rebuilt {_describe(new)}")
            continue
        if old.dtype.itemsize == 2:
            entry, found = _compare_fp16(name, old, new)
        else:
            diff = (old.double() - new.double()).abs()
            rel = diff / old.double().abs().clamp_min(FP32_SUMMARY_ATOL)
            entry = {"max_rel": float(rel.max()), "differing_fraction": float((diff > 0).double().mean())}
            found = []
            if bool((diff > FP32_SUMMARY_RTOL * old.double().abs() + FP32_SUMMARY_ATOL).any()):
                found.append(
                    f"{name}: differs by {entry['max_rel']:.1e} relative (at most {FP32_SUMMARY_RTOL:.1e} allowed)"
                )
        problems.extend(found)
        report[name] = entry
    return {"within_precision": not problems, "problems": problems, "tensors": report}


def _describe(t) -> str:
    return "nothing" if t is None else f"{tuple(t.shape)} {t.dtype}"


def regenerate_shipped(out_dir=None, *, check: bool = False, progress: bool = True) -> dict:
    """Rebuild the shipped capture.

    ``check=True`` writes nothing: it compares the rebuilt capture with the shipped file tensor by
    tensor (``compare_captures``) and its sha256 with the manifest. Otherwise the file and the
    manifest are (re)written in ``out_dir`` (default: ``data_dir()``). Returns ``{"path",
    "sha256", "expected", "match", "within_precision", "comparison"}``: ``match`` is bit-for-bit
    equality, which holds only on the CPU the file was made on; ``within_precision`` is what a
    check on any machine should ask for."""
    if not check and out_dir is not None and not Path(out_dir).is_dir():
        raise FileNotFoundError(f"out_dir must be an existing folder, got {str(out_dir)!r}")  # before the load
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    expected = None
    if manifest_path().is_file():
        expected = read_manifest()["files"].get(CAPTURE_FILE, {}).get("sha256")
    model, tokenizer = load_model(SHIPPED_MODEL, device="cpu", progress=progress)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        cap = build_shipped_capture(model, tokenizer, progress=progress)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
    comparison = None
    if (data_dir() / CAPTURE_FILE).is_file():
        comparison = compare_captures(load_shipped_capture(verify=False), cap)

    def result(path, digest):
        return {
            "path": path,
            "sha256": digest,
            "expected": expected,
            "match": digest == expected,
            "within_precision": bool(comparison and comparison["within_precision"]),
            "comparison": comparison,
        }

    if check:
        with tempfile.TemporaryDirectory(prefix="pigviz-regen-") as tmp:
            return result(None, sha256_file(save_capture(cap, Path(tmp) / CAPTURE_FILE)))

    directory = Path(out_dir or data_dir())
    path = save_capture(cap, directory / CAPTURE_FILE)
    digest = sha256_file(path)
    manifest = _manifest(cap, path, digest)
    if manifest_path().is_file():  # keep the entries of the other shipped files (e.g. study results)
        manifest["files"].update(
            {name: entry for name, entry in read_manifest()["files"].items() if name != CAPTURE_FILE}
        )
    write_json_atomic(manifest_path(directory), manifest)
    return result(str(path), digest)


def largest_difference(comparison: dict) -> str:
    """One line: the fp16 tensor with the largest difference, normwise and in its worst row, each
    beside the bound it must stay under, and the fp32 summary with the largest relative one."""
    if not comparison or not comparison["tensors"]:
        return "nothing compared"
    fp16 = {n: e for n, e in comparison["tensors"].items() if "normwise_rel" in e}
    fp32 = {n: e for n, e in comparison["tensors"].items() if "normwise_rel" not in e}
    parts = []
    if fp16:
        name = max(fp16, key=lambda n: fp16[n]["normwise_rel"] / TENSOR_RTOL)
        e = fp16[name]
        parts.append(
            f"fp16 {name}: {e['normwise_rel']:.1e} normwise (bound {TENSOR_RTOL:.1e}), worst row "
            f"{e['worst_row_rel']:.1e} of its norm (bound {ROW_RTOL:.1e}); "
            f"{100 * e['differing_fraction']:.1f}% of elements differ"
        )
    if fp32:
        name = max(fp32, key=lambda n: fp32[n]["max_rel"])
        parts.append(f"fp32 {name}: {fp32[name]['max_rel']:.1e} relative (bound {FP32_SUMMARY_RTOL:.1e})")
    return "; ".join(parts)


def _manifest(cap, path: Path, digest: str) -> dict:
    meta = cap.metadata
    pairs = ", ".join(f"layer {layer} KV head {heads[0]}" for layer, heads in zip(cap.layers, cap.kv_heads))
    what = (
        f"SmolLM2-135M prefill of the first {meta['n_tokens']} tokens of the stdlib reference topics "
        f"(pigviz.model.texts.long_text): post-RoPE keys and values of all positions and the last "
        f"{meta['last']} queries (with the model's attention outputs) for {pairs}, fp16; plus fp32 "
        f"all-layer summaries sink_weight (layers x query heads) and key_norm_pos0/key_norm_median "
        f"(layers x KV heads) from the full fp32 capture."
    )
    entry = {
        "sha256": digest,
        "bytes": path.stat().st_size,
        "what": what,
        "command": REGENERATE_COMMAND,
        "pigviz_version": meta["pigviz_version"],
        "torch_version": meta["torch_version"],
        "transformers_version": meta["transformers_version"],
        "python_version": sys.version.split()[0],
        "model_revision": meta["model_revision"],
        "text_sha256": meta["text_sha256"],
        "token_ids_sha256": meta["token_ids_sha256"],
        "layers": cap.layers,
        "kv_heads": cap.kv_heads,
    }
    return {"format": MANIFEST_FORMAT, "files": {CAPTURE_FILE: entry}}
