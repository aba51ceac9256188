"""Drive a notebook in JupyterLab the way a learner does: open it, Run All, wait, look.

Every wait here polls a real condition (the kernel's state through the server's REST API,
the cells' prompts and the figures' data in the page) up to a deadline from ``waits``, and
fails with a message naming the notebook, the cell or widget, and what was awaited.

Why the kernel must be ready before Run All: JupyterLab runs a code cell only if the
notebook's session already has a kernel. Until the server has answered the session request
(it starts the kernel process first, which takes seconds on a loaded machine) Run All
silently clears each code cell instead (``CodeCell.execute``: no ``session.kernel`` ->
``clearExecution()``), leaving ``[ ]`` prompts that nothing will ever fill.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from .waits import poll_until, timeout_ms, wait_for_js

PLOT_SELECTOR = ".js-plotly-plot"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in the active tab
NOTEBOOK = f"{PANEL} .jp-Notebook"

# Everything the waits below look at in the page, in one evaluate: the active notebook's cells
# (index, kind, prompt, first source line, error text), its kernel indicator, any dialog.
_PAGE_STATE_JS = """(panelSel) => {
    const panel = document.querySelector(panelSel);
    const dlg = document.querySelector('.jp-Dialog');
    const state = {cells: [], indicator: null, kernelName: null,
                   dialog: dlg ? {title: (dlg.querySelector('.jp-Dialog-header') || dlg).innerText.trim(),
                                  text: dlg.innerText.trim().slice(0, 300)} : null};
    if (!panel) return state;
    const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
    state.indicator = ind ? ind.getAttribute('data-status') : null;
    const kn = panel.querySelector('.jp-KernelName, .jp-Toolbar-kernelName');
    state.kernelName = kn ? kn.textContent.trim() : null;
    const current = window.jupyterapp ? window.jupyterapp.shell.currentWidget : null;
    const modelCells = current && current.node === panel && current.content ? current.content.widgets : [];
    panel.querySelectorAll('.jp-Notebook .jp-Cell').forEach((cell, i) => {
        const code = cell.classList.contains('jp-CodeCell');
        const lines = [...cell.querySelectorAll('.jp-InputArea-editor .cm-line')].map(l => l.textContent);
        const src = modelCells[i] ? modelCells[i].model.sharedModel.getSource() : lines.join('\\n');
        const promptEl = cell.querySelector('.jp-InputArea-prompt');
        let m = /\\[(.*?)\\]/.exec(promptEl ? promptEl.textContent : '');
        // A cell whose code is collapsed (source_hidden) shows no input prompt: read its model.
        if (code && !promptEl && modelCells[i]) {
            const model = modelCells[i].model;
            const n = model.executionCount;
            m = [null, model.executionState === 'running' ? '*' : (n === null || n === undefined ? '' : String(n))];
        }
        const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
        const errors = [...cell.querySelectorAll(stderr)]
            .map(o => o.textContent).filter(t => /Error|Traceback/.test(t))
            .map(t => t.trim().split('\\n').pop().slice(0, 200));
        state.cells.push({i, code, prompt: m ? m[1].trim() : null,
                          first: (src.trim().split('\\n')[0] || '').slice(0, 60),
                          empty: src.trim().length === 0, errors});
    });
    return state;
}"""


def page_state(page) -> dict:
    return page.evaluate(_PAGE_STATE_JS, PANEL)


def _label(cell: dict) -> str:
    return f"cell {cell['i']} ({cell['first']!r})"


def _cells_summary(state: dict) -> str:
    code = [c for c in state["cells"] if c["code"] and not c["empty"]]
    running = [_label(c) for c in code if c["prompt"] == "*"]
    blank = [_label(c) for c in code if c["prompt"] in ("", None)]
    done = [c for c in code if c["prompt"] and c["prompt"].isdigit()]
    errors = [f"{_label(c)}: {e}" for c in state["cells"] for e in c["errors"]]
    parts = [f"{len(done)} of {len(code)} code cells executed"]
    if running:
        parts.append(f"running/queued [*]: {', '.join(running[:5])}{' ...' if len(running) > 5 else ''}")
    if blank:
        parts.append(f"not executed [ ]: {', '.join(blank[:5])}{' ...' if len(blank) > 5 else ''}")
    if errors:
        parts.append(f"error output: {' | '.join(errors[:3])}")
    parts.append(f"kernel indicator {state['indicator']!r}")
    if state["dialog"]:
        parts.append(f"dialog open: {state['dialog']['text']!r}")
    return "; ".join(parts)


# -- the kernel, as the server sees it ------------------------------------------------------


def kernel_model(server, name: str) -> dict | None:
    """The server's model of the kernel of notebook ``name`` (execution_state, connections),
    or None while it has no session with a kernel."""
    for session in server.api("api/sessions") or []:
        if session.get("path") == name and session.get("kernel"):
            try:
                return server.api(f"api/kernels/{session['kernel']['id']}")
            except Exception:
                return None
    return None


def _kernel_seen(model: dict | None) -> str:
    if model is None:
        return "server: no session with a kernel"
    return f"server: kernel {model.get('execution_state')!r}, {model.get('connections')} connection(s)"


def _handle_dialog(state: dict, page, name: str, awaiting: str) -> None:
    """Accept JupyterLab's kernel choice (a notebook without kernel metadata asks for one);
    any other dialog is a failure the test should report, not click away."""
    dialog = state["dialog"]
    if not dialog:
        return
    if "kernel" in dialog["title"].lower() and "select" in dialog["title"].lower():
        page.locator(".jp-Dialog .jp-mod-accept").first.click(timeout=timeout_ms("element"))
        return
    raise AssertionError(f"{name}: unexpected dialog while waiting for {awaiting}: {dialog['text']!r}")


def wait_kernel_ready(page, server, name: str, awaiting: str = "its kernel to be ready") -> None:
    """Ready means: the server has a session for ``name`` whose kernel is idle with at least
    one connection (the page's websocket), and the page's kernel indicator says idle."""
    seen = {}

    def check():
        state = page_state(page)
        _handle_dialog(state, page, name, awaiting)
        model = kernel_model(server, name)
        seen["text"] = f"{_kernel_seen(model)}; page: {_cells_summary(state)}"
        if model and model.get("execution_state") == "dead":
            raise AssertionError(f"{name}: kernel died while waiting for {awaiting}; {seen['text']}")
        return (
            model is not None
            and model.get("execution_state") == "idle"
            and (model.get("connections") or 0) >= 1
            and state["indicator"] == "idle"
            and not any(c["prompt"] == "*" for c in state["cells"])
        )

    poll_until(
        check,
        f"{name}: {awaiting} (server: session with an idle, connected kernel; "
        f"page: kernel indicator idle, no [*] prompt)",
        "kernel_ready",
        interval=0.3,
        seen=lambda: seen.get("text"),
    )


def wait_kernel_idle(page, server, name: str, after: str = "the last action") -> None:
    wait_kernel_ready(page, server, name, awaiting=f"the kernel to go idle after {after}")


# -- open, clear, run, save -----------------------------------------------------------------


def open_notebook(page, server, name: str) -> None:
    """Open ``name`` in a fresh workspace (otherwise JupyterLab reopens the previous test's
    tabs), wait until every cell of the file is in the page and the kernel is ready."""
    n_cells = len(json.loads((server.root / name).read_text())["cells"])
    page.goto(server.url(f"lab/workspaces/{name.split('.')[0]}/tree/{name}?reset"), timeout=timeout_ms("page_load"))
    wait_for_js(
        page,
        "([sel, n]) => document.querySelectorAll(sel + ' .jp-Cell').length === n",
        [NOTEBOOK, n_cells],
        f"{name}: all {n_cells} cells of the file shown in JupyterLab",
        "page_load",
        seen=lambda: f"{page.locator(f'{NOTEBOOK} .jp-Cell').count()} cells in the page",
    )
    wait_kernel_ready(page, server, name, awaiting="its kernel to start before Run All")


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).first.click(
        timeout=timeout_ms("element")
    )
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click(
        timeout=timeout_ms("element")
    )


def clear_all_outputs(page, name: str) -> None:
    """Edit > Clear Outputs of All Cells, so that prompts saved in the file ([1], [2], ...)
    cannot pass for cells this run executed."""
    page.locator(f"{NOTEBOOK} .jp-Cell").first.click(timeout=timeout_ms("element"))
    _menu(page, "Edit", "Clear Outputs of All Cells")
    seen = {}

    def check():
        state = page_state(page)
        seen["text"] = _cells_summary(state)
        return all(c["prompt"] == "" for c in state["cells"] if c["code"])

    poll_until(
        check,
        f"{name}: every code cell cleared to [ ] by Edit > Clear Outputs of All Cells",
        "element",
        seen=lambda: seen.get("text"),
    )


def run_all_cells(page, server, name: str) -> None:
    """Run > Run All Cells, then wait until every non-empty code cell shows an execution
    count and the kernel is idle. Fails early, naming the cells, when the run stopped with
    cells left unexecuted (an error, or a kernel that was not there to run them)."""
    clear_all_outputs(page, name)
    wait_kernel_ready(page, server, name, awaiting="its kernel to be ready for Run All")
    page.locator(f"{NOTEBOOK} .jp-Cell").first.click(timeout=timeout_ms("element"))
    _menu(page, "Run", "Run All Cells")

    seen = {}

    def started():
        state = page_state(page)
        seen["text"] = _cells_summary(state)
        return any(c["prompt"] == "*" or (c["prompt"] or "").isdigit() for c in state["cells"] if c["code"])

    poll_until(
        started,
        f"{name}: Run > Run All Cells to start (a code cell queued [*] or executed)",
        "run_all_start",
        interval=0.2,
        seen=lambda: seen.get("text"),
    )

    stalled_since = [None]

    def finished():
        state = page_state(page)
        _handle_dialog(state, page, name, "Run All to finish")
        model = kernel_model(server, name)
        summary = f"{_cells_summary(state)}; {_kernel_seen(model)}"
        seen["text"] = summary
        if model is None or model.get("execution_state") == "dead":
            raise AssertionError(f"{name}: the kernel went away during Run All; {summary}")
        code = [c for c in state["cells"] if c["code"] and not c["empty"]]
        running = any(c["prompt"] == "*" for c in code)
        blank = [c for c in code if not (c["prompt"] or "").isdigit() and c["prompt"] != "*"]
        idle = model.get("execution_state") == "idle" and state["indicator"] == "idle"
        if not running and not blank and idle:
            return True
        if not running and blank and idle:
            # Nothing queued, kernel idle, cells still blank: they will never run. Seen
            # twice a second apart, so that a cell between two states does not count.
            if stalled_since[0] is None:
                stalled_since[0] = time.monotonic()
            elif time.monotonic() - stalled_since[0] >= 1.0:
                raise AssertionError(
                    f"{name}: Run All stopped with {len(blank)} code cell(s) left unexecuted "
                    f"({', '.join(_label(c) for c in blank[:5])}); {summary}"
                )
        else:
            stalled_since[0] = None
        return False

    poll_until(
        finished,
        f"{name}: Run All to finish (every code cell with an execution count, kernel idle)",
        "run_all",
        interval=0.5,
        seen=lambda: seen.get("text"),
    )


def save_notebook(page, path: Path, name: str | None = None) -> dict:
    """Ctrl+S, then wait until the file on disk is rewritten (Jupyter writes it atomically)
    and return it parsed."""
    name = name or path.name
    before = path.stat().st_mtime_ns
    page.locator(f"{NOTEBOOK}").first.focus()
    page.keyboard.press("Control+s")

    def saved():
        if path.stat().st_mtime_ns == before:
            return None
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            return None

    return poll_until(
        saved,
        f"{name}: Ctrl+S to write {path}",
        "save",
        interval=0.2,
        seen=lambda: "file unchanged since before Ctrl+S",
    )


def shutdown_and_wait(server) -> None:
    """Shut every session and kernel down and wait until the server lists none."""
    server.shutdown_kernels()
    poll_until(
        lambda: not server.list_kernels(),
        "all kernels shut down after the test",
        "kernel_shutdown",
        seen=lambda: f"kernels still listed: {server.list_kernels()}",
    )


# -- what the page shows --------------------------------------------------------------------


def error_cells(nb: dict) -> list[str]:
    """Cells whose outputs hold an error, named by index and first source line."""
    bad = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") == "error":
                first = "".join(cell.get("source", "")).strip().splitlines()[:1]
                bad.append(f"cell {i} ({first[0] if first else ''!r}): {out.get('ename')}: {out.get('evalue')}")
    return bad


def count_outputs(nb: dict, mimetype: str) -> int:
    return sum(
        1
        for cell in nb.get("cells", [])
        for out in cell.get("outputs", []) or []
        if mimetype in (out.get("data") or {})
    )


def rendered_plots(page) -> list[dict]:
    """Size and trace count of every plotly graph in the page."""
    return page.evaluate(
        """(sel) => [...document.querySelectorAll(sel)].map(el => {
        const r = el.getBoundingClientRect();
        return {w: r.width, h: r.height, traces: (el.data || []).length,
                svg: !!el.querySelector('.main-svg')};
    })""",
        PLOT_SELECTOR,
    )


def empty_plots(plots: list[dict]) -> list[dict]:
    return [p for p in plots if not p["svg"] or p["w"] < 50 or p["h"] < 50 or p["traces"] == 0]


_WIDGET_TROUBLE = re.compile(r"Error displaying widget|Loading widget|model not found", re.I)


def widget_problems(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')]
        .map(o => o.textContent || '')
        .filter(t => /Error displaying widget|Loading widget|model not found/i.test(t))
        .map(t => t.slice(0, 120))""")


