"""Sampled decoding inside SmolLM2-135M: the swap, its restoration, exactness limits, errors,
the eval JSON and the shipped results. CPU; the CUDA tests skip without a GPU."""

import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from pigviz.decode import evaluate as decode_eval
from pigviz.decode import generation
from pigviz.decode import session as decoding
from pigviz.model import loading as models
from pigviz.model import shipped

DATA = Path(__file__).resolve().parents[2] / "pigviz" / "data"
PROMPT_TOKENS = 300


@pytest.fixture(scope="module")
def prompt(smollm2):
    from pigviz.model.texts import first_tokens

    return first_tokens(smollm2[1], PROMPT_TOKENS + 40)


def _gen(smollm2, ids, attention, n=6, **options):
    model, tok = smollm2
    return generation.generate(model, tok, ids, attention, n, progress=False, stop_at_eos=False, **options)


# -- swap, restore, exactness ---------------------------------------------------------------------
def test_swap_restores_and_switches_back_and_forth(smollm2, prompt):
    model = smollm2[0]
    ids = prompt[:PROMPT_TOKENS]
    dense = _gen(smollm2, ids, "dense")
    assert model.config._attn_implementation == "sdpa"
    sampled = _gen(smollm2, ids, "magicpig", K=6, L=20)
    assert model.config._attn_implementation == "sdpa"
    assert 0 < sampled.mean_budget() < 1
    again = _gen(smollm2, ids, "dense")
    assert again.token_ids == dense.token_ids
    assert dense.budgets == [1.0] * len(dense.token_ids)


def test_huge_budget_magicpig_equals_dense(smollm2, prompt):
    ids = prompt[:PROMPT_TOKENS]
    dense = _gen(smollm2, ids, "dense", n=8)
    # One hyperplane per table and 16 tables, one hit enough: every key is sampled with
    # inclusion probability ~1, so the estimate is ordinary attention.
    wide = _gen(smollm2, ids, "magicpig", n=8, K=1, L=16, min_hits=1)
    assert wide.token_ids == dense.token_ids
    assert min(wide.budgets) > 0.95


def test_all_layers_dense_is_bit_for_bit_dense(smollm2, prompt):
    model = smollm2[0]
    ids = prompt[:PROMPT_TOKENS]
    # A method's dense layers run transformers' own SDPA, as dense does with that kernel.
    dense = _gen(smollm2, ids, "dense", n=5, kernel="transformers")
    every = tuple(range(model.config.num_hidden_layers))
    for method, opts in (("magicpig", {}), ("topk", {"budget": 0.01})):
        assert _gen(smollm2, ids, method, n=5, dense_layers=every, **opts).token_ids == dense.token_ids


@pytest.mark.parametrize(
    "method,opts",
    [
        ("magicpig", {"K": 8, "L": 40, "buffer": 64}),
        ("topk", {"budget": 0.1}),
        ("quest", {"budget": 0.2}),
        ("streaming", {"recent": 16}),
    ],
)
def test_teacher_forced_chunk_equals_step_by_step(smollm2, prompt, method, opts):
    model = smollm2[0]
    P, T = PROMPT_TOKENS, 12
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, method, **opts) as session:
        decoding.forward(model, prompt[:P], cache, logits_to_keep=1)
        session.prepare(cache)
        session.phase = "decode"
        chunk = decoding.forward(model, prompt[P : P + T], cache)
        chunk_budget = session.take_budgets()
        cache.crop(-T)
        steps, step_budget = [], []
        for t in range(T):
            steps.append(decoding.forward(model, prompt[P + t : P + t + 1], cache))
            step_budget.append(session.take_budgets())
    assert torch.allclose(chunk, torch.cat(steps), atol=2e-3, rtol=0)
    assert torch.allclose(chunk_budget, torch.cat(step_budget), atol=1e-6)


