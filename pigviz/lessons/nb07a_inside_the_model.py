"""Notebook 07a, sampled attention inside a real model: the numbers its prose states (``claims``),
the definitions it writes (``PROSE_DEFINED``) and its loader. The lesson computes its table in its own cells; the
full quality and passkey tables are finding 4's (:mod:`pigviz.lessons.f4_decoding`), the speed
finding 3's (:mod:`pigviz.lessons.f3_bill_and_speed`)."""

from __future__ import annotations

import numpy as np

from pigviz.decode import report
from pigviz.decode.report import load_result
from pigviz.lessons.verify import Claim

__all__ = ["PROSE_DEFINED", "claims", "load_results"]

PROSE_DEFINED = {
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "10": "K = 10, the paper's default (K, L) = (10, 150)",
    "150": "L = 150, the paper's default (K, L) = (10, 150)",
    "64": "the recent window, a default of pigviz.decode.session",
    "1,024": "the live cell's prompt length",
    "8k": "SmolLM2-135M's 8,192-token context, rounded",
    "1e-5": "the tolerance tests/decode/test_offload.py holds the offloaded step's outputs to",
}


def claims() -> list[Claim]:
    """Notebook 07a's statements, re-derived from the shipped files."""
    quality = load_results()[0]
    at_paper = [r for r in quality["rows"] if (r.get("K"), r.get("L")) == (10, 150)]
    kl = {r.get("variant", r["method"]) + str(r.get("seed", "")): float(np.mean(r["kl_per_token"])) for r in at_paper}
    mp = sorted(v for k, v in kl.items() if k.startswith("magicpig"))
    mp_rows = [r for r in at_paper if r["method"] == "magicpig"]
    return [
        Claim(
            "07a",
            "at (10, 150) MagicPIG's mean KL lies between TopK's and StreamingLLM's at the same budget",
            bool(kl["topk"] < min(mp) and max(mp) < kl["streaming"]),
            f"TopK {kl['topk']:.3f}, MagicPIG {min(mp):.3f}-{max(mp):.3f}, StreamingLLM {kl['streaming']:.3f}",
        ),
        Claim(
            "07a",
            "two of MagicPIG's three seeds agree closely (mean KL within 5%) and the third lands well above them "
            "(over 10% above the higher of the two)",
            bool(len(mp) == 3 and mp[1] - mp[0] < 0.05 * mp[0] and mp[2] > 1.1 * mp[1]),
            "seeds' mean KL, sorted: " + ", ".join(f"{v:.3f}" for v in mp),
        ),
        Claim(
            "07a",
            "section 3's shipped MagicPIG runs kept the cache in float32: the run's dtype is float32 and no row "
            "records a kv_dtype (the bf16 default came after these runs)",
            bool(
                quality["environment"]["dtype"] == "float32"
                and mp_rows
                and not any("kv_dtype" in r["options"] for r in mp_rows)
            ),
            f"dtype {quality['environment']['dtype']}, {len(mp_rows)} MagicPIG rows, none with kv_dtype",
        ),
        Claim(
            "07a",
            "at (10, 150) Quest with small pages (4 keys) lands closer to dense than every MagicPIG seed",
            bool(kl["quest/4"] < min(mp)),
            f"Quest (pages of 4) {kl['quest/4']:.3f}, MagicPIG at best {min(mp):.3f}",
        ),
    ]


def load_results() -> tuple[dict, dict, dict]:
    """The shipped quality, passkey and CPU speed results (each checked against the manifest's sha256)."""
    return load_result(report.QUALITY_FILE), load_result(report.PASSKEY_FILE), load_result(report.SPEED_FILE)