def wait_figures_drawn(page, name: str, at_least: int) -> None:
    """Wait until the page has drawn at least ``at_least`` plotly graphs, none of them empty,
    and no widget output still says "Loading widget"."""
    seen = {}

    def check():
        plots = rendered_plots(page)
        loading = [t for t in widget_problems(page) if "loading widget" in t.lower()]
        seen["text"] = (
            f"{len(plots)} plots in the page, {len(empty_plots(plots))} empty "
            f"{empty_plots(plots)[:3]}, widgets still loading: {len(loading)}"
        )
        return len(plots) >= at_least and not empty_plots(plots) and not loading

    poll_until(
        check,
        f"{name}: every figure drawn (at least {at_least} plotly graphs, each with an SVG, "
        f">= 50 px and >= 1 trace; no widget loading)",
        "figures_drawn",
        seen=lambda: seen.get("text"),
    )


# -- a figure's data, to see a widget act on it ---------------------------------------------

_PLOT_JSON_JS = """(cls) => {
    const host = document.querySelector('.' + cls);
    const el = host && (host.matches('.js-plotly-plot') ? host : host.querySelector('.js-plotly-plot'));
    if (!el || !el.data || !el.querySelector('.main-svg')) return null;
    return JSON.stringify(el.data.map(t => [Array.from(t.x || []), Array.from(t.y || [])]));
}"""


