"""The static site: built from the executed notebooks, opened from local files with every
network request blocked, and every figure drawn."""

from pathlib import Path

import pytest

from pigviz.site import NOTEBOOK_GLOB, build_site

from .waits import wait_for_js

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
DRAWN_JS = """() => [...document.querySelectorAll('.pigviz-static-plot')]
    .filter(el => el.querySelector('.main-svg') && (el.data || []).length > 0).length"""


@pytest.fixture(scope="module")
def site(browser_tools, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    return build_site(out, NOTEBOOK_DIR)


def test_site_renders_offline(site, page, artifacts_dir):
    page.route("http*://**", lambda route: route.abort())  # offline: only file:// loads
    page.goto(site.as_uri())
    links = page.locator("ol a")
    pages = [links.nth(i).get_attribute("href") for i in range(links.count())]
    expected = sorted(p.stem + ".html" for p in NOTEBOOK_DIR.glob(NOTEBOOK_GLOB))
    assert pages == expected, f"expected the index to list the notebooks in teaching order {expected}, saw {pages}"
    for href in pages:
        page.goto((site.parent / href).as_uri())
        page.wait_for_load_state("load")
        n_plots = page.locator(".pigviz-static-plot").count()
        wait_for_js(
            page,
            f"(n) => ({DRAWN_JS})() === n",
            n_plots,
            f"{href}: all {n_plots} figures drawn (an SVG and >= 1 trace each)",
            "figures_drawn",
            seen=lambda: f"{page.evaluate(DRAWN_JS)} of {n_plots} drawn",
        )
        if "$" in page.evaluate("() => document.body.innerText"):
            # MathJax typesets after the load event: wait for its first formula, not a fixed time.
            wait_for_js(
                page,
                "() => document.querySelectorAll('.MathJax_CHTML, .MathJax, .MathJax_Display').length > 0",
                None,
                f"{href}: MathJax typesetting the page's formulas (TeX left as source otherwise)",
                "page_load",
                seen=lambda: (
                    "no MathJax element; window.MathJax "
                    + (
                        "defined"
                        if page.evaluate("() => !!window.MathJax")
                        else "undefined (script did not load offline)"
                    )
                ),
            )
        page.screenshot(path=str(artifacts_dir / f"site-{href.removesuffix('.html')}.png"))
