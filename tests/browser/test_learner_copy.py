"""A learner in a real JupyterLab, on the learner copies (copied by `pigviz notebooks`, solutions
off): 01 shows blank exercises and no outputs, Run All stops at the first check with a short
message and no traceback, a typed body passes; in 06a the learner assembles MagicPIG; in 06b they
build the index, and in 07b their MagicPIG (their step on their tables) writes text beside dense."""

import json

import pytest

from pigviz import course

from .jupyter_harness import HarnessError, JupyterLabServer
from .lab_driver import NOTEBOOK, _menu, open_notebook, page_state, shutdown_and_wait, wait_kernel_idle
from .waits import poll_until, timeout_ms

NAME = "01_stick_balance.ipynb"
CORRECT = "def balance_point(weights, values): return float(np.dot(weights, values) / np.sum(weights))"


@pytest.fixture(scope="module")
def learner_server(browser_tools, tmp_path_factory):
    root = tmp_path_factory.mktemp("learner")
    course.copy_notebooks(root)
    server = JupyterLabServer(root, tmp_path_factory.mktemp("learner-work"), solutions=False)
    try:
        server.start()
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


def _cell_index(page, starts_with: str) -> int:
    for cell in page_state(page)["cells"]:
        if cell["first"].startswith(starts_with):
            return cell["i"]
    raise AssertionError(f"no cell starts with {starts_with!r}: {[c['first'] for c in page_state(page)['cells']]}")


def _output_text(page, i: int) -> str:
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(i).locator(".jp-OutputArea").inner_text()


def test_learner_copy_blank_then_a_short_failure_then_a_pass(learner_server, page, artifacts_dir):
    saved = json.loads((learner_server.root / NAME).read_text())
    assert all(not c.get("outputs") for c in saved["cells"] if c["cell_type"] == "code"), "the copy has outputs"
    try:
        open_notebook(page, learner_server, NAME)
        assert page.locator(f"{NOTEBOOK} .jp-OutputArea-output").count() == 0, "outputs shown before running"
        stub = _cell_index(page, "def balance_point(weights, values):")
        stub_text = page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).locator(".jp-InputArea-editor").inner_text()
        assert stub_text.rstrip().endswith("..."), f"the exercise is not blank: {stub_text!r}"
        check = stub + 1

        # Run All, as a learner does first: it must stop at the blank exercise's check.
        page.locator(f"{NOTEBOOK} .jp-Cell").first.click(timeout=timeout_ms("element"))
        _menu(page, "Run", "Run All Cells")
        message = poll_until(
            lambda: (text := _output_text(page, check)) and "failed case" in text and text,
            f"{NAME}: Run All to stop at the first check (cell {check}) with its message",
            "run_all",
            interval=0.5,
            seen=lambda: _output_text(page, check)[:300],
        )
        wait_kernel_idle(page, learner_server, NAME, after="Run All")
        check_cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(check)
        check_cell.scroll_into_view_if_needed()
        check_cell.screenshot(path=str(artifacts_dir / "learner-01-failed-check.png"))
        assert "01.balance_point failed case 1 of" in message
        assert "still `...`" in message and "ex.use_reference('01.balance_point')" in message
        assert "Traceback" not in message and "File " not in message and "_framework" not in message, message
        later = [c for c in page_state(page)["cells"] if c["code"] and c["i"] > check + 1]
        assert all(not (c["prompt"] or "").isdigit() for c in later), "Run All went on past the failed check"

        # The learner writes a correct body (one line: no auto-indent to fight), runs it and the check.
        editor = page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).locator(".cm-content")
        editor.click(timeout=timeout_ms("element"))
        page.keyboard.press("Control+a")
        page.keyboard.type(CORRECT)
        page.keyboard.press("Shift+Enter")  # runs the function cell, moves to the check
        page.keyboard.press("Shift+Enter")  # runs the check
        passed = poll_until(
            lambda: (text := _output_text(page, check)) and "pass" in text and "failed" not in text and text,
            f"{NAME}: the check to pass after a correct body was typed",
            "element",
            interval=0.3,
            seen=lambda: _output_text(page, check)[:300],
        )
        assert "01.balance_point: pass" in passed
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir / "learner-01-passed-check.png"))
    finally:
        page.context.close()
        shutdown_and_wait(learner_server)


