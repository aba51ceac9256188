"""How much sampled decoding changes a real model's output: teacher-forced quality and passkey
retrieval, every method against dense on the same cache.

Teacher-forced quality: the first ``prefix`` tokens of ``texts.long_text()`` are prefilled
ONCE with dense attention; then, for each method, the next ``stretch`` tokens are fed as
decode rows (see :mod:`pigviz.decode.session`: identical to decoding them one by one) and the cache
is cropped back to the prefix. Each method's next-token distribution is compared with the
dense one at every row: KL(dense || method), top-1 agreement, and the perplexity of the real
next tokens. Baselines run at the budget MagicPIG actually used (mean over its seeds).

Budgets, per row: ``budget`` is keys read / keys visible, averaged over the layers the method
makes sparse (the exact set and buffer count for MagicPIG); ``budget_all_layers`` averages
over every layer with the dense ones at 1 (Quest, as in its paper, keeps layers 0 and 1
dense, the others layer 0); MagicPIG rows add ``budget_sampled``: keys sampled / keys the
tables could sample, the share MagicPIG's authors report.

Passkey: "The pass key is NNNNN" hidden at a given depth in repetitive filler, asked for in the
chat template. The answer is forced to begin "The pass key is " and a trial counts as
retrieved when greedy decoding would continue with all five digits (checked teacher-forced,
which is equivalent and costs one forward). The prompt is prefilled densely, as MagicPIG
does, so every digit is produced by a decode step of the method under test.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path

import pigviz
from pigviz._util.config import DEFAULTS
from pigviz._util.io import sha256_file, write_json_atomic
from pigviz._util.stats import wilson_interval  # re-exported: lessons and the report import it from here
from pigviz._util.threads import cpu_model
from pigviz._util.validate import check_choice, check_float, check_int
from pigviz.attention.protocol import estimator_name
from pigviz.decode import custom
from pigviz.decode.generation import generate
from pigviz.decode.session import check_options, default_options, forward, new_cache, use_attention
from pigviz.model import shipped, texts
from pigviz.model.loading import check_context, model_source

__all__ = [
    "QUALITY_FORMAT",
    "PASSKEY_FORMAT",
    "quality_eval",
    "passkey_eval",
    "check_quality_args",
    "check_passkey_args",
    "passkey_prompt",
    "wilson_interval",
    "generation_demo",
    "environment",
    "record_in_manifest",
]

QUALITY_FORMAT = "pigviz-decode-quality-v1"
PASSKEY_FORMAT = "pigviz-passkey-v1"
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_INTRO = "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "


def environment(model) -> dict:
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    import transformers  # heavy: transformers loads in seconds; only model code needs it

    device = next(model.parameters()).device
    threads = torch.get_num_threads()
    hardware = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{cpu_model()} ({threads} torch thread{'s' if threads != 1 else ''})"
    )
    return {
        "model": model_source(model).as_dict(),
        "device": str(device),
        "hardware": hardware,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
    }


def _compare(ref_logits, logits, targets) -> dict:
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    ref = torch.log_softmax(ref_logits.double(), -1)
    got = torch.log_softmax(logits.double(), -1)
    kl = (ref.exp() * (ref - got)).sum(-1).clamp(min=0.0)
    nll = -got.gather(1, targets[:, None])[:, 0]
    return {"kl": kl, "agree": ref.argmax(-1) == got.argmax(-1), "nll": nll}


def _summary(cmp, budgets, seconds) -> dict:
    return {
        "kl_mean": float(cmp["kl"].mean()),
        "kl_median": float(cmp["kl"].median()),
        "top1_agreement": float(cmp["agree"].double().mean()),
        "perplexity": float(cmp["nll"].mean().exp()),
        "budget": float(budgets.mean()),
        "seconds": round(seconds, 2),
        "kl_per_token": [round(float(x), 7) for x in cmp["kl"]],
        "agree_per_token": [int(x) for x in cmp["agree"]],
        "nll_per_token": [round(float(x), 6) for x in cmp["nll"]],
    }


def _run_chunk(model, cache, chunk, attention, options):
    """Feed ``chunk`` as decode rows with ``attention`` and crop the cache back. Returns
    (logits, per-row budgets, per-layer mean budgets, seconds, index seconds, other budgets:
    ``{"all_layers": (rows,), "sampled": (rows,) or None}``)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    t0 = time.perf_counter()
    with use_attention(model, attention, **options) as session:
        # MagicPIG decodes from its own copy where it stores the sampled layers otherwise
        # (bf16 K/V): the float32 cache stays the reference the other methods read.
        run_cache = session.decode_cache(cache)
        session.prepare(run_cache)
        session.phase = "decode"
        try:
            logits = forward(model, chunk, run_cache)
        finally:
            run_cache.crop(-chunk.numel())
        budgets = session.take_budgets()
    layer_budgets = {k: float(v.mean()) for k, v in session.last_layer_budgets.items()}
    if budgets is None:
        budgets = torch.ones(chunk.numel())
    all_layers = session.last_all_layer_budget
    other = {
        "all_layers": torch.ones(chunk.numel()) if all_layers is None else all_layers,
        "sampled": session.last_sampled_budget,
    }
    return logits, budgets, layer_budgets, time.perf_counter() - t0, session.index_seconds, other


