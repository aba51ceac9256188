"""benchmarks/bench_decode.py's memory measurement: the peak-RSS helpers and the rule that a
process measures one (context, method)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import tiny_llama

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_decode.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_decode", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Run in a fresh interpreter: the peak RSS is process-wide, and inside pytest the process is
# already large after whatever ran before (a new array may reuse pages that were freed), so the
# outcome would depend on the suite's order and on the machine.
_PEAK_PROBE = r"""
import importlib.util, json, sys
import numpy as np
spec = importlib.util.spec_from_file_location("bench_decode", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
out = {"reset": bench.reset_peak_rss()}
if out["reset"]:
    out["before"] = bench.peak_rss_bytes()
    block = np.ones(96 * 2**20, dtype=np.uint8)  # written, so every page is resident
    out["with_block"] = bench.peak_rss_bytes()
    del block
    out["reset_again"] = bench.reset_peak_rss()
    out["after_reset"] = bench.peak_rss_bytes()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is reset through /proc")
def test_peak_rss_sees_a_block_and_forgets_it_after_a_reset():
    done = subprocess.run([sys.executable, "-c", _PEAK_PROBE, str(PATH)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["reset"]:
        pytest.skip("this kernel does not allow /proc/self/clear_refs")
    assert out["with_block"] >= out["before"] + 80 * 2**20
    assert out["reset_again"]
    assert out["after_reset"] < out["before"] + 48 * 2**20


@pytest.mark.parametrize(
    "contexts,methods",
    [((1024, 2048), (("dense", {}),)), ((1024,), (("dense", {}), ("magicpig", {})))],
)
def test_memory_needs_one_context_and_one_method(bench, contexts, methods):
    with pytest.raises(ValueError, match="memory=True needs exactly one context and one method"):
        bench.measure(None, None, contexts=contexts, methods=methods, memory=True)


def _row(method, attn_cpu, index_cpu_seconds=0.0):
    return {
        "method": method,
        "attention_ms": attn_cpu + 1.0,
        "attention_cpu_ms": attn_cpu,
        "index_seconds": index_cpu_seconds + 0.5 if index_cpu_seconds else 0.0,
        "index_cpu_seconds": index_cpu_seconds,
    }


def test_index_costs_per_generated_token_on_a_row(bench):
    upkeep = {
        "ms": 1.25,
        "cpu_ms": 1.0,
        "cpu_ms_per_insertion": [250.0, 264.0],
        "insertions": 2,
        "chunk": 257,
        "prefix": 3582,
        "layers": 29,
        "stats": {"tokens": 29 * 2 * 257},
    }
    mp = _row("magicpig", 14.0, index_cpu_seconds=1.024)
    bench._add_index_costs(mp, upkeep)
    assert (mp["upkeep_cpu_ms_per_token"], mp["upkeep_ms_per_token"]) == (1.0, 1.25)
    assert mp["upkeep_insertions"] == 2 and mp["upkeep_cpu_ms_per_insertion"] == [250.0, 264.0]
    assert mp["build_cpu_ms_per_token_256"] == pytest.approx(4.0)
    assert mp["build_cpu_ms_per_token_4096"] == pytest.approx(0.25)
    assert mp["build_ms_per_token_256"] == pytest.approx(1524 / 256)  # the wall clock's build
    assert mp["attention_with_upkeep_cpu_ms_256"] == pytest.approx(19.0)
    assert mp["attention_with_upkeep_cpu_ms_4096"] == pytest.approx(15.25)
    assert mp["attention_with_upkeep_ms_256"] == pytest.approx(15.0 + 1.25 + 1524 / 256)
    # Dense keeps no index: nothing to add. MagicPIG whose upkeep could not be measured: no figure.
    dense = _row("dense_grouped", 20.0)
    bench._add_index_costs(dense, None)
    assert dense["upkeep_cpu_ms_per_token"] == 0.0 and dense["attention_with_upkeep_cpu_ms_256"] == 20.0
    short = _row("magicpig", 9.0, index_cpu_seconds=0.2)
    bench._add_index_costs(short, None)
    assert short["upkeep_cpu_ms_per_token"] is None and short["attention_with_upkeep_cpu_ms_4096"] is None


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(num_hidden_layers=3)


def test_upkeep_is_timed_on_the_cache_by_the_sessions_own_insertion_and_leaves_the_session_alone(bench, tiny):
    import torch

    from pigviz.decode.session import forward, new_cache, use_attention

    n = 200
    ids = torch.randint(0, 96, (n,), generator=torch.Generator().manual_seed(1))
    cache = new_cache(tiny)
    with use_attention(tiny, "dense"):
        forward(tiny, ids, cache, logits_to_keep=1)
    options = dict(K=3, L=4, min_hits=1, sinks=4, recent=8, buffer=15)
    with use_attention(tiny, "magicpig", **options) as session:
        session.prepare(cache)
        before = {layer: (state.index.n, state.index.entries.clone()) for layer, state in session.layers.items()}
        out = bench.measure_upkeep(tiny, session, cache, n)
        # 16 tokens per insertion (buffer + 1), as many insertions as fit in half the context (100 // 16).
        assert (out["chunk"], out["insertions"], out["prefix"]) == (16, 6, 200 - 6 * 16)
        assert out["layers"] == len(session.layers) > 0
        assert out["stats"]["tokens"] == out["stats"]["hashed"] == out["layers"] * 6 * 16
        assert len(out["cpu_ms_per_insertion"]) == 6 and out["cpu_ms"] >= 0 and out["ms"] > 0
        # A generation of 32 tokens makes 2 insertions; a context too short for one beyond the exact set, none.
        assert bench.measure_upkeep(tiny, session, cache, n, generation=32)["insertions"] == 2
        assert bench.measure_upkeep(tiny, session, cache, 20) is None
        # The timed session's own index and counters are untouched.
        assert session.upkeeps == 0 and session.upkeep_tokens == 0
        for layer, (n_indexed, entries) in before.items():
            assert session.layers[layer].index.n == n_indexed == n
            assert torch.equal(session.layers[layer].index.entries, entries)
