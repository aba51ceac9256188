"""pigviz: how an LLM reads its KV cache at decode time, and how MagicPIG samples it instead.

The package is layered; each layer imports only the ones above it in this list:

* ``_util``: atomic writes, sha256, argument checks
* ``attention``: exact softmax attention and the baselines (TopK, oracle, hybrid, Quest, StreamingLLM)
* ``lsh``: SimHash probabilities and hashing, the CSR index, MagicPIG's estimator
* ``toy``: the stick-balance toy (notebook 01)
* ``memory``: model shapes, KV budget, allocators (notebooks 05a and 05b)
* ``model``: loading a real model offline, texts, capture, the shipped capture
* ``keys``, ``study``, ``decode``: experiments on a real model (notebooks 02-04, 06, 07)
* ``plots``: plotly figure builders; ``widgets``: ipywidgets compositions
* ``lessons``: per notebook, its claims (``pigviz verify``) and exercises
* ``course``: the learner notebooks shipped in ``pigviz/notebooks/``, copied where the learner works
* ``cli``: the ``pigviz`` command; ``site``: the static site

The shipped data live in ``pigviz/data/`` (``pigviz.model.shipped.data_dir``).
"""

__version__ = "0.1.0"

__all__ = ["__version__", "setup_notebook"]


def setup_notebook() -> None:
    """Use plotly's mimetype renderer: JupyterLab draws it with the bundled extension,
    and the saved notebook stays small (no copy of plotly.js in every output)."""
    import plotly.io as pio  # heavy: plotly is needed only by notebooks

    pio.renderers.default = "plotly_mimetype"
