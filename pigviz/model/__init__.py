"""A real model, offline: loading (``loading``), a long text (``texts``), recording post-RoPE
q/k/v (``capture``), the small capture shipped in ``pigviz/data/`` (``shipped``) and a GGUF cut to its
first layers (``gguf_cut``), and the capture's text as tokens (``tokens``).

These import torch and transformers only when a function needs them.
"""

from pigviz.model import capture, gguf_cut, loading, shipped, texts, tokens

__all__ = ["loading", "texts", "capture", "shipped", "gguf_cut", "tokens"]
