"""The documentation site in a real browser, opened from local files with every request that
would leave the machine aborted and recorded: a lesson with its plotly figures, formulas and
folded code, the API page of ``evaluate_estimator``, and the search results for "inclusion
probability". A page that needed the network fails."""

from pathlib import Path

import pytest

from pigviz import course

from ..test_site import build_once
from .waits import wait_for_js

DRAWN_JS = """() => [...document.querySelectorAll('.pigviz-static-plot')]
    .filter(el => el.querySelector('.main-svg') && (el.data || []).length > 0).length"""


@pytest.fixture(scope="session")
def site(browser_tools, tmp_path_factory) -> Path:
    return build_once(tmp_path_factory).parent


@pytest.fixture
def offline_page(page):
    """The test's page with the network cut off: only file:// (and data:, about:) loads; every
    other request is aborted and listed in ``page.blocked``."""
    page.blocked = []

    def abort(route):
        page.blocked.append(route.request.url)
        route.abort()

    page.route(lambda url: not url.startswith(("file:", "data:", "about:", "blob:")), abort)
    yield page
    assert page.blocked == [], f"the page asked the network for {page.blocked}"


def _open(page, path: Path, fragment: str = "", query: str = "") -> None:
    page.goto(path.as_uri() + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else ""))
    page.wait_for_load_state("load")


def test_a_lesson_draws_its_figures_and_formulas_offline_with_launch_links_and_folded_code(
    site, offline_page, artifacts_dir
):
    page = offline_page
    stem = "01_stick_balance"
    _open(page, site / f"{stem}.html")
    n_plots = page.locator(".pigviz-static-plot").count()
    assert n_plots > 0, "lesson 01 shows its plotly figures"
    wait_for_js(
        page,
        f"(n) => ({DRAWN_JS})() === n",
        n_plots,
        f"{stem}: all {n_plots} figures drawn by the bundled plotly.js (an SVG and >= 1 trace each)",
        "figures_drawn",
        seen=lambda: (
            f"{page.evaluate(DRAWN_JS)} of {n_plots} drawn; window.Plotly "
            + ("defined" if page.evaluate("() => !!window.Plotly") else "undefined")
        ),
    )
    # MathJax typesets after the load event: wait for the formulas, not a fixed time.
    wait_for_js(
        page,
        "() => document.querySelectorAll('span.math .MathJax, div.math .MathJax_Display').length > 0"
        " && document.querySelectorAll('.MathJax_Processing, .MathJax_Preview:not(:empty)').length === 0",
        None,
        f"{stem}: the local MathJax typesetting the page's formulas",
        "page_load",
        seen=lambda: "window.MathJax " + ("defined" if page.evaluate("() => !!window.MathJax") else "undefined"),
    )
    assert "\\(" not in page.locator("article").inner_text(), "a formula left as TeX source"
    bar = page.locator(".pigviz-launch").first
    assert bar.is_visible()
    assert bar.locator("a", has_text="Open in Colab").get_attribute("href") == course.colab_url(f"{stem}.ipynb")
    assert bar.locator("a", has_text="Launch Binder").get_attribute("href") == course.binder_url(f"{stem}.ipynb")
    download = bar.locator("a", has_text="Download the notebook").get_attribute("href")
    assert (site / download).read_bytes() == (course.learner_dir() / f"{stem}.ipynb").read_bytes()
    # A collapsed cell: its output shows, its code only after "Show code cell source".
    folded = page.locator(".tag_hide-input").first
    code = folded.locator(".cell_input pre").first
    assert not code.is_visible(), "a source_hidden cell's code shows without a click"
    folded.locator("summary").first.click()
    code.wait_for(state="visible")
    page.screenshot(path=str(artifacts_dir / f"site-{stem}.png"))


def test_the_api_page_of_evaluate_estimator(site, offline_page, artifacts_dir):
    page = offline_page
    anchor = "pigviz.study.estimators.evaluate_estimator"
    _open(page, site / "api" / "estimators.html", fragment=anchor)
    entry = page.locator(f'dt[id="{anchor}"]')
    entry.wait_for(state="visible")
    assert "evaluate_estimator(" in entry.inner_text()
    body = page.locator(f'dt[id="{anchor}"] + dd').inner_text()
    assert "estimator" in body and "budget" in body, f"the docstring of evaluate_estimator, saw {body[:200]!r}"
    box = entry.bounding_box()
    assert box is not None and 0 <= box["y"] < page.viewport_size["height"], "the fragment scrolled to the entry"
    nav = page.locator(".bd-sidebar-primary").inner_text()
    assert "API reference" in nav and "Lessons" in nav, "the book's navigation is beside the page"
    page.screenshot(path=str(artifacts_dir / "site-api-estimators.png"))


def test_search_finds_the_inclusion_probability(site, offline_page, artifacts_dir):
    page = offline_page
    _open(page, site / "search.html", query="q=inclusion+probability")
    results = page.locator("#search-results ul.search li")
    wait_for_js(
        page,
        "() => document.querySelectorAll('#search-results ul.search li').length > 0",
        None,
        'search.html: results for "inclusion probability" (searchindex.js loaded from disk)',
        "page_load",
        seen=lambda: page.locator("#search-results").inner_text()[:200],
    )
    hrefs = [results.nth(i).locator("a").first.get_attribute("href") for i in range(results.count())]
    assert any(h.startswith("04a_simhash_scurves.html") for h in hrefs), f"lesson 04a among the results, saw {hrefs}"
    page.screenshot(path=str(artifacts_dir / "site-search.png"))
