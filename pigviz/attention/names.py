"""What each attention method is called on a page: one name per method, used by tables and figures."""

from __future__ import annotations

__all__ = ["METHOD_NAMES", "method_label"]

METHOD_NAMES = {
    "dense": "dense",
    # the speed benchmark's other dense paths (bench_decode.py): "dense" there is transformers' SDPA
    "dense_grouped": "dense, grouped (fp32)",
    "dense_grouped_bf16": "dense, grouped (bf16)",
    "magicpig": "MagicPIG",
    "topk": "TopK (oracle)",
    "oracle": "oracle sampling",
    "hybrid": "hybrid (TopK + sampling)",
    "quest": "Quest",
    "streaming": "StreamingLLM",
    "quest_rank_all": "Quest, rank all",
}


def method_label(spec: str) -> str:
    """Display name of a method, or of a variant such as "quest/4" (Quest, pages of 4)."""
    method, _, page = spec.partition("/")
    name = METHOD_NAMES.get(method, method)
    if method.startswith("quest"):
        return f"{name} (pages of {page or 16})"
    return name
