"""benchmarks/bench_decode.py's memory measurement: the peak-RSS helpers and the rule that a
process measures one (context, method)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_decode.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_decode", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is reset through /proc")
def test_peak_rss_sees_a_block_and_forgets_it_after_a_reset(bench):
    if not bench.reset_peak_rss():
        pytest.skip("this kernel does not allow /proc/self/clear_refs")
    before = bench.peak_rss_bytes()
    block = np.ones(96 * 2**20, dtype=np.uint8)  # written, so every page is resident
    assert bench.peak_rss_bytes() >= before + 80 * 2**20
    del block
    assert bench.reset_peak_rss()
    assert bench.peak_rss_bytes() < before + 48 * 2**20


@pytest.mark.parametrize(
    "contexts,methods",
    [((1024, 2048), (("dense", {}),)), ((1024,), (("dense", {}), ("magicpig", {})))],
)
def test_memory_needs_one_context_and_one_method(bench, contexts, methods):
    with pytest.raises(ValueError, match="memory=True needs exactly one context and one method"):
        bench.measure(None, None, contexts=contexts, methods=methods, memory=True)