def quality_eval(
    model,
    tokenizer,
    *,
    prefix: int = 7936,
    stretch: int = 256,
    configs=((10, 150),),
    seeds=(0, 1),
    baselines=("topk", "quest", "streaming"),
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    dense_layers=(0,),
    ids=None,
    progress: bool = True,
) -> dict:
    """Teacher-forced comparison with dense (module docstring). ``configs``: (K, L) pairs.
    ``ids``: at least prefix + stretch + 1 token ids to use instead of ``texts.long_text()``'s
    (whose text changes between Python releases), e.g. ids recorded on another machine.
    ``baselines`` entries are method names or estimators of the protocol
    (:mod:`pigviz.attention.protocol`), each run at MagicPIG's budget. Every argument is
    checked before the prefill (:func:`check_quality_args`)."""
    prefix, stretch, configs, seeds = check_quality_args(
        prefix=prefix,
        stretch=stretch,
        configs=configs,
        seeds=seeds,
        baselines=baselines,
        min_hits=min_hits,
        sinks=sinks,
        recent=recent,
        dense_layers=dense_layers,
        n_layers=model.config.num_hidden_layers,
    )
    check_context(model, prefix + stretch)
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    from tqdm.auto import tqdm  # heavy: progress bars only for long runs

    if ids is None:
        ids = texts.first_tokens(tokenizer, prefix + stretch + 1)
    else:
        ids = torch.as_tensor(ids, dtype=torch.long)[: prefix + stretch + 1]
        if ids.ndim != 1 or ids.numel() < prefix + stretch + 1:
            raise ValueError(f"ids must be 1-D with at least prefix + stretch + 1 = {prefix + stretch + 1} tokens")
    chunk, targets = ids[prefix : prefix + stretch], ids[prefix + 1 : prefix + stretch + 1]
    cache = new_cache(model)
    t0 = time.perf_counter()
    with use_attention(model, "dense"):
        forward(model, ids[:prefix], cache, logits_to_keep=1)
    prefill_s = time.perf_counter() - t0
    # The reference is the model's own attention (transformers' SDPA), as it was trained and shipped.
    ref, _, _, ref_s, _, _ = _run_chunk(model, cache, chunk, "dense", {"kernel": "transformers"})
    device = ref.device
    targets = targets.to(device)
    dense_cmp = _compare(ref, ref, targets)
    rows = [dict(method="dense", label="dense", options={}, **_summary(dense_cmp, torch.ones(stretch), ref_s))]
    common = {"sinks": sinks, "recent": recent, "dense_layers": tuple(dense_layers)}
    runs = [(k, l, s) for k, l in configs for s in seeds]
    bar = tqdm(total=len(runs) + len(configs) * len(baselines), desc="quality", disable=not progress)
    budgets_of = {}
    for K, L, seed in runs:
        opts = dict(common, K=K, L=L, min_hits=min_hits, seed=seed, buffer=max(256, stretch))
        logits, budgets, per_layer, secs, index_s, other = _run_chunk(model, cache, chunk, "magicpig", opts)
        row = dict(
            method="magicpig",
            label=f"MagicPIG K={K} L={L}",
            K=K,
            L=L,
            seed=seed,
            # the cache dtype it ran on, recorded even where it was the default (bf16 since it became one)
            options=_jsonable({"kv_dtype": default_options("magicpig")["kv_dtype"], **opts}),
            **_summary(_compare(ref, logits, targets), budgets, secs),
        )
        row["budget_sampled"] = float(other["sampled"].mean())
        row["budget_all_layers"] = float(other["all_layers"].mean())
        row["index_seconds"] = round(index_s, 2)
        row["layer_budgets"] = {str(k): round(v, 5) for k, v in sorted(per_layer.items())}
        rows.append(row)
        budgets_of.setdefault((K, L), []).append(row["budget"])
        bar.update(1)
    for K, L in configs:
        matched = sum(budgets_of[(K, L)]) / len(budgets_of[(K, L)])
        for spec in baselines:
            method, opts = _baseline_options(spec, matched, sinks, dense_layers)
            logits, budgets, _, secs, _, other = _run_chunk(model, cache, chunk, method, opts)
            name = estimator_name(spec) if callable(spec) else spec
            rows.append(
                dict(
                    method=custom.CUSTOM if callable(spec) else method,
                    label=f"{name} at MagicPIG K={K} L={L}'s budget",
                    K=K,
                    L=L,
                    variant=name,
                    options=_jsonable(opts),
                    **_summary(_compare(ref, logits, targets), budgets, secs),
                    budget_all_layers=float(other["all_layers"].mean()),
                )
            )
            bar.update(1)
    bar.close()
    _, text_sha = texts.long_text()
    return {
        "format": QUALITY_FORMAT,
        "environment": environment(model),
        "settings": {
            "prefix": prefix,
            "stretch": stretch,
            "configs": [list(c) for c in configs],
            "seeds": seeds,
            "min_hits": min_hits,
            "sinks": sinks,
            "recent": recent,
            "dense_layers": list(dense_layers),
            "baselines": [estimator_name(b) if callable(b) else b for b in baselines],
            "text_source": texts.text_source_description(),
            "text_sha256": text_sha,
            "token_ids_sha256": hashlib.sha256(ids.numpy().astype("<i8").tobytes()).hexdigest(),
        },
        "prefill_seconds": round(prefill_s, 2),
        "rows": rows,
    }


