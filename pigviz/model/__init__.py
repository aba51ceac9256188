"""A real model, offline: loading (``loading``), a long text (``texts``), recording post-RoPE
q/k/v (``capture``) and the small capture shipped in ``data/`` (``shipped``).

These import torch and transformers only when a function needs them.
"""

from pigviz.model import capture, loading, shipped, texts

__all__ = ["loading", "texts", "capture", "shipped"]
