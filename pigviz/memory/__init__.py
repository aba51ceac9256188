"""The memory arithmetic of KV caches and LSH tables (notebooks 05a and 05b).

* ``model_shapes``: layers, KV heads, head size of known models (and any config.json).
* ``budget``: bytes per token, read time, the LSH table bill, fetch vs recompute.
* ``allocators``: contiguous vs paged reservations, prefix sharing, preemption.
"""

from pigviz.memory import allocators, budget, model_shapes

__all__ = ["model_shapes", "budget", "allocators"]
