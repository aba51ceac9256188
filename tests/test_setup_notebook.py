"""setup_notebook keeps a renderer the environment chose, and picks Colab's on Colab."""

import sys
import types

import plotly.io as pio
import pytest

import pigviz


@pytest.fixture(autouse=True)
def _restore_renderer(monkeypatch):
    before = pio.renderers.default
    for name in ("PLOTLY_RENDERER", "VSCODE_PID", "VSCODE_CLI"):
        monkeypatch.delenv(name, raising=False)
    yield
    pio.renderers.default = before


def test_jupyterlab_gets_the_mimetype_renderer():
    assert pigviz.setup_notebook() == "plotly_mimetype"


def test_colab_gets_plotlys_colab_renderer(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert pigviz.setup_notebook() == "colab"


@pytest.mark.parametrize("variable", ["PLOTLY_RENDERER", "VSCODE_PID"])
def test_a_renderer_the_environment_chose_is_kept(monkeypatch, variable):
    pio.renderers.default = "svg"
    monkeypatch.setenv(variable, "svg" if variable == "PLOTLY_RENDERER" else "1234")
    assert pigviz.setup_notebook() == "svg"
