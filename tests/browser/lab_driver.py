"""Drive a notebook in JupyterLab the way a learner does: open it, Run All, wait, look."""
from __future__ import annotations

import json
import time
from pathlib import Path

PLOT_SELECTOR = ".js-plotly-plot"
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the notebook in the active tab


def open_notebook(page, server, name: str, timeout_ms: int = 60_000) -> None:
    # A fresh workspace per notebook: otherwise JupyterLab reopens the previous test's tabs.
    page.goto(server.url(f"lab/workspaces/{name.split('.')[0]}/tree/{name}?reset"))
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=timeout_ms)
    accept_kernel_dialog(page)
    wait_kernel_idle(page, timeout_s=timeout_ms / 1000)


def accept_kernel_dialog(page, wait_ms: int = 3000) -> None:
    """A notebook without kernel metadata asks which kernel to start: take the default."""
    try:
        page.wait_for_selector(".jp-Dialog", timeout=wait_ms)
    except Exception:
        return
    page.locator(".jp-Dialog .jp-mod-accept").first.click()


def wait_kernel_idle(page, timeout_s: float = 120) -> None:
    """Idle means: the kernel reports idle and no cell shows the busy prompt [*]."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = page.evaluate("""() => {
            const prompts = [...document.querySelectorAll('.jp-Notebook .jp-InputArea-prompt')];
            const running = prompts.some(p => p.textContent.includes('*'));
            const ind = document.querySelector('.jp-Notebook-ExecutionIndicator');
            const status = ind ? (ind.getAttribute('data-status') || '') : 'idle';
            return running || (status !== 'idle' && status !== '');
        }""")
        if not busy:
            return
        time.sleep(0.5)
    raise TimeoutError(f"kernel still busy after {timeout_s:.0f} s")


def run_all_cells(page, timeout_s: float = 300) -> None:
    page.locator(f"{NOTEBOOK} .jp-Cell").first.click()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    time.sleep(1.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = page.evaluate("""() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            return {n: prompts.length, done: prompts.filter(p => /\\[\\d+\\]/.test(p.textContent)).length,
                    busy: prompts.some(p => p.textContent.includes('*'))};
        }""")
        if state["n"] and state["done"] == state["n"] and not state["busy"]:
            return
        time.sleep(0.5)
    raise TimeoutError(f"not every cell finished within {timeout_s:.0f} s")


def save_notebook(page, path: Path, timeout_s: float = 20) -> dict:
    before = path.stat().st_mtime
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.stat().st_mtime != before:
            time.sleep(0.3)
            return json.loads(path.read_text())
        time.sleep(0.2)
    raise TimeoutError(f"{path.name} was not saved within {timeout_s:.0f} s")


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
    return sum(1 for cell in nb.get("cells", []) for out in cell.get("outputs", []) or []
               if mimetype in (out.get("data") or {}))


def rendered_plots(page) -> list[dict]:
    """Size and trace count of every plotly graph in the page."""
    return page.evaluate("""(sel) => [...document.querySelectorAll(sel)].map(el => {
        const r = el.getBoundingClientRect();
        return {w: r.width, h: r.height, traces: (el.data || []).length,
                svg: !!el.querySelector('.main-svg')};
    })""", PLOT_SELECTOR)


def widget_problems(page) -> list[str]:
    return page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output')]
        .map(o => o.textContent || '')
        .filter(t => /Error displaying widget|Loading widget|model not found/i.test(t))
        .map(t => t.slice(0, 120))""")


def plot_data(page, container_class: str) -> list:
    """The x/y arrays of the plotly graph inside an element with ``container_class``."""
    return page.evaluate("""(cls) => {
        const host = document.querySelector('.' + cls);
        const el = host && (host.matches('.js-plotly-plot') ? host : host.querySelector('.js-plotly-plot'));
        if (!el || !el.data) return null;
        return el.data.map(t => [Array.from(t.x || []), Array.from(t.y || [])]);
    }""", container_class)