def _dense_logits(model, prompt, P, T, **opts):
    """Logits of T teacher-forced rows after a P-token prefill, and the decode cache's K dtype."""
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "dense", **opts) as session:
        decoding.forward(model, prompt[:P], cache, logits_to_keep=1)
        run = session.decode_cache(cache)
        session.phase = "decode"
        chunk = decoding.forward(model, prompt[P : P + T], run)
        run.crop(-T)
        steps = torch.cat([decoding.forward(model, prompt[P + t : P + t + 1], run) for t in range(T)])
    return chunk, steps, run.layers[1].keys.dtype


def test_grouped_dense_is_transformers_dense_in_float32_and_bf16_stores_half(smollm2, prompt):
    """The grouped form reads each KV head once and gives transformers' logits (float32: same
    numbers up to summation order); with kv_dtype="bfloat16" every layer stores 16-bit K/V and
    the logits move only by bf16's rounding of the cache."""
    model, P, T = smollm2[0], PROMPT_TOKENS, 8
    ref, ref_steps, ref_dtype = _dense_logits(model, prompt, P, T, kernel="transformers")
    chunk, steps, dtype = _dense_logits(model, prompt, P, T)
    assert ref_dtype == dtype == torch.float32
    scale = ref.abs().max()
    assert (chunk - ref).abs().max() / scale < 1e-5 and (steps - ref_steps).abs().max() / scale < 1e-5
    half, half_steps, half_dtype = _dense_logits(model, prompt, P, T, kv_dtype="bfloat16")
    assert half_dtype == torch.bfloat16
    err = (half - ref).abs().max() / scale
    assert 0 < err < 0.05, f"bf16 K/V moved the logits by {err:.3g} of their largest"
    # A chunk of rows is the same rows one by one, up to bf16's rounding (2**-8 of a value) in
    # another summation order (measured: 0.2% of the largest logit).
    assert (half - half_steps).abs().max() / scale < 1e-2
    assert (half.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.75


def test_buffer_overflow_is_inserted_into_the_index(smollm2, prompt):
    ids = prompt[:PROMPT_TOKENS]
    dense = _gen(smollm2, ids, "dense", n=10)
    wide = _gen(smollm2, ids, "magicpig", n=10, K=1, L=16, min_hits=1, buffer=3)
    # Same schedule as the rebuilds it replaced: once per 4 tokens past the buffer, per sampled layer.
    assert wide.rebuilds == 0 and wide.upkeeps > 0 and wide.upkeep_tokens > 0
    assert wide.as_dict()["upkeeps"] == wide.upkeeps and "rebuilds" in wide.as_dict()
    assert wide.token_ids == dense.token_ids


def test_chunk_past_the_buffer_is_inserted_and_stays_finite(smollm2, prompt):
    model = smollm2[0]
    P, T = PROMPT_TOKENS, 12
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "magicpig", K=6, L=20, buffer=T - 1) as session:
        decoding.forward(model, prompt[:P], cache, logits_to_keep=1)
        session.prepare(cache)
        session.phase = "decode"
        logits = decoding.forward(model, prompt[P : P + T], cache)
        assert session.upkeeps == model.config.num_hidden_layers - 1 and session.rebuilds == 0
        assert torch.isfinite(logits).all()
        cache.crop(-T)
    with decoding.use_attention(model, "magicpig", buffer=T - 2) as session:
        session.prepare(cache)
        session.phase = "decode"
        with pytest.raises(ValueError, match="does not fit the exact buffer"):
            decoding.forward(model, prompt[P : P + T], cache)


def test_generate_result_fields(smollm2, prompt):
    res = _gen(smollm2, prompt[:PROMPT_TOKENS], "magicpig", n=4, K=8, L=30)
    assert len(res.token_ids) == len(res.step_seconds) == len(res.budgets) == 4
    assert res.budgets[0] == 1.0 and all(0 < b < 1 for b in res.budgets[1:])
    assert isinstance(res.text, str) and res.prompt_tokens == PROMPT_TOKENS
    assert res.index_seconds > 0 and all(s > 0 for s in res.step_seconds)
    d = json.loads(json.dumps(res.as_dict()))
    assert d["options"]["dense_layers"] == [0] and d["attention"] == "magicpig"


