"""Every deadline of the browser tests, in one place, and one way to wait for a condition.

No test sleeps for a fixed time hoping the page has caught up: each waits for the condition
it needs (a kernel idle, a cell executed, a plot's data changed) and fails at a deadline with
a message naming the notebook, the cell or widget and what was awaited.

The deadlines are generous on purpose (a loaded 2-core CI runner is several times slower
than a laptop) and cost nothing when the condition comes early. Scale them all with
PIGVIZ_BROWSER_TIMEOUT_SCALE, e.g. 3 on a very slow machine or 0.2 to see a failure quickly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def _scale() -> float:
    raw = os.environ.get("PIGVIZ_BROWSER_TIMEOUT_SCALE", "1")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PIGVIZ_BROWSER_TIMEOUT_SCALE must be a number, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"PIGVIZ_BROWSER_TIMEOUT_SCALE must be positive, got {raw!r}")
    return value


TIMEOUT_SCALE = _scale()

# Base deadlines in seconds, before scaling.
_BASE = {
    "server_start": 120,  # jupyter lab / voila answering HTTP
    "page_load": 120,  # a page and its first cells or widgets in the DOM
    "kernel_ready": 180,  # kernel started, idle, and the page connected to it
    "run_all": 420,  # Run All, from click to the last cell executed
    "run_all_start": 60,  # Run All, from click to the first cell queued
    "figures_drawn": 120,  # every plotly output drawn after Run All
    "save": 60,  # Ctrl+S to the file written
    "widget_update": 90,  # a widget action to the figure it drives changing
    "settle": 60,  # the kernel idle and the figures still after an update
    "kernel_shutdown": 60,  # kernels gone after DELETE
    "element": 30,  # an element to act on (a menu item, a dialog button)
}


def timeout(kind: str) -> float:
    """The deadline, in seconds, for one kind of wait."""
    return _BASE[kind] * TIMEOUT_SCALE


def timeout_ms(kind: str) -> float:
    return timeout(kind) * 1000


class WaitTimeout(AssertionError):
    """A condition the test waited for did not come before its deadline."""


def describe_timeout(what: str, seconds: float, seen: Any = None) -> str:
    msg = (
        f"{what}: not reached within {seconds:.0f} s "
        f"(deadline scaled by PIGVIZ_BROWSER_TIMEOUT_SCALE={TIMEOUT_SCALE:g})"
    )
    if seen is not None:
        msg += f"; last seen: {seen}"
    return msg


def poll_until(
    check: Callable[[], Any], what: str, kind: str, interval: float = 0.25, seen: Callable[[], Any] | None = None
) -> Any:
    """Call ``check`` until it returns something truthy, and return that.

    ``what`` names the notebook, the cell or widget and the condition; ``seen`` (optional)
    describes the state at the deadline for the failure message. ``check`` may raise
    :class:`WaitTimeout` itself to fail early with a more precise message (e.g. a cell that
    will never run). The sleep is only the polling interval, never the wait itself."""
    limit = timeout(kind)
    deadline = time.monotonic() + limit
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(describe_timeout(what, limit, seen() if seen else last))
        time.sleep(interval)


def wait_for_js(
    page, expression: str, arg: Any, what: str, kind: str, seen: Callable[[], Any] | None = None, polling: int = 250
) -> Any:
    """``page.wait_for_function`` with a deadline from this module and a message that says
    what was awaited, instead of Playwright's bare "Timeout 30000ms exceeded"."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return page.wait_for_function(expression, arg=arg, timeout=timeout_ms(kind), polling=polling).json_value()
    except PlaywrightTimeout:
        raise WaitTimeout(describe_timeout(what, timeout(kind), seen() if seen else None)) from None