def _check_sampled_options(K, L, min_hits, sinks, recent, seeds, baselines, dense_layers, n_layers) -> None:
    """MagicPIG's options and every baseline's, checked as ``use_attention`` will check them."""
    if isinstance(baselines, str) or not hasattr(baselines, "__iter__"):
        raise TypeError(f"baselines must be a list of method names or estimators, got {baselines!r}")
    if isinstance(dense_layers, int) or not hasattr(dense_layers, "__iter__"):
        raise TypeError(f"dense_layers must be a list of layer indices, got {dense_layers!r}")
    common = dict(sinks=sinks, recent=recent, dense_layers=tuple(dense_layers))
    for seed in seeds:
        check_options("magicpig", dict(common, K=K, L=L, min_hits=min_hits, seed=seed), n_layers)
    for spec in baselines:
        method, opts = _baseline_options(spec, 0.05, sinks, dense_layers)
        if callable(method):
            method, opts = custom.CUSTOM, dict(opts, estimator=method)
        check_options(method, opts, n_layers)


def check_quality_args(
    *,
    prefix: int = 7936,
    stretch: int = 256,
    configs=((10, 150),),
    seeds=(0, 1),
    baselines=("topk", "quest", "streaming"),
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    dense_layers=(0,),
    n_layers: int | None = None,
    max_context: int | None = None,
):
    """:func:`quality_eval`'s arguments checked without the model (before it loads, so a wrong
    one fails at once): ``n_layers`` and ``max_context`` (None: not known yet) bound
    ``dense_layers`` and ``prefix + stretch``. Returns ``(prefix, stretch, configs, seeds)``."""
    prefix = check_int("prefix", prefix, 1)
    stretch = check_int("stretch", stretch, 1)
    if max_context is not None and prefix + stretch > max_context:
        raise ValueError(
            f"prefix + stretch must be at most {max_context} (the model's trained context), got {prefix + stretch}"
        )
    configs = [(check_int("K", k, 1, 30), check_int("L", l, 1, 4096)) for k, l in configs]
    seeds = [check_int("seed", s, 0) for s in seeds]
    if not configs or not seeds:
        raise ValueError("configs and seeds must each hold at least one entry")
    for K, L in configs:
        _check_sampled_options(K, L, min_hits, sinks, recent, seeds, baselines, dense_layers, n_layers)
    return prefix, stretch, configs, seeds


def check_passkey_args(
    *,
    lengths=(1024, 2048, 4096),
    trials: int = 20,
    depths=(0.1, 0.3, 0.5, 0.7, 0.9),
    K: int = DEFAULTS.K,
    L: int = DEFAULTS.L,
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    dense_layers=(0,),
    baselines=("topk", "quest", "streaming"),
    seed: int = 0,
    n_layers: int | None = None,
    max_context: int | None = None,
):
    """:func:`passkey_eval`'s arguments checked without the model, as
    :func:`check_quality_args`. Returns ``(lengths, trials, depths)``."""
    lengths = [check_int("lengths entry", n, 128, max_context) for n in lengths]
    depths = [check_float("depths entry", x, 0.0, 1.0) for x in depths]
    if not lengths or not depths:
        raise ValueError("lengths and depths must each hold at least one entry")
    trials = check_int("trials", trials, 1)
    check_int("seed", seed, 0)
    _check_sampled_options(K, L, min_hits, sinks, recent, (0,), baselines, dense_layers, n_layers)
    return lengths, trials, depths