# -- bad input leaves the model as it was ----------------------------------------------------------
@pytest.mark.parametrize(
    "attention,options,exc,match",
    [
        ("flash", {}, ValueError, "dense.*magicpig.*topk.*quest.*streaming"),
        ("magicpig", {"budget": 0.1}, TypeError, "K, L, min_hits"),
        ("dense", {"K": 10}, TypeError, "takes: kernel, kv_dtype"),
        ("topk", {"dense_layers": (30,)}, ValueError, r"dense_layers entry must be in \[0, 29\]"),
        ("magicpig", {"min_hits": 0}, ValueError, "min_hits"),
        ("magicpig", {"sinks": 0, "recent": 0}, ValueError, "sinks \\+ recent"),
        ("topk", {"budget": 1.5}, ValueError, "budget"),
        ("dense", {"kernel": "flash"}, ValueError, "kernel"),
        ("dense", {"kv_dtype": "int8"}, ValueError, "kv_dtype"),
    ],
)
def test_bad_options_raise_and_leave_sdpa(smollm2, prompt, attention, options, exc, match):
    with pytest.raises(exc, match=match):
        _gen(smollm2, prompt[:20], attention, **options)
    assert smollm2[0].config._attn_implementation == "sdpa"


def test_batch_and_length_errors(smollm2, prompt):
    model, tok = smollm2
    with pytest.raises(ValueError, match="batch size must be 1"):
        generation.generate(model, tok, ["a", "b"], "dense", 2, progress=False)
    with pytest.raises(ValueError, match="batch size must be 1"):
        generation.generate(model, tok, torch.zeros(2, 5, dtype=torch.long), "dense", 2, progress=False)
    too_long = torch.zeros(model.config.max_position_embeddings - 2, dtype=torch.long)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        generation.generate(model, tok, too_long, "magicpig", 5, progress=False)
    # A failure inside the swapped forward (batch of two rows) also restores sdpa.
    with pytest.raises(ValueError, match="batch size must be 1"):
        with decoding.use_attention(model, "magicpig"):
            with torch.inference_mode():
                model(input_ids=torch.stack([prompt[:8], prompt[:8]]), use_cache=False)
    assert model.config._attn_implementation == "sdpa"
    # Whatever the model used before comes back, not just sdpa.
    model.set_attn_implementation("eager")
    try:
        with pytest.raises(ValueError, match="batch size must be 1"):
            with decoding.use_attention(model, "topk"):
                with torch.inference_mode():
                    model(input_ids=torch.stack([prompt[:8], prompt[:8]]), use_cache=False)
        assert model.config._attn_implementation == "eager"
    finally:
        model.set_attn_implementation("sdpa")


def test_unswappable_models_are_named(smollm2):
    with pytest.raises(TypeError, match="PreTrainedModel"):
        decoding.use_attention(torch.nn.Linear(2, 2)).__enter__()

    class LegacyModel:
        config = smollm2[0].config

        def set_attn_implementation(self, name):
            raise AssertionError("must not be switched")

        def _can_set_attn_implementation(self):
            return False

    with pytest.raises(ValueError, match="LegacyModel cannot have its attention swapped"):
        decoding.check_swappable(LegacyModel())


