"""The static site: built from the executed notebooks, opened from local files with every
network request blocked, and every figure drawn."""
from pathlib import Path

import pytest

from pigviz.site import build_site

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    return build_site(out, NOTEBOOK_DIR)


def test_site_renders_offline(site, page, artifacts_dir):
    page.route("http*://**", lambda route: route.abort())  # offline: only file:// loads
    page.goto(site.as_uri())
    links = page.locator("ol a")
    pages = [links.nth(i).get_attribute("href") for i in range(links.count())]
    expected = sorted(p.stem + ".html" for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    assert pages == expected, "the index lists the notebooks in teaching order"
    for href in pages:
        page.goto((site.parent / href).as_uri())
        page.wait_for_load_state("load")
        n_plots = page.locator(".pigviz-static-plot").count()
        drawn = page.evaluate("""() => [...document.querySelectorAll('.pigviz-static-plot')]
            .filter(el => el.querySelector('.main-svg') && (el.data || []).length > 0).length""")
        assert drawn == n_plots, f"{href}: {drawn} of {n_plots} figures drawn"
        if "$" in page.evaluate("() => document.body.innerText"):
            page.wait_for_timeout(1500)
            math = page.locator(".MathJax_CHTML, .MathJax, .MathJax_Display").count()
            assert math > 0, f"{href}: formulas left as TeX source (MathJax did not load offline)"
        page.screenshot(path=str(artifacts_dir / f"site-{href.removesuffix('.html')}.png"))
