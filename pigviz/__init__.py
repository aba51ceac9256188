"""pigviz: how an LLM reads its KV cache at decode time, and how MagicPIG samples it instead.

Compute modules are plain numpy/torch; ``pigviz.plots`` turns their results into plotly
figures and ``pigviz.widgets`` wires those into ipywidgets. Import what you need:

    from pigviz import stick_balance, simhash, budget
"""
__version__ = "0.1.0"


def setup_notebook() -> None:
    """Use plotly's mimetype renderer: JupyterLab draws it with the bundled extension,
    and the saved notebook stays small (no copy of plotly.js in every output)."""
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype"


def __getattr__(name: str):
    # ``pigviz.generate`` without importing torch/transformers on ``import pigviz``.
    if name == "generate":
        from pigviz.generation import generate

        return generate
    raise AttributeError(f"module 'pigviz' has no attribute {name!r}")