# -- eval JSON --------------------------------------------------------------------------------------
def test_quality_eval_schema(smollm2):
    model, tok = smollm2
    out = decode_eval.quality_eval(model, tok, prefix=200, stretch=6, configs=((6, 20),), seeds=(0,), progress=False)
    assert out["format"] == decode_eval.QUALITY_FORMAT
    methods = [r["method"] for r in out["rows"]]
    assert methods == ["dense", "magicpig", "topk", "quest", "streaming"]
    dense, mp = out["rows"][0], out["rows"][1]
    assert dense["kl_mean"] == 0 and dense["top1_agreement"] == 1 and dense["budget"] == 1
    assert mp["kl_mean"] >= 0 and len(mp["kl_per_token"]) == 6 and 0 < mp["budget"] < 1
    assert set(mp["layer_budgets"]) == {str(i) for i in range(1, 30)}
    assert mp["options"]["kv_dtype"] == "bfloat16"  # the cache it ran on, recorded though it was the default
    for row in out["rows"][2:]:
        assert abs(row["budget"] - mp["budget"]) < 0.1  # matched budgets
    # budgets both ways: sampled / sampleable keys (MagicPIG's authors) below keys read / visible
    assert 0 <= mp["budget_sampled"] < mp["budget"] < mp["budget_all_layers"] < 1
    quest = out["rows"][3]
    assert quest["options"]["dense_layers"] == [0, 1]  # as in Quest's paper
    assert quest["budget_all_layers"] == pytest.approx((28 * quest["budget"] + 2) / 30, rel=1e-4)
    json.dumps(out, allow_nan=False)
    assert model.config._attn_implementation == "sdpa"


def test_passkey_eval_schema_and_wilson(smollm2):
    model, tok = smollm2
    out = decode_eval.passkey_eval(model, tok, lengths=(200,), trials=1, progress=False)
    assert [r["method"] for r in out["rows"]] == ["dense", "magicpig", "topk", "quest", "streaming"]
    assert "budget_sampled" in out["rows"][1] and all("budget_all_layers" in r for r in out["rows"])
    for r in out["rows"]:
        assert r["n"] == 1 and r["ci_low"] <= r["accuracy"] <= r["ci_high"]
    lo, hi = decode_eval.wilson_interval(20, 20)
    assert hi == 1.0 and 0.8 < lo < 0.85
    with pytest.raises(ValueError, match="successes"):
        decode_eval.wilson_interval(3, 2)


def test_cli_generate_and_its_errors(smollm2, capsys):
    # Imported here: the CLI imports plotly, which the GPU machine's image lacks, and that
    # machine collects this file for its CUDA tests (benchmarks/gpu_check.py).
    from pigviz.cli import main

    assert (
        main(
            [
                "generate",
                "--prompt",
                "The capital of France is",
                "--attention",
                "topk",
                "--budget",
                "0.5",
                "--max-new-tokens",
                "3",
                "--quiet",
            ]
        )
        == 0
    )
    assert "[topk]" in capsys.readouterr().err
    assert main(["generate", "--prompt", "Hi", "--attention", "topk", "--K", "8", "--quiet"]) == 2
    assert "unknown option(s) K" in capsys.readouterr().err
    # Dense names the form it ran: the grouped one by default, on the cache dtype asked for.
    args = ["generate", "--prompt", "Hi", "--attention", "dense", "--max-new-tokens", "2", "--quiet"]
    assert main([*args, "--kv-dtype", "bfloat16"]) == 0
    assert "[dense, grouped (each KV head read once), K/V in bfloat16]" in capsys.readouterr().err
    assert main([*args, "--dense-kernel", "transformers"]) == 0
    assert "[dense, transformers SDPA, K/V in the model's dtype]" in capsys.readouterr().err
    assert main(["generate", "--prompt", "Hi", "--attention", "topk", "--kv-dtype", "bfloat16", "--quiet"]) == 2
    assert "unknown option(s) kv_dtype" in capsys.readouterr().err


# -- shipped results -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,fmt",
    [
        ("decode_quality_smollm2.json", decode_eval.QUALITY_FORMAT),
        ("passkey_smollm2.json", decode_eval.PASSKEY_FORMAT),
        ("decode_speed_cpu.json", "pigviz-decode-speed-v1"),
    ],
)
def test_shipped_results_match_manifest_and_schema(name, fmt):
    entry = shipped.read_manifest()["files"].get(name)
    assert entry is not None, f"{name} has no manifest entry"
    assert not [p for p in shipped.check_shipped() if name in p]
    data = json.loads((DATA / name).read_text())
    assert data["format"] == fmt and data["rows"]
    for row in data["rows"]:
        assert all(not (isinstance(v, float) and math.isnan(v)) for v in row.values())


