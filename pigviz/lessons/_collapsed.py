"""Text a notebook shows folded (solutions, computed answers), shared by the lesson modules."""

from __future__ import annotations

import html

__all__ = ["Collapsed"]


class Collapsed:
    """Text a notebook shows folded: one click on the summary opens it (HTML ``<details>``).

    The plain-text form (what nbval compares and what a terminal prints) is the whole text."""

    def __init__(self, summary: str, text: str):
        self.summary, self.text = str(summary), str(text)

    def __repr__(self) -> str:
        return f"[{self.summary}]\n{self.text}"

    def _repr_html_(self) -> str:
        return (
            f"<details><summary><b>{html.escape(self.summary)}</b> (click to open)</summary>"
            f"<pre style='white-space:pre-wrap'>{html.escape(self.text)}</pre></details>"
        )
