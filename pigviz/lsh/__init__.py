"""Locality-sensitive hashing and MagicPIG's sampler.

* ``simhash``: SimHash probabilities (per bit, one table, "at least m of L") and hashing.
* ``simhash_checks``: Monte-Carlo counts that check those formulas, and the 2-D picture.
* ``index``: the CSR hash tables of one layer (torch).
* ``magicpig``: the sampled-attention estimator for one decode step (torch): the readable reference.
* ``reference``: the teaching tier, MagicPIG for one query head in one screen of numpy
  (:func:`magicpig_reference`, :func:`simhash_codes`); tests hold it to ``magicpig``.
* ``fused``: the same step as one compiled CPU pass per layer (numba), returning its log-normaliser,
  its rows split between threads (the same bits at any thread count).
* ``kernels``: the numba loops behind ``fused`` and the fast index build.
* ``estimators``: MagicPIG and the affordable estimators in the estimator protocol (:mod:`pigviz.attention.protocol`).

``index``, ``magicpig``, ``fused`` and ``kernels`` import torch (and numba where installed); import
them as ``from pigviz.lsh import magicpig``. ``estimators`` loads them on its first call.
"""

from pigviz.lsh import reference, simhash, simhash_checks
from pigviz.lsh.reference import magicpig_reference, simhash_codes

__all__ = [
    "magicpig_reference",
    "simhash_codes",
    "reference",
    "simhash",
    "simhash_checks",
    "index",
    "magicpig",
    "fused",
    "kernels",
    "estimators",
]