def test_shipped_quality_summaries_rederive():
    data = json.loads((DATA / "decode_quality_smollm2.json").read_text())
    for row in data["rows"]:
        kl = row["kl_per_token"]
        assert len(kl) == data["settings"]["stretch"]
        assert abs(sum(kl) / len(kl) - row["kl_mean"]) < 1e-5 * max(1.0, row["kl_mean"])


def test_report_tables_figures_and_claims():
    from pigviz.decode import report
    from pigviz.plots import decoding as plots

    quality = report.load_result(report.QUALITY_FILE)
    passkey = report.load_result(report.PASSKEY_FILE)
    speed = report.load_result(report.SPEED_FILE)
    assert "magicpig" in report.speed_table(speed["rows"])
    assert "first" in report.side_by_side(quality["generation"])
    figures = [
        plots.quality_figure(quality["rows"]),
        plots.passkey_figure(passkey["rows"]),
        plots.generation_figure(quality["generation"]),
        plots.speed_figure(speed["rows"]),
        plots.layer_budget_figure(quality["rows"][1]["layer_budgets"]),
    ]
    for fig in figures:
        assert fig.layout.title.text
        for trace in fig.data:
            for axis in ("x", "y"):
                values = getattr(trace, axis, None)
                if values is not None:
                    assert all(not (isinstance(v, float) and math.isnan(v)) for v in values)