# One-line bodies (typed as a learner might paste them): no auto-indent to fight.
MAGICPIG_06 = "06a_build_magicpig.ipynb"
LOG_U = (
    "def log_u(q, keys, mu, K, L): c = keys - mu; "
    "cos = np.clip(c @ q / (np.linalg.norm(c, axis=1) * np.linalg.norm(q)), -1, 1); "
    "return log_inclusion_probability(1 - np.arccos(cos) / np.pi, K, L)"
)
SAMPLED = (
    "def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L): "
    "s = np.concatenate([K_S @ q / np.sqrt(len(q)) - log_u(q, K_S, mu, K, L), K_exact @ q / np.sqrt(len(q))]); "
    "return softmax(s) @ np.concatenate([V_S, V_exact])"
)
ASSEMBLED = (
    "def magicpig_estimate(q, keys, values, planes, K, L, sinks, recent, min_hits=2): "
    "n = len(keys); E = np.r_[0:sinks, n - recent:n]; mu = keys[sinks:n - recent].mean(axis=0); "
    "hits = (simhash_codes(keys - mu, planes, K, L) == simhash_codes(q, planes, K, L)).sum(axis=1); "
    "hits[E] = 0; S = np.flatnonzero(hits >= min_hits); "
    "return sampled_estimate(q, keys[S], values[S], mu, keys[E], values[E], K, L), np.r_[E, S]"
)


def _run_check(page, stub: int, name: str, expect: str, body: str | None = None, notebook: str = MAGICPIG_06) -> str:
    """Run the stub (its body replaced by ``body`` if given) and the check below it; the check's
    output once it shows ``expect`` (a stale answer of an earlier run never matches: it said
    the other thing)."""
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).locator(".cm-content").click(timeout=timeout_ms("element"))
    if body is not None:
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(body)
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Shift+Enter")
    return poll_until(
        lambda: (text := _output_text(page, stub + 1)) and expect in text and text,
        f"{notebook}: {name}'s check to say {expect!r}",
        "settle",
        interval=0.3,
        seen=lambda: _output_text(page, stub + 1)[:300],
    )


def test_learner_assembles_magicpig_and_the_next_cell_uses_it(learner_server, page, artifacts_dir):
    """06's assembly exercise in the learner copy: Run All stops at the first blank check; the
    pieces typed pass; the blank assembly fails with a short message; the typed one passes and
    the next cell runs the learner's function beside the library's reference."""
    try:
        log_u = _run_all_to_blank(page, learner_server, MAGICPIG_06, "def log_u(q, keys, mu, K, L):", "06.log_u")
        assert "06.log_u: pass" in _run_check(page, log_u, "06.log_u", "pass", LOG_U)
        sampled = _cell_index(page, "def sampled_estimate(")
        assert "06.sampled_estimate: pass" in _run_check(page, sampled, "06.sampled_estimate", "pass", SAMPLED)

        assembled = _cell_index(page, "def magicpig_estimate(")
        stub_text = page.locator(f"{NOTEBOOK} .jp-Cell").nth(assembled).locator(".jp-InputArea-editor").inner_text()
        assert stub_text.rstrip().endswith("..."), f"the exercise is not blank: {stub_text!r}"
        blank = _run_check(page, assembled, "06.magicpig_estimate", "failed case")
        assert "06.magicpig_estimate failed case 1 of" in blank and "still `...`" in blank, blank
        assert "Traceback" not in blank and len(blank.splitlines()) <= 8, blank  # the same seven lines as 01
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(assembled + 1).screenshot(
            path=str(artifacts_dir / "learner-06-blank-assembly.png")
        )

        passed = _run_check(page, assembled, "06.magicpig_estimate", ": pass", ASSEMBLED)
        assert "06.magicpig_estimate: pass" in passed and "failed" not in passed, passed
        after = _cell_index(page, "from pigviz.lsh import magicpig_reference")
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(after).locator(".cm-content").click(timeout=timeout_ms("element"))
        page.keyboard.press("Shift+Enter")
        used = poll_until(
            lambda: (text := _output_text(page, after)) and "reference" in text and text,
            f"{MAGICPIG_06}: the cell after the check to run the learner's magicpig_estimate",
            "settle",
            interval=0.3,
            seen=lambda: _output_text(page, after)[:300],
        )
        assert "the same set as the reference: True" in used, used
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(after).screenshot(path=str(artifacts_dir / "learner-06-assembled.png"))
    finally:
        page.context.close()
        shutdown_and_wait(learner_server)


