"""Locality-sensitive hashing and MagicPIG's sampler.

MagicPIG's step exists in three tiers, each with one job; tests pin them together:

1. **The reference** (``reference``, numpy, one screen): :func:`~pigviz.lsh.reference.simhash_codes` (the bucket coder)
   and :func:`~pigviz.lsh.reference.magicpig_reference` (one query head, one step). It is the specification and the
   lessons' solution. A change to the method (the inclusion rule, the coder) starts here.
2. **The torch engine** (``index`` + ``magicpig``): the CSR tables of one layer, built once and
   grown as tokens arrive, and :func:`pigviz.lsh.magicpig.attend` over them (the CPU fallback,
   and on a GPU a padded, fixed-shape form). Its coder is :func:`pigviz.lsh.index.bucket_ids`,
   the reference's torch twin, which every torch path calls (the index, the offloaded step of
   ``pigviz.decode.offload``, the study of real keys in ``pigviz.keys.hashing``).
3. **The compiled CPU kernel** (``fused`` + ``kernels``, numba): the same step as one pass per
   layer, and the fast index build, whose bit packer (``kernels.pack_buckets``) is the only
   other coder.

To change the method, change the reference, then the engine and the kernel; these tests name
what must follow: ``tests/lsh/test_one_coder.py`` (every path that hashes against
:func:`~pigviz.lsh.reference.simhash_codes`), ``tests/lsh/test_reference.py`` (the engine reads the reference's keys on
every shipped head, ``min_hits`` included) and ``tests/lsh/test_fused.py`` (the kernel against the
engine). The method's defaults (K, L, min_hits, sinks, recent, seed, buffer) are held once,
in ``pigviz.DEFAULTS`` (:class:`pigviz.MagicPIGConfig`).

Beside the tiers:

* ``simhash``: the formulas (one bit, one table, "at least m of L", log u that never cancels).
* ``simhash_checks``: Monte-Carlo counts that check those formulas, and the 2-D picture
  (``SimHash``: L tables of K planes drawn table by table, hashed by the reference's coder).
* ``estimators`` and ``affordable``: MagicPIG and the affordable estimators in the estimator
  protocol (:mod:`pigviz.attention.protocol`).

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
