"""The error-vs-budget study: MagicPIG and its baselines on every head of a real model.

A capture holds, per layer, the post-RoPE keys and values of all N positions and the queries
of the last T. The query at position p sees keys 0..p (causal). For every such query, every
head and every method the study records

    error  = ||o_hat - o|| / ||o||         (o: exact softmax attention over keys 0..p)
    budget = distinct keys read, exact set included, / (p + 1)

and keeps their means over the T positions per (layer, head, seed). MagicPIG's series also
keep ``budget_sampled``: the keys it sampled / the keys it could sample (p + 1 - sinks -
recent), the share its authors report (4.3% at (10, 150) where ``budget`` says 5.1%). Both
are legitimate: ``budget`` is what a step reads, ``budget_sampled`` what the paper quotes.
Every series also keeps ``bytes_share``: everything the step reads to choose and use its keys
(scores of every key for the oracles, page summaries, channels, hyperplanes, table ids and hit
counters; :mod:`pigviz.attention.cost`) over what dense attention reads.

MagicPIG's tables are built ONCE per layer, by ``build_index`` over the keys the first studied
query sees, as they would be at the end of a prefill. Later queries read those tables
(:func:`decode_index`): the keys written since are never hashed, which is exact as long as they
sit in the recent window that is read exactly anyway (T - 1 <= recent).

Baselines are run at MagicPIG's measured budget (matched budgets): per layer and (K, L), the
mean budget over heads, positions and seeds. Ablations of the exact set (no sink; no recent
window; neither) and a diagnostic (exact softmax over the very keys MagicPIG read, without the
1/u correction) run at the paper's (K, L) = (10, 150).

Quest runs as its authors run it (:func:`pigviz.attention.quest_attention`: the current page
always read, counted in the budget) and, as in the paper, reads every key in the layers of
``quest_dense_layers`` (default 0 and 1), where its error is that of dense attention and its
budget 1: its mean budget over all layers is therefore above the matched one. The variant
``rank_all`` (:func:`pigviz.attention.quest_rank_all_attention`, every page ranked by its bound,
sparse in every layer) shows what the current page is worth.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pigviz
from pigviz import attention as A
from pigviz._util.config import DEFAULTS
from pigviz._util.io import sha256_file, write_json_atomic
from pigviz._util.validate import check_choice, check_int
from pigviz.attention import cost
from pigviz.model import loading as models
from pigviz.model import texts
from pigviz.model.capture import capture, load_capture, save_capture
from pigviz.model.loading import load_model

__all__ = [
    "FORMAT",
    "METHODS",
    "AFFORDABLE_METHODS",
    "DEFAULT_SETTINGS",
    "PAPER_SETTING",
    "StudySpec",
    "series_id",
    "capture_cache_path",
    "cached_capture",
    "check_study_args",
    "decode_index",
    "exact_outputs",
    "run_layer",
    "run_study",
    "save_results",
    "load_results",
]

FORMAT = "pigviz-study-v1"
METHODS = ("magicpig", "topk", "oracle", "hybrid", "quest", "streaming")
# Estimators a real system can afford (pigviz.lsh.affordable): MagicPIG plus an exact top (on
# MagicPIG's own reads), vAttention-style and SparQ at matched budgets.
AFFORDABLE_METHODS = ("mp_exact_top", "vattention", "sparq")
RANDOM_METHODS = ("magicpig", "oracle", "hybrid", "mp_exact_top", "vattention")
# (K, L) chosen to land near 2%, 4% and 8% of the keys on SmolLM2-135M at 8k (measured,
# see the shipped study), plus the paper's default.
DEFAULT_SETTINGS = ((12, 200), (11, 240), (10, 150), (9, 130))
PAPER_SETTING = (10, 150)
# Variants of MagicPIG at the paper's setting. Without a recent window the keys written after
# the prompt would have to be hashed and sampled too, so the variants that drop it are measured
# at the first query position only, where the prompt's tables are exactly what build_index
# makes, beside the unchanged method at that same position ("first_position").
ABLATIONS = {
    "no_sink": {"sinks": 0},
    "first_position": {"first_only": True},
    "no_window": {"recent": 0, "first_only": True},
    "no_exact": {"sinks": 0, "recent": 0, "first_only": True},
}
SIGNIFICANT = 5  # digits kept in the results JSON


@dataclass
class StudySpec:
    """What to run. ``settings``: MagicPIG (K, L) pairs; baselines are matched to each."""

    settings: tuple = DEFAULT_SETTINGS
    seeds: int = 3
    methods: tuple = METHODS + AFFORDABLE_METHODS
    sinks: int = DEFAULTS.sinks
    recent: int = DEFAULTS.recent
    min_hits: int = DEFAULTS.min_hits
    quest_page: int = 16
    ablations: bool = True
    quest_dense_layers: tuple = (0, 1)
    quest_rank_all: bool = True

    def __post_init__(self):
        if any(len(s) != 2 for s in self.settings):
            raise ValueError(f"settings must be (K, L) pairs, got {self.settings}")
        self.settings = tuple((check_int("K", s[0], 1, 20), check_int("L", s[1], 1, 1000)) for s in self.settings)
        if not self.settings or len(set(self.settings)) != len(self.settings):
            raise ValueError(f"settings must be a non-empty list of distinct (K, L) pairs, got {self.settings}")
        self.seeds = check_int("seeds", self.seeds, 1, 20)
        self.methods = tuple(check_choice("methods entry", m, METHODS + AFFORDABLE_METHODS) for m in self.methods)
        if not self.methods or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct entries of {METHODS + AFFORDABLE_METHODS}, got {self.methods}")
        if "magicpig" not in self.methods and any(
            m in self.methods for m in ("topk", "oracle", "hybrid", "quest") + AFFORDABLE_METHODS
        ):
            raise ValueError(
                "methods: topk, oracle, hybrid and quest are run at MagicPIG's budgets, so "
                "'magicpig' must be among the methods"
            )
        self.sinks = check_int("sinks", self.sinks, 0, 1024)
        self.recent = check_int("recent", self.recent, 0, 4096)
        self.min_hits = check_int("min_hits", self.min_hits, 1, min(L for _, L in self.settings))
        self.quest_page = check_int("quest_page", self.quest_page, 1, 1024)
        self.quest_dense_layers = tuple(
            sorted({check_int("quest_dense_layers entry", x, 0, 10_000) for x in self.quest_dense_layers})
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d["settings"] = [list(s) for s in self.settings]
        d["methods"] = list(self.methods)
        d["quest_dense_layers"] = list(self.quest_dense_layers)
        return d


def series_id(method: str, setting=None, variant: str = "main") -> str:
    """Key of one series in the results, e.g. ``magicpig K10 L150`` or ``topk @K10 L150``."""
    if setting is None:
        return method
    tag = f"K{setting[0]} L{setting[1]}"
    if method == "magicpig":
        return f"magicpig {tag}" + ("" if variant == "main" else f" {variant}")
    return f"{method} @{tag}" + ("" if variant == "main" else f" {variant}")


# -- the capture, cached ------------------------------------------------------------------------
def capture_cache_path(model: str, context: int, last: int, dtype: str | None = None) -> Path:
    """Where the full capture of ``model`` on the default text is cached: keyed by the model's
    weights (the bundled GGUF's sha256, else its name), the text's sha256, N, T and, when not
    the default, the dtype the model ran in."""

    if model in models.BUNDLED_MODELS:
        weights = sha256_file(models.bundled_gguf_path(model))[:16]
    else:
        weights = hashlib.sha256(str(model).encode()).hexdigest()[:16]
    _, text_sha = texts.long_text()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)[-40:]
    tag = f"-{dtype}" if dtype else ""
    return (
        models.cache_root() / "captures" / f"{safe}-{weights}-text{text_sha[:12]}-n{context}-t{last}{tag}.safetensors"
    )


def cached_capture(
    model: str = "smollm2-135m",
    context: int = 8192,
    last: int = 64,
    *,
    progress: bool = True,
    device: str = "cpu",
    dtype: str | None = None,
):
    """The full capture (all layers and heads, fp32), from the cache or made once and cached.
    The arguments are checked before either (:func:`pigviz.model.loading.check_model_args`)."""
    context = check_int("context", context, 2)
    last = check_int("last", last, 1, context - 1)
    models.check_model_args(model, device=device, dtype=dtype, n_tokens=context)
    path = capture_cache_path(model, context, last, dtype)
    if path.is_file():
        try:
            return load_capture(path)
        except ValueError:
            path.unlink()  # a damaged cache entry is rebuilt, not trusted

    net, tokenizer = load_model(model, device=device, dtype=dtype, progress=progress)
    cap = capture(net, tokenizer, n_tokens=context, last=last, progress=progress)
    save_capture(cap, path)
    return cap


def check_study_args(
    spec: StudySpec,
    *,
    model: str = "smollm2-135m",
    context: int = 8192,
    last: int = 64,
    layers=None,
    device=None,
    dtype=None,
    out=None,
) -> None:
    """Every check :func:`cached_capture` and :func:`run_study` make of their arguments, made
    before the model loads: the model's layers and trained context (from its files, see
    :func:`pigviz.model.loading.model_limits`), ``last`` against ``context`` and ``spec``'s
    exact set, ``device``, ``dtype`` and the folder of ``out``."""
    if not isinstance(spec, StudySpec):
        raise TypeError(f"spec must be a StudySpec, got {type(spec).__name__}")
    context = check_int("context", context, 2)
    last = check_int("last", last, 1, context - 1)
    if layers is not None:
        layers = [check_int("layers entry", x, 0) for x in layers]
        if not layers or len(set(layers)) != len(layers):
            raise ValueError(f"layers must be a non-empty list of distinct layer indices, got {layers}")
    _check_shape(spec, context, last)
    if out is not None:
        folder = Path(out).expanduser().resolve().parent
        if not folder.is_dir():
            raise FileNotFoundError(f"out must be a file in an existing folder; {folder} does not exist")
    # The model's limits, then device and dtype (these two import torch: last).
    models.check_model_args(model, device=device, dtype=dtype, layers=layers, n_tokens=context)


def _check_shape(spec: StudySpec, n: int, t: int) -> None:
    """A capture of N keys and T queries suits ``spec``: something left to sample, and the
    keys written after the prompt inside the exact recent window."""
    first = n - t
    if first + 1 <= spec.sinks + spec.recent:
        raise ValueError(
            f"the first query sees {first + 1} keys, not more than sinks + recent = "
            f"{spec.sinks + spec.recent}: nothing would be left to sample"
        )
    if "magicpig" in spec.methods and t - 1 > spec.recent:
        raise ValueError(
            f"last={t} queries need recent >= {t - 1}: the keys written after the prompt "
            f"are read exactly, never hashed; got recent={spec.recent}"
        )


# -- MagicPIG tables during decoding ---------------------------------------------------------
def decode_index(prompt_index, k, n: int):
    """The tables of ``prompt_index`` (built by ``build_index`` over the first n0 keys, as at
    the end of a prefill) seen by the decode step whose cache holds n >= n0 keys: the n - n0
    keys written since are never sampled, which is exact while n - n0 <= recent
    (:func:`pigviz.lsh.index.grow_index`)."""
    from pigviz.lsh.index import grow_index  # heavy: imports torch

    return grow_index(prompt_index, k, n)


# -- one layer -----------------------------------------------------------------------------------
def exact_outputs(q, k, v):
    """Causal scores (H, T, N) and exact outputs (H, T, dv) of the last T positions."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, T, d = q.shape
    Hkv, N, _ = k.shape
    group = H // Hkv
    scores = (q.reshape(Hkv, group * T, d) @ k.transpose(1, 2)).view(H, T, N) / math.sqrt(d)
    future = torch.arange(N)[None, :] > torch.arange(N - T, N)[:, None]
    scores = scores.masked_fill(future, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    return scores, (weights.view(Hkv, group * T, N) @ v).view(H, T, -1)


def _rel_err(o_hat, o):
    return (o_hat.float() - o).norm(dim=-1) / o.norm(dim=-1).clamp(min=1e-30)


def _magicpig_runs(spec: StudySpec):
    """(variant, (K, L), sinks, recent, with diagnostic, first position only) per MagicPIG run."""
    runs = [("main", s, spec.sinks, spec.recent, s == PAPER_SETTING, False) for s in spec.settings]
    if spec.ablations and PAPER_SETTING in spec.settings:
        for name, over in ABLATIONS.items():
            runs.append(
                (
                    name,
                    PAPER_SETTING,
                    over.get("sinks", spec.sinks),
                    over.get("recent", spec.recent),
                    False,
                    over.get("first_only", False),
                )
            )
    return runs


def run_layer(q, k, v, spec: StudySpec, tick=None, layer=None) -> dict:
    """All series for one layer: ``{series id: {"error": [[per head] per seed], "budget": ...}}``.
    ``q`` (H, T, d), ``k``/``v`` (Hkv, N, d); ``tick()`` is called after each unit of work.
    ``layer``: the model layer, so that Quest reads every key in ``spec.quest_dense_layers``
    (None: Quest is sparse)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    from pigviz.lsh.index import build_index  # heavy: imports torch
    from pigviz.lsh.magicpig import attend  # heavy: imports torch

    q, k, v = q.float(), k.float().contiguous(), v.float().contiguous()
    H, T, d = q.shape
    Hkv, N, _ = k.shape
    first = N - T
    _check_shape(spec, N, T)
    scores, exact = exact_outputs(q, k, v)
    out: dict = {}
    tick = tick or (lambda: None)

    dv = v.shape[-1]

    def share(method, stats, n, per_head=(), **fixed):
        """(H,) bytes each head read in this step / dense attention's bytes (pigviz.attention.cost).
        ``per_head``: names of ``stats`` entries that hold one number per head."""
        dense = cost.dense_bytes(n, d, dv)
        shares = []
        for h in range(H):
            kw = {key: float(stats[key][h]) for key in per_head}
            shares.append(
                cost.bytes_read(method, n=n, d=d, dv=dv, keys_read=float(stats["keys_read"][h]), **kw, **fixed)
            )
        return torch.tensor(shares, dtype=torch.float64) / dense

    def record(method, setting, variant, errors, budgets, sampled=None, shares=None):  # each (seeds, H, T)
        out[series_id(method, setting, variant)] = {
            "method": method,
            "setting": list(setting) if setting else None,
            "variant": variant,
            "positions": errors.shape[-1],
            "error": errors.mean(-1).tolist(),
            "budget": budgets.mean(-1).tolist(),
        }
        if sampled is not None:
            out[series_id(method, setting, variant)]["budget_sampled"] = sampled.mean(-1).tolist()
        if shares is not None:
            out[series_id(method, setting, variant)]["bytes_share"] = shares.mean(-1).tolist()

    if "magicpig" in spec.methods:
        for variant, setting, sinks, recent, diagnose, first_only in _magicpig_runs(spec):
            positions = [0] if first_only else range(T)
            err = torch.zeros(spec.seeds, H, len(positions), dtype=torch.float64)
            bud, err_nc, smp = torch.zeros_like(err), torch.zeros_like(err), torch.zeros_like(err)
            byt = torch.zeros_like(err)
            exact_top = "mp_exact_top" in spec.methods and variant == "main"
            err_top = torch.zeros_like(err)
            for s in range(spec.seeds):
                prompt = build_index(k[:, : first + 1], K=setting[0], L=setting[1], sinks=sinks, recent=recent, seed=s)
                for t in positions:
                    n = first + t + 1
                    view = decode_index(prompt, k, n)
                    o_hat, stats = attend(
                        view, q[:, t], k[:, :n], v[:, :n], min_hits=spec.min_hits, return_read_mask=diagnose
                    )
                    err[s, :, t] = _rel_err(o_hat, exact[:, t])
                    bud[s, :, t] = stats["keys_read"].double() / n
                    smp[s, :, t] = stats["sampled"].double() / max(1, n - sinks - recent)
                    byt[s, :, t] = share(
                        "magicpig", stats, n, ("candidates", "sampled"), K=setting[0], L=setting[1], heads=H
                    )
                    if exact_top:  # the same tables and reads, the top half of the sample trusted
                        from pigviz.lsh.affordable import magicpig_exact_top  # heavy: imports torch

                        o_top, _ = magicpig_exact_top(view, q[:, t], k[:, :n], v[:, :n], min_hits=spec.min_hits)
                        err_top[s, :, t] = _rel_err(o_top, exact[:, t])
                    if diagnose:  # same keys, plain softmax: is it the set or the 1/u weights?
                        w = torch.softmax(scores[:, t, :n].masked_fill(~stats["read_mask"], -math.inf), -1)
                        o_nc = (w.view(Hkv, H // Hkv, n) @ v[:, :n]).reshape(H, -1)
                        err_nc[s, :, t] = _rel_err(o_nc, exact[:, t])
                tick()
            record("magicpig", setting, variant, err, bud, smp, byt)
            if exact_top:  # the same reads as MagicPIG's
                record("mp_exact_top", setting, "main", err_top, bud, shares=byt)
            if diagnose:
                record("magicpig", setting, "no_correction", err_nc, bud, smp, byt)

    baselines = [m for m in ("topk", "quest", "oracle", "hybrid", "vattention", "sparq") if m in spec.methods]
    if "quest" in spec.methods and spec.quest_rank_all:
        baselines.insert(baselines.index("quest") + 1, "quest rank_all")
    quest_dense = layer is not None and layer in spec.quest_dense_layers
    for setting in spec.settings if baselines else ():
        budget = float(torch.tensor(out[series_id("magicpig", setting)]["budget"]).mean())
        for method in baselines:
            seeds = spec.seeds if method in RANDOM_METHODS else 1
            err = torch.zeros(seeds, H, T, dtype=torch.float64)
            bud, byt = torch.zeros_like(err), torch.zeros_like(err)
            for s in range(seeds):
                for t in range(T):
                    n = first + t + 1
                    args = (q[:, t], k[:, :n], v[:, :n], budget)
                    if method == "topk":
                        o_hat, stats = A.topk_attention(*args)
                    elif method == "quest" and quest_dense:  # the paper's dense first layers
                        o_hat, stats = A.dense_attention(*args[:3])
                    elif method == "quest":
                        o_hat, stats = A.quest_attention(*args, page=min(spec.quest_page, n))
                    elif method == "quest rank_all":
                        o_hat, stats = A.quest_rank_all_attention(*args, page=min(spec.quest_page, n))
                    elif method == "oracle":
                        o_hat, stats = A.oracle_sampling_attention(*args, seed=s)
                    elif method == "vattention":
                        from pigviz.lsh.affordable import vattention  # heavy: imports torch

                        o_hat, stats = vattention(
                            *args, sinks=spec.sinks, recent=min(spec.recent, n), page=min(spec.quest_page, n), seed=s
                        )
                    elif method == "sparq":
                        from pigviz.lsh.affordable import sparq  # heavy: imports torch

                        o_hat, stats = sparq(*args)
                    else:
                        o_hat, stats = A.hybrid_attention(*args, seed=s)
                    err[s, :, t] = _rel_err(o_hat, exact[:, t])
                    bud[s, :, t] = stats["keys_read"].double() / n
                    byt[s, :, t] = _baseline_share(share, method, quest_dense, stats, n, spec, r=stats.get("r"))
                tick()
            name, _, variant = method.partition(" ")
            record(name, setting, variant or "main", err, bud, shares=byt)

    if "streaming" in spec.methods:
        err = torch.zeros(1, H, T, dtype=torch.float64)
        bud, byt = torch.zeros_like(err), torch.zeros_like(err)
        for t in range(T):
            n = first + t + 1
            o_hat, stats = A.streaming_attention(q[:, t], k[:, :n], v[:, :n], sinks=spec.sinks, recent=spec.recent)
            err[0, :, t] = _rel_err(o_hat, exact[:, t])
            bud[0, :, t] = stats["keys_read"].double() / n
            byt[0, :, t] = share("streaming", stats, n)
        tick()
        record("streaming", None, "main", err, bud, shares=byt)
    return out


def _baseline_share(share, method: str, quest_dense: bool, stats, n: int, spec: StudySpec, r=None):
    """The byte share of one baseline call (``share`` from :func:`run_layer`)."""
    if method == "quest" and quest_dense:
        return share("dense", stats, n)
    if method in ("quest", "quest rank_all", "vattention"):
        return share("rank_all" if method == "quest rank_all" else method, stats, n, page=min(spec.quest_page, n))
    if method == "sparq":
        return share("sparq", stats, n, r=r)
    return share(method, stats, n)


def layer_units(spec: StudySpec) -> int:
    """How many times :func:`run_layer` calls ``tick`` (for a progress bar)."""
    units = len(_magicpig_runs(spec)) * spec.seeds if "magicpig" in spec.methods else 0
    for method in ("topk", "quest", "oracle", "hybrid", "vattention", "sparq"):
        if method in spec.methods:
            units += len(spec.settings) * (spec.seeds if method in RANDOM_METHODS else 1)
    if "quest" in spec.methods and spec.quest_rank_all:
        units += len(spec.settings)
    return units + ("streaming" in spec.methods)


# -- the whole study -----------------------------------------------------------------------------
def _round(x):
    if isinstance(x, list):
        return [_round(y) for y in x]
    if not math.isfinite(x):
        raise ValueError(f"the study produced a non-finite number ({x}); refusing to save it")
    return float(f"{x:.{SIGNIFICANT}g}")


def _header(cap, spec: StudySpec, layers, command: str) -> dict:
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    meta = cap.metadata
    return {
        "format": FORMAT,
        "model": meta["model_name"],
        "model_revision": meta["model_revision"],
        "text_sha256": meta["text_sha256"],
        "token_ids_sha256": meta["token_ids_sha256"],
        "context": cap.n_tokens,
        "last": cap.last,
        "layers": list(layers),
        "heads": int(cap.queries.shape[1]),
        "kv_heads": int(cap.keys.shape[1]),
        "head_dim": meta["head_dim"],
        "spec": spec.as_dict(),
        "command": command,
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def run_study(
    cap,
    spec: StudySpec | None = None,
    out=None,
    *,
    layers=None,
    progress: bool = True,
    command: str = "",
    resume: bool = True,
) -> dict:
    """Run :func:`run_layer` on every kept layer of ``cap``. With ``out``, the finished layers
    are saved to ``out + '.partial'`` after each layer (a re-run with the same header resumes
    there) and the results to ``out`` at the end, atomically."""
    from tqdm.auto import tqdm  # heavy: progress bars only for long runs

    spec = spec or StudySpec()
    layers = cap.layers if layers is None else [int(x) for x in layers]
    missing = [x for x in layers if x not in cap.layers]
    if missing or not layers:
        raise ValueError(f"layers must be a non-empty subset of the captured layers {cap.layers}, got {layers}")
    header = _header(cap, spec, layers, command)
    partial = Path(str(out) + ".partial") if out else None
    done: dict = {}
    if partial and resume and partial.is_file():
        saved = json.loads(partial.read_text(encoding="utf-8"))
        if {k: v for k, v in saved.items() if k not in ("results", "timing")} == header:
            done = saved["results"]
    timing = {"layer_s": {}, "load_average_start": list(os.getloadavg()), "cpu_count": os.cpu_count()}
    bar = tqdm(total=len(layers) * layer_units(spec), desc="study", unit="run", disable=not progress)
    for layer in layers:
        if str(layer) in done:
            bar.update(layer_units(spec))
            continue
        t0 = time.perf_counter()
        row = cap.layers.index(layer)
        result = run_layer(
            cap.queries[row], cap.keys[row], cap.values[row], spec, tick=lambda: bar.update(1), layer=layer
        )
        done[str(layer)] = {
            name: dict(s, **{key: _round(s[key]) for key in _PER_CELL if key in s}) for name, s in result.items()
        }
        timing["layer_s"][str(layer)] = round(time.perf_counter() - t0, 2)
        if partial:
            write_json_atomic(partial, dict(header, results=done), indent=None)
    bar.close()
    timing["load_average_end"] = list(os.getloadavg())
    results = _assemble(header, done, layers, timing)
    if out:
        save_results(results, out)
        if partial.is_file():
            partial.unlink()
    return results


# Per (layer, seed, head) numbers a series may hold.
_PER_CELL = ("error", "budget", "budget_sampled", "bytes_share")


def _assemble(header: dict, done: dict, layers, timing: dict) -> dict:
    series = {}
    for name, first in done[str(layers[0])].items():
        series[name] = {key: first[key] for key in ("method", "setting", "variant", "positions")}
        series[name]["seeds"] = len(first["error"])
        for key in _PER_CELL:  # (layers, seeds, heads)
            if key in first:
                series[name][key] = [done[str(layer)][name][key] for layer in layers]
    return dict(header, timing=timing, series=series)


def save_results(results: dict, path) -> Path:
    """Write the results JSON atomically (NaN refused)."""
    return write_json_atomic(path, results, indent=None)


def load_results(path) -> dict:
    """Read a results JSON; ValueError naming the file if it is not a study of this format."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study results {path} do not exist; run `pigviz study --out {path}`")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(results, dict) or results.get("format") != FORMAT or "series" not in results:
        raise ValueError(f"{path} is not a {FORMAT} results file")
    return results
