"""Sampled attention inside real generation (notebooks 07a and 07b): ``session`` swaps the model's decode
attention, ``generation`` generates, ``evaluate`` measures quality and passkey retrieval,
``report`` reads the shipped results, ``custom`` runs an estimator of your own inside decoding;
``cache`` keeps MagicPIG's sampled layers half-size (bf16) or split for its CPU placement, whose
per-layer step is ``offload``.
"""

from pigviz.decode import custom, evaluate, generation, report, session
from pigviz.decode.generation import generate

__all__ = ["session", "custom", "generation", "evaluate", "report", "generate"]