# 06b's index and 07b's decode step, one line each.
INDEX_06 = "06b_the_index.ipynb"
WRITES_07 = "07b_your_magicpig_writes.ipynb"
BUILD_TABLES = (
    "def build_tables(codes, K): codes = np.asarray(codes); ids = np.argsort(codes.T, axis=1, kind='stable'); "
    "counts = np.stack([np.bincount(c, minlength=2**K) for c in codes.T]); "
    "return np.concatenate([np.zeros((len(counts), 1), dtype=int), np.cumsum(counts, axis=1)], axis=1), ids"
)
QUERY_HITS = (
    "def query_hits(tables, q_codes): offsets, ids = tables; "
    "found = [ids[t, offsets[t, b] : offsets[t, b + 1]] for t, b in enumerate(q_codes)]; "
    "return np.bincount(np.concatenate(found), minlength=ids.shape[1])"
)
BUFFERED_STEP = (
    "def buffered_step(q, keys, values, index): "
    "n0, d, K, L = index['n_indexed'], len(q), index['K'], index['L']; s, r = index['sinks'], index['recent']; "
    "E = np.r_[0:s, n0 - r : len(keys)]; h = query_hits(index['tables'], simhash_codes(q, index['planes'], K, L)); "
    "h[:s] = 0; h[n0 - r :] = 0; S = np.flatnonzero(h >= 2); "
    "out, lse = softmax_part(keys[E] @ q / np.sqrt(d), values[E]); "
    "part = softmax_part(keys[S] @ q / np.sqrt(d) - log_u(q, keys[S], index['mu'], K, L), values[S]) "
    "if len(S) else None; "
    "return (merge_partial(*part, out, lse) if len(S) else out), np.r_[E, S]"
)


@pytest.fixture
def fresh_learner_server(browser_tools, tmp_path):
    """A server of its own: what this learner passes (ex.mine) starts empty, whatever ran before."""
    course.copy_notebooks(tmp_path / "copies")
    server = JupyterLabServer(tmp_path / "copies", tmp_path / "work", solutions=False)
    try:
        server.start()
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


def _run_all_to_blank(page, server, notebook: str, stub_start: str, name: str) -> int:
    """Open the learner copy, Run All, and wait for it to stop at the blank ``name``'s check."""
    open_notebook(page, server, notebook)
    page.locator(f"{NOTEBOOK} .jp-Cell").first.click(timeout=timeout_ms("element"))
    _menu(page, "Run", "Run All Cells")
    stub = _cell_index(page, stub_start)
    first = poll_until(
        lambda: (text := _output_text(page, stub + 1)) and "failed case" in text and text,
        f"{notebook}: Run All to stop at {name}'s check",
        "run_all",
        interval=0.5,
        seen=lambda: _output_text(page, stub + 1)[:300],
    )
    wait_kernel_idle(page, server, notebook, after="Run All")
    assert f"{name} failed case 1 of" in first and "still `...`" in first and "Traceback" not in first, first
    return stub


def test_learner_builds_the_index_then_their_magicpig_writes_text(fresh_learner_server, page, artifacts_dir):
    """06b: Run All stops at the blank build_tables; the typed tables and hits pass. 07b: Run All
    stops at the blank buffered_step; the typed step passes, and the cells below generate with the
    learner's step on the learner's tables (taken from 06b through ex.mine) beside dense."""
    server = fresh_learner_server
    try:
        build = _run_all_to_blank(page, server, INDEX_06, "def build_tables(", "06.build_tables")
        assert "06.build_tables: pass" in _run_check(page, build, "06.build_tables", ": pass", BUILD_TABLES, INDEX_06)
        hits = _cell_index(page, "def query_hits(")
        assert "06.query_hits: pass" in _run_check(page, hits, "06.query_hits", ": pass", QUERY_HITS, INDEX_06)
        shutdown_and_wait(server)

        step = _run_all_to_blank(page, server, WRITES_07, "def buffered_step(", "07.buffered_step")
        passed = _run_check(page, step, "07.buffered_step", ": pass", BUFFERED_STEP, WRITES_07)
        assert "07.buffered_step: pass" in passed and "failed" not in passed, passed
        # The learner runs on from the check: the class, the timing, then the generation.
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(step + 1).click(timeout=timeout_ms("element"))
        _menu(page, "Run", "Run Selected Cell and All Below")
        generate = _cell_index(page, "run = decode.generate(")
        text = poll_until(
            lambda: (out := _output_text(page, generate)) and "then your MagicPIG:" in out and out,
            f"{WRITES_07}: the learner's MagicPIG to write text beside dense",
            "run_all",
            interval=0.5,
            seen=lambda: _output_text(page, generate)[:300],
        )
        timing = _output_text(page, generate - 1)
        assert "so your MagicPIG generates" in timing, timing  # theirs, not the reference standing in
        assert "then dense:" in text and "keys read per decode step" in text, text
        shot = artifacts_dir / "learner-07b-writes.png"
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(generate).screenshot(path=str(shot))
    finally:
        page.context.close()
        shutdown_and_wait(server)