def _baseline_options(spec: str, budget: float, sinks: int, dense_layers) -> tuple[str, dict]:
    """ "topk", "quest", "quest_rank_all", "streaming", or "quest/P" (also "quest_rank_all/P")
    for Quest with pages of P tokens. Quest, as its paper runs it, also keeps layers 0 and 1
    dense; "quest_rank_all" (every page ranked, pigviz's first Quest) keeps ``dense_layers``.
    An estimator of the protocol (:mod:`pigviz.decode.custom`) runs at that budget, dense in
    ``dense_layers``."""
    if callable(spec):
        return spec, dict(budget=budget, dense_layers=tuple(sorted(set(dense_layers))))
    method, _, page = str(spec).partition("/")
    check_choice("baseline", method, ("topk", "quest", "streaming", "quest_rank_all"))
    layers = set(dense_layers) | ({0, 1} if method == "quest" else set())
    opts = dict(budget=budget, dense_layers=tuple(sorted(layers)))
    if method == "streaming":
        opts["sinks"] = sinks
    if page:
        if not method.startswith("quest") or not page.isdigit():
            raise ValueError(f"baseline {spec!r}: only Quest takes a page size, written quest/16")
        opts["page"] = int(page)
    return method, opts


def _jsonable(options: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


# -- passkey ------------------------------------------------------------------------------------
def passkey_prompt(tokenizer, n_tokens: int, depth: float, key: str):
    """``(prompt ids, answer ids, digit positions in the answer)`` for a chat prompt of about
    ``n_tokens`` tokens with the key at relative ``depth`` (0 = start, 1 = end) of the filler."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    n_tokens = check_int("n_tokens", n_tokens, 128)
    depth = check_float("depth", depth, 0.0, 1.0)
    if not (isinstance(key, str) and key.isdigit()):
        raise ValueError(f"key must be a string of digits, got {key!r}")
    unit = len(tokenizer(FILLER)["input_ids"])
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    reps = max(1, (n_tokens - 75) // unit)
    before = int(round(depth * reps))
    text = _INTRO + FILLER * before + needle + FILLER * (reps - before) + "What is the pass key?"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    answer = tokenizer(f"The pass key is {key}")["input_ids"]
    digits = [i for i, a in enumerate(answer) if tokenizer.decode([a]).strip().isdigit()]
    if "".join(tokenizer.decode([answer[i]]).strip() for i in digits) != key:
        raise ValueError(f"the tokenizer does not split {key!r} into digit tokens; cannot score it")
    return torch.tensor(tokenizer(prompt)["input_ids"]), torch.tensor(answer), digits


def _common_prefix(a, b) -> int:
    """Length of the shared start of two id tensors, leaving at least one token of ``b``."""
    m = min(a.numel(), b.numel() - 1)
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0]) if differ.numel() else m


def passkey_eval(
    model,
    tokenizer,
    *,
    lengths=(1024, 2048, 4096),
    trials: int = 20,
    depths=(0.1, 0.3, 0.5, 0.7, 0.9),
    K: int = DEFAULTS.K,
    L: int = DEFAULTS.L,
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    dense_layers=(0,),
    baselines=("topk", "quest", "streaming"),
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Passkey accuracy per context length: dense, MagicPIG (hash seed = trial number) and the
    baselines at the budget MagicPIG used in that same trial. Every argument is checked before
    the first prefill (:func:`check_passkey_args`)."""
    lengths, trials, depths = check_passkey_args(
        lengths=lengths,
        trials=trials,
        depths=depths,
        K=K,
        L=L,
        min_hits=min_hits,
        sinks=sinks,
        recent=recent,
        dense_layers=dense_layers,
        baselines=baselines,
        seed=seed,
        n_layers=model.config.num_hidden_layers,
        max_context=getattr(model.config, "max_position_embeddings", None),
    )
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    from tqdm.auto import tqdm  # heavy: progress bars only for long runs

    rng = random.Random(seed)
    methods = ["dense", "magicpig", *baselines]
    results = {(n, m): [] for n in lengths for m in methods}
    budgets = {(n, m): [] for n in lengths for m in methods}
    all_layer_budgets = {(n, m): [] for n in lengths for m in methods}
    sampled_budgets = {n: [] for n in lengths}
    bar = tqdm(total=len(lengths) * trials, desc="passkey", disable=not progress)
    per_trial = []
    for n in lengths:
        cache, previous = new_cache(model), torch.zeros(0, dtype=torch.long)
        # Deepest needles first: consecutive prompts then share the filler before the needle,
        # and the prefill only has to run from where they differ.
        plan = sorted(
            ((depths[t % len(depths)], t, str(rng.randint(10000, 99999))) for t in range(trials)),
            key=lambda x: (-x[0], x[1]),
        )
        for depth, t, key in plan:
            prompt, answer, digits = passkey_prompt(tokenizer, n, depth, key)
            shared = _common_prefix(previous, prompt)
            surplus = cache.get_seq_length() - shared
            if surplus > 0:
                cache.crop(-surplus)  # a negative count means "remove" in every transformers 5.x
            with use_attention(model, "dense"):
                first = forward(model, prompt[shared:], cache, logits_to_keep=1)[-1].argmax()
            previous = prompt
            chunk = answer[:-1]
            record = {
                "length": n,
                "trial": t,
                "prompt_tokens": int(prompt.numel()),
                "depth": depth,
                "key": key,
                "prefilled_tokens": int(prompt.numel()) - shared,
            }
            matched = None
            for method in methods:
                method_name = method
                if method == "magicpig":
                    opts = dict(
                        K=K,
                        L=L,
                        min_hits=min_hits,
                        sinks=sinks,
                        recent=recent,
                        seed=t,
                        dense_layers=tuple(dense_layers),
                    )
                elif method == "dense":
                    opts = {"kernel": "transformers"}  # the model's own attention, the reference
                else:
                    method_name, opts = _baseline_options(method, matched, sinks, dense_layers)
                logits, row_budgets, _, _, _, other = _run_chunk(model, cache, chunk, method_name, opts)
                predicted = torch.cat([first[None].cpu(), logits.argmax(-1).cpu()])
                ok = bool(all(predicted[i] == answer[i] for i in digits))
                rows_used = [i - 1 for i in digits]
                used = float(row_budgets[rows_used].mean())
                all_layer_budgets[(n, method)].append(float(other["all_layers"][rows_used].mean()))
                if method == "magicpig":
                    matched = used
                    sampled_budgets[n].append(float(other["sampled"][rows_used].mean()))
                results[(n, method)].append(ok)
                budgets[(n, method)].append(used)
                record[method] = ok
            per_trial.append(record)
            bar.update(1)
    bar.close()
    rows = []
    for (n, method), oks in results.items():
        lo, hi = wilson_interval(sum(oks), len(oks))
        rows.append(
            {
                "length": n,
                "method": method,
                "n": len(oks),
                "correct": sum(oks),
                "accuracy": sum(oks) / len(oks),
                "ci_low": lo,
                "ci_high": hi,
                "budget": sum(budgets[(n, method)]) / len(oks),
                "budget_all_layers": sum(all_layer_budgets[(n, method)]) / len(oks),
            }
        )
        if method == "magicpig":
            rows[-1]["budget_sampled"] = sum(sampled_budgets[n]) / len(oks)
    return {
        "format": PASSKEY_FORMAT,
        "environment": environment(model),
        "settings": {
            "lengths": list(lengths),
            "trials": trials,
            "depths": list(depths),
            "K": K,
            "L": L,
            "min_hits": min_hits,
            "sinks": sinks,
            "recent": recent,
            "dense_layers": list(dense_layers),
            "seed": seed,
            "filler": FILLER,
        },
        "rows": rows,
        "trials": per_trial,
    }


def generation_demo(
    model,
    tokenizer,
    *,
    prefix: int = 4096,
    max_new_tokens: int = 40,
    attentions=("dense", "magicpig"),
    progress: bool = True,
    **options,
) -> list[dict]:
    """The same pydoc prefix continued greedily by each attention (for the side-by-side view)."""
    ids = texts.first_tokens(tokenizer, prefix)
    out = []
    for attention in attentions:
        result = generate(
            model,
            tokenizer,
            ids,
            attention,
            max_new_tokens,
            stop_at_eos=True,
            progress=progress,
            **(options if attention != "dense" else {"kernel": "transformers"}),
        )
        out.append(result.as_dict())
    return out


def record_in_manifest(path, what: str, command: str, directory=None) -> dict:
    """Add or replace ``path``'s entry in ``pigviz/data/manifest.json`` (other entries untouched)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    import transformers  # heavy: transformers loads in seconds; only model code needs it

    path = Path(path)
    manifest = shipped.read_manifest(directory)
    entry = {
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "what": what,
        "command": command,
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
    }
    manifest["files"][path.name] = entry
    write_json_atomic(shipped.manifest_path(directory), manifest)
    return entry