def plot_data(page, container_class: str) -> list | None:
    """The x/y arrays of the plotly graph inside an element with ``container_class``."""
    raw = page.evaluate(_PLOT_JSON_JS, container_class)
    return None if raw is None else json.loads(raw)


def plot_snapshot(page, container_class: str) -> str | None:
    return page.evaluate(_PLOT_JSON_JS, container_class)


def wait_plot_drawn(page, container_class: str, where: str) -> str:
    """Wait until the figure in ``.container_class`` is drawn; return its data snapshot."""
    return wait_for_js(
        page,
        f"(cls) => ({_PLOT_JSON_JS})(cls)",
        container_class,
        f"{where}: figure .{container_class} drawn (an SVG and trace data)",
        "page_load",
    )


def wait_plot_changed(page, container_class: str, before: str, where: str, action: str, seen=None) -> str:
    """Wait until the data of the figure in ``.container_class`` differs from ``before``."""
    return wait_for_js(
        page,
        f"([cls, before]) => {{ const now = ({_PLOT_JSON_JS})(cls); return now !== null && now !== before && now; }}",
        [container_class, before],
        f"{where}: the data of figure .{container_class} to change after {action} "
        f"(it stayed equal to the snapshot taken before)",
        "widget_update",
        seen=seen,
    )


def wait_plot_settled(page, container_class: str, where: str, after: str, quiet_s: float = 1.0, busy=None) -> str:
    """Wait until the figure's data has not changed for ``quiet_s`` seconds (and ``busy()``,
    if given, says nothing is in flight): the updates an action set off have all landed."""
    last = {"snap": None, "since": time.monotonic()}

    def check():
        snap = plot_snapshot(page, container_class)
        now = time.monotonic()
        if snap != last["snap"]:
            last.update(snap=snap, since=now)
            return None
        if busy is not None and busy():
            last["since"] = now
            return None
        return snap if snap is not None and now - last["since"] >= quiet_s else None

    return poll_until(
        check, f"{where}: figure .{container_class} still for {quiet_s:g} s after {after}", "settle", interval=0.2
    )