def test_tampered_result_is_refused(tmp_path, monkeypatch):
    from pigviz.decode import report

    for name in ("manifest.json", report.QUALITY_FILE):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    with open(tmp_path / report.QUALITY_FILE, "a") as fh:
        fh.write(" ")
    monkeypatch.setenv("PIGVIZ_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="does not match its manifest sha256"):
        report.load_result(report.QUALITY_FILE)


def test_the_gpu_path_run_on_the_cpu_decodes_as_the_readable_one(smollm2, prompt, monkeypatch):
    """What a GPU runs (no compiled step; the padded attend, its counts left where they were
    made until take_budgets) against the readable attend: same logits and budgets through a
    chunk of rows with a decode buffer, then single steps past the buffer (an insertion)."""
    model = smollm2[0]
    P, T = PROMPT_TOKENS, 4
    monkeypatch.setenv("PIGVIZ_NO_NUMBA", "1")
    runs = {}
    for padded in ("0", "1"):
        monkeypatch.setenv("PIGVIZ_PADDED", padded)
        cache = decoding.new_cache(model)
        with decoding.use_attention(model, "magicpig", K=8, L=40, buffer=T) as session:
            decoding.forward(model, prompt[:P], cache, logits_to_keep=1)
            session.prepare(cache)
            session.phase = "decode"
            logits, budgets = [decoding.forward(model, prompt[P : P + T], cache)], [session.take_budgets()]
            for t in range(T, T + 3):
                logits.append(decoding.forward(model, prompt[P + t : P + t + 1], cache))
                budgets.append(session.take_budgets())
        runs[padded] = torch.cat(logits), torch.cat(budgets), session.upkeeps
    (ref_logits, ref_budgets, ref_upkeeps), (logits, budgets, upkeeps) = runs["0"], runs["1"]
    assert upkeeps == ref_upkeeps > 0
    assert torch.allclose(budgets, ref_budgets, atol=1e-6) and bool((budgets < 0.5).all())
    assert torch.allclose(logits, ref_logits, atol=1e-3, rtol=0)


# -- CUDA (skipped without a GPU) ------------------------------------------------------------------
LONG_PROMPT_TOKENS = 2048  # K=8, L=40 then reads ~6% of the keys (3.3% are the sinks and recent window)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible to torch)")


@pytest.fixture(scope="module")
def long_prompt(smollm2):
    from pigviz.model.texts import first_tokens

    return first_tokens(smollm2[1], LONG_PROMPT_TOKENS)


@pytest.mark.cuda
@cuda
def test_cuda_sampled_decode_matches_cpu(smollm2, long_prompt):
    """The same sampled decode at a realistic budget (K=8, L=40 over 2,048 tokens) on CPU
    (compiled path) and GPU (padded torch path): same tokens, same budgets up to the rare key
    whose projection is within rounding of a hyperplane."""
    options = {"K": 8, "L": 40, "buffer": 4}  # a small buffer also exercises a rebuild
    cpu = _gen(smollm2, long_prompt, "magicpig", **options)
    model, tok = models.load_model(device="cuda", dtype="float32", progress=False)
    gpu = generation.generate(model, tok, long_prompt, "magicpig", 6, progress=False, stop_at_eos=False, **options)
    assert 0 < cpu.mean_budget() < 0.1
    assert gpu.token_ids[:3] == cpu.token_ids[:3]
    assert sum(a == b for a, b in zip(gpu.token_ids, cpu.token_ids)) >= 5
    assert gpu.mean_budget() == pytest.approx(cpu.mean_budget(), rel=0.05)


@pytest.mark.cuda
@cuda
def test_cuda_bf16_sampled_decode_stays_close_to_dense(long_prompt):
    model, tok = models.load_model(device="cuda", dtype="bfloat16", progress=False)
    sampled = generation.generate(model, tok, long_prompt, "magicpig", 6, progress=False, stop_at_eos=False, K=8, L=40)
    dense = generation.generate(model, tok, long_prompt, "dense", 6, progress=False, stop_at_eos=False)
    assert all(0 < b <= 1 for b in sampled.budgets) and 0 < sampled.mean_budget() < 0.1
    assert sampled.token_ids[:2] == dense.token_ids[:2]
    assert sum(a == b for a, b in zip(sampled.token_ids, dense.token_ids)) >= 4


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_decode_attention_never_waits_for_the_gpu(long_prompt, dtype):
    """Every sampled layer's attention call of a decode step, with a decode buffer, under
    torch.cuda.set_sync_debug_mode("error"); take_budgets then brings the counts over with
    one wait for the GPU.
    (The calls are made straight, not through a forward: the model around them is
    transformers' code.)"""
    from types import SimpleNamespace

    model, _ = models.load_model(device="cuda", dtype=dtype, progress=False)
    config = model.config
    H = config.num_attention_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // H
    P = LONG_PROMPT_TOKENS - 2
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "magicpig", K=10, L=150) as session:
        decoding.forward(model, long_prompt[:P], cache, logits_to_keep=1)
        session.prepare(cache)
        session.phase = "decode"
        decoding.forward(model, long_prompt[P : P + 1], cache)  # log u tables to the GPU; a buffer token
        session.take_budgets()
        query = torch.randn(1, H, 1, d, device="cuda", dtype=getattr(torch, dtype))
        layers = [i for i in range(config.num_hidden_layers) if session.sampled_layer(i)]
        torch.cuda.synchronize()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for i in layers:
                keys, values = cache.layers[i].keys, cache.layers[i].values
                out, _ = session(SimpleNamespace(layer_idx=i), query, keys, values, None, scaling=d**-0.5)
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                budgets = session.take_budgets()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    syncs = [w for w in caught if "synchronizing CUDA operation" in str(w.message)]
    assert len(syncs) == 1  # every layer's counts (budgets and sampled shares) in one copy
    assert out.is_cuda and out.shape == (1, 1, H, d) and torch.isfinite(out).all()
    assert budgets.shape == (1,) and 0 < float(budgets[0]) < 0.2
    assert len(session.last_layer_budgets) == len(layers)
    assert all(b.device.type == "cpu" for b in session.last_layer_budgets.values())
