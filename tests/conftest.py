"""Fixtures every test folder shares: the bundled SmolLM2 model (loaded once per session) and the
shipped capture."""

import os
import tempfile

import pytest
from hypothesis import settings

from pigviz.model import loading, shipped

# A passing check keeps the learner's function on disk (exercises.mine); tests and the notebook
# servers they start keep theirs in a folder of this run, never in the user's home.
os.environ.setdefault("PIGVIZ_MINE_DIR", tempfile.mkdtemp(prefix="pigviz-mine-"))
# Which steps the compiled MagicPIG splits into threads is this machine's measurement
# (pigviz.lsh.fused.calibrate); the tests fix it, so that what runs threaded does not depend
# on a timing (tests/lsh/test_fused.py measures the calibration itself).
os.environ.setdefault("PIGVIZ_THREAD_WORK", str(2**18))

# Derandomised, so a run draws the same examples on every machine. Not on every selection of
# tests: hypothesis also tries literals from the local modules loaded so far, so the whole suite
# can try an input a single file does not (a stick of weight 1e-5 did, in CI). A property must
# hold for every input; pin an input that once failed with @example.
# `pytest --hypothesis-profile=explore` searches afresh.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")


@pytest.fixture(scope="session")
def smollm2():
    """``(model, tokenizer)`` of the bundled SmolLM2-135M on the CPU in fp32, as the shipped data
    were made, even where a GPU is present; the test is skipped, saying why, where the model
    package is not installed."""
    try:
        return loading.load_model(device="cpu", progress=False)
    except loading.ModelUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def shipped_capture():
    """The capture shipped in pigviz/data/, checked against its manifest."""
    return shipped.load_shipped_capture()


def pytest_terminal_summary(terminalreporter, config):
    # The test command runs the suite in random order (pytest-randomly) and quietly (-q), which
    # hides the plugin's header line: say at the end how to replay this order.
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"random order: replay it with `pytest --randomly-seed={seed}`")
