"""Exact softmax attention and the decode-time baselines MagicPIG is compared with (TopK,
oracle sampling, the hybrid, Quest, StreamingLLM), all in ``baselines``; ``cost`` counts the
bytes each of them (and MagicPIG and the affordable estimators) reads in one decode step;
``protocol`` is the one form every estimator takes, ``estimator(q, keys, values, budget) ->
(output, read)``, yours and the library's.

    from pigviz.attention import quest_attention, topk_attention
"""

from pigviz.attention import baselines, cost, protocol
from pigviz.attention.baselines import (
    check_decode_shapes,
    dense_attention,
    hybrid_attention,
    oracle_sampling_attention,
    quest_attention,
    quest_rank_all_attention,
    softmax_attention,
    softmax_attention_torch,
    stable_softmax,
    streaming_attention,
    topk_attention,
)

__all__ = [
    "baselines",
    "cost",
    "protocol",
    "stable_softmax",
    "softmax_attention",
    "softmax_attention_torch",
    "check_decode_shapes",
    "dense_attention",
    "topk_attention",
    "oracle_sampling_attention",
    "hybrid_attention",
    "streaming_attention",
    "quest_attention",
    "quest_rank_all_attention",
]
