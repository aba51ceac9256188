"""nbval settings for the notebooks (as TransformerLens does): compare printed text,
skip rich payloads whose bytes change between runs without the numbers changing."""

SKIP_MIMETYPES = (
    "text/html",
    "image/png",
    "image/svg+xml",
    "application/javascript",
    "application/vnd.plotly.v1+json",
    "application/vnd.jupyter.widget-view+json",
    "stderr",
)


def pytest_collectstart(collector):
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare += SKIP_MIMETYPES
