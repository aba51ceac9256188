"""benchmarks/bench_decode.py's memory measurement: the peak-RSS helpers and the rule that a
process measures one (context, method)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

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
