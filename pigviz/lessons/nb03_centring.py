"""Notebook 03, centring: free for the softmax, and what it does to the keys' angles; re-derived
from the shipped capture. Raw against centred keys under MagicPIG's hashing moved to notebook 04b
(``pigviz.lessons.nb04b_sampling``)."""

from __future__ import annotations

import numpy as np

from pigviz._util.fmt import below
from pigviz.keys.geometry import (
    SHIFT_TOL_FP32,
    SHIFT_TOL_FP64,
    VARIANTS,
    geometry_table,
    head_view,
    shift_invariance,
    shift_passes,
    shipped_capture,
)
from pigviz.keys.projection import all_bucket_shares, key_cloud
from pigviz.lessons.nb04b_sampling import ANSWER4_RAW
from pigviz.lessons.verify import Claim, span

__all__ = [
    "ANSWER4_RAW",
    "claims",
    "span",
    "PROSE_DEFINED",
]

# Numbers the markdown writes that are not measured: MagicPIG's parameters, the model's and the
# capture's fixed facts, a citation, the exercises' test values.
PROSE_DEFINED = {
    "64": "the head dimension of SmolLM2-135M, and the exact window EXACT_RECENT of 64 positions",
    "19": "the layer of the head notebooks 02 to 04 draw (layer 19, head 6)",
    "1000": "how far apart the softmax check's rows sit (pigviz/lessons/exercises/nb03.py)",
}

# The head and query notebooks 02 and 03 draw: layer 19, head 6, its last captured query.
PICTURE_HEAD = (19, 6)


def _two_significant(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{float(f'{x:.2g}'):,.0f}"


def claims() -> list:
    """Notebook 03's headline numbers: centring is free for the softmax, and what it does to the cloud."""
    cap = shipped_capture()
    shift = shift_invariance(cap)
    centred = [r.cone_centred for r in geometry_table(cap)]
    fp64 = below(shift["fp64"] / shift["scale"], SHIFT_TOL_FP64)
    fp32 = below(shift["fp32"] / shift["scale"], SHIFT_TOL_FP32)
    one = all_bucket_shares(cap)  # the widget's one table: 6 planes, seed 0
    fewer = one["centred"] < one["raw"]
    med = {v: float(np.median(one[v])) for v in VARIANTS}
    pic = {v: key_cloud(head_view(cap, *PICTURE_HEAD), -1, v, n_planes=6) for v in VARIANTS}
    return [
        Claim(
            "03",
            "Centring leaves attention unchanged: max |diff| over the largest output, float64 (float32)",
            shift_passes(shift) and shift["fp64"] / shift["scale"] < SHIFT_TOL_FP64,
            f"{fp64} ({fp32})",
        ),
        Claim(
            "03",
            "Centred keys are no cone: cone tightness (mean cos to their mean direction)",
            max(centred) < 0.05,
            f"<= {max(centred):.3f}",
        ),
        Claim(
            "03",
            f"Picture of layer {PICTURE_HEAD[0]}, head {PICTURE_HEAD[1]}: the centred wedge holds far more keys than "
            "the real 64-d bucket (raw: both nearly empty)",
            pic["centred"].share_picture > 3 * pic["centred"].share_real
            and max(pic["raw"].share_picture, pic["raw"].share_real) < 0.001,
            f"centred {pic['centred'].share_picture:.2%} vs {pic['centred'].share_real:.2%}, "
            f"raw {pic['raw'].share_picture:.2%} vs {pic['raw'].share_real:.2%}",
        ),
        Claim(
            "03",
            "One 6-bit table, every head and query: centred bucket emptier than raw in some pairs",
            0 < fewer.sum() < fewer.size / 4 and abs(med["centred"] * 64 - 1) < 0.5 and med["raw"] * 64 < 0.5,
            f"{fewer.sum()} of {fewer.size}; median share centred {med['centred']:.2%}, raw {med['raw']:.2%} "
            f"(even: {1 / 64:.2%})",
        ),
    ]


# --------------------------------------------------------------------------- what the notebook shows
