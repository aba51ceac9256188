"""pigviz: how an LLM reads its KV cache at decode time, and how MagicPIG samples it instead.

The package is layered; each layer imports only the ones above it in this list:

* ``_util``: atomic writes, sha256, argument checks, MagicPIG's defaults (``MagicPIGConfig``)
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

import os
import sys

from pigviz._util.config import DEFAULTS, MagicPIGConfig  # light: dataclasses only
from pigviz._util.threads import limit_to_quota, settle_for_notebooks  # light: os, math, threadpoolctl

__version__ = "0.1.0"

__all__ = ["__version__", "setup_notebook", "MagicPIGConfig", "DEFAULTS"]


def setup_notebook() -> str:
    """Pick plotly's renderer for where the notebook runs, and return its name.

    In JupyterLab (and for nbval and the static site) it is the mimetype renderer: JupyterLab
    draws it with the bundled extension and the saved notebook stays small (no copy of plotly.js
    in every output). Where the environment already chose one, it is kept: ``PLOTLY_RENDERER``,
    VS Code's notebooks; on Colab it is plotly's ``colab`` renderer, which Colab's front end draws.

    Threads first: idle OpenMP threads sleep and numpy's BLAS runs one thread, so a busy core
    does not stall the lessons (``pigviz._util.threads.settle_for_notebooks``, measured there), and
    where the container has a CPU quota below its visible cores (Binder) the thread pools are
    capped at the quota (``pigviz._util.threads.limit_to_quota``)."""
    import plotly.io as pio  # heavy: plotly is needed only by notebooks

    settle_for_notebooks()  # before limit_to_quota, which sets OPENBLAS_NUM_THREADS where it caps
    limit_to_quota()

    if os.environ.get("PLOTLY_RENDERER"):
        pass  # plotly applied it when it was imported
    elif "google.colab" in sys.modules:
        pio.renderers.default = "colab"
    elif os.environ.get("VSCODE_PID") or os.environ.get("VSCODE_CLI"):
        pass  # plotly picked VS Code's renderer
    else:
        pio.renderers.default = "plotly_mimetype"
    return pio.renderers.default
