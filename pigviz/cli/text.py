"""The text the CLI prints: reports and tables built from the compute layers' rows and dicts.

Compute modules return numbers (``pigviz.memory.budget``, ``pigviz.study.findings``); this module
writes them as text for a terminal. The notebooks render the same rows as tables
(:func:`pigviz.lessons.table`)."""

from __future__ import annotations

import pandas as pd

from pigviz.memory import budget
from pigviz.study import findings

__all__ = ["budget_report_text", "model_table", "study_summary", "text_table"]


def text_table(frame: pd.DataFrame) -> str:
    """A plain-text table of ``frame``'s cells (strings): the first column left-aligned, the rest
    right-aligned, a rule under the header."""
    cells = [list(map(str, frame.columns))] + frame.astype(str).values.tolist()
    widths = [max(len(row[i]) for row in cells) for i in range(len(frame.columns))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def budget_report_text(report: dict) -> str:
    """``pigviz budget``'s report: a :func:`~pigviz.memory.budget.budget_report` dict, one line a quantity."""
    m = report["model"]
    rows = [
        ("model", f"{m['name']}: {m['layers']} layers x {m['kv_heads']} KV heads x head_dim {m['head_dim']}"),
        ("context", f"{report['context']:,} tokens at {report['dtype_bytes']} B per element"),
        ("KV per token", f"{report['kv_bytes_per_token']:,} B = {budget.format_bytes(report['kv_bytes_per_token'])}"),
        ("KV per sequence", budget.format_bytes(report["kv_bytes"])),
        (
            "read once at",
            f"{report['read_bandwidth_bytes_per_s'] / 1e12:g} TB/s: "
            f"{report['kv_read_time_s'] * 1e3:.3g} ms per generated token",
        ),
        (
            f"LSH tables (K={report['K']}, L={report['L']})",
            f"{report['table_bytes_per_head_token']} B per token per (layer, KV head) beside a "
            f"{report['kv_pair_bytes_per_head_token']} B key+value pair",
        ),
        ("table entries", budget.format_bytes(report["table_bytes"])),
        ("bucket offsets", budget.format_bytes(report["bucket_metadata_bytes"])),
        ("index / KV", f"{report['index_to_kv_ratio']:.2f}x"),
        (
            "candidates per query",
            f"{report['candidates_per_query']:,.0f} entries = {report['candidate_index_bytes']:,.0f} B of indices",
        ),
        (
            "share of key bytes",
            f"{report['candidate_share_of_key_bytes']:.2%} of "
            f"{report['key_bytes_per_head']:,} B (one layer, one KV head)",
        ),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    lines += [f"note: {note}" for note in report["notes"]]
    return "\n".join(lines)


def model_table(context: int, dtype_bytes: int = 2) -> str:
    """:func:`~pigviz.memory.budget.model_rows` as a plain-text table (``pigviz budget --model all``)."""
    rows = budget.model_rows(context, dtype_bytes)
    headers = list(rows[0])
    formats = {**budget.MODEL_ROW_FORMATS, headers[6]: "{:.2f}"}

    def cell(key, value):
        if value is None:
            return "?"
        return formats[key].format(value) if key in formats else str(value)

    return text_table(pd.DataFrame([{k: cell(k, r[k]) for k in headers} for r in rows], columns=headers))


def study_summary(results: dict) -> str:
    """``pigviz study``'s summary: one line per series of a results file."""
    head = f"{'series':<34}{'budget':>8}{'sampled':>9}{'error':>9}{'± seeds':>9}{'rows':>7}"
    lines = [head, "-" * len(head)]
    for r in findings.summary_rows(results):
        sampled = f"{100 * r['budget_sampled']:>8.2f}%" if "budget_sampled" in r else f"{'':>9}"
        lines.append(
            f"{r['name']:<34}{100 * r['budget']:>7.2f}%{sampled}{r['error']:>9.4f}{r['error_std']:>9.4f}{r['rows']:>7}"
        )
    lines.append(
        "budget: keys read (exact set included) / visible keys; sampled (MagicPIG): keys sampled / keys "
        "it could sample (visible - sinks - recent), the share MagicPIG's authors report"
    )
    return "\n".join(lines)
