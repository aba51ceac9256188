"""A long, offline, deterministic text to fill a model's context with.

The Python standard library ships the whole "topics" part of its reference manual as a dict
(``pydoc_data.topics.topics``): about 465k characters of real English prose and code, which
SmolLM2's tokenizer turns into about 113k tokens. It needs no download, and joining the topics
in sorted-key order makes the text the same on every run. It does change between Python
releases, so whoever stores a capture also stores the text's sha256 (see ``long_text``).
"""

from __future__ import annotations

import hashlib
import sys

from pigviz._util.validate import check_int

__all__ = ["TEXT_SOURCE", "long_text", "first_tokens"]

TEXT_SOURCE = "pydoc_data.topics.topics, values joined in sorted-key order with blank lines"
_SEPARATOR = "\n\n"


def long_text() -> tuple[str, str]:
    """Return ``(text, sha256_hex)`` of the stdlib reference topics joined deterministically."""
    from pydoc_data.topics import topics  # heavy: a 1 MB text, read only when a long text is asked for

    text = _SEPARATOR.join(topics[key] for key in sorted(topics))
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_source_description() -> str:
    """Where the default text comes from, including the Python version whose stdlib made it."""
    return f"{TEXT_SOURCE} (Python {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro})"


def first_tokens(tokenizer, n: int, text: str | None = None):
    """The first ``n`` token ids of ``text`` (default: ``long_text()``) as a 1-D LongTensor.

    The whole text is tokenised and then cut, rather than cutting the characters first, so
    the last id never depends on where a character cut happened to fall.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    n = check_int("n", n, lo=1)
    if text is None:
        text, _ = long_text()
    elif not isinstance(text, str):
        raise TypeError(f"text must be a str or None, got {type(text).__name__}")
    # verbose=False: the tokenizer would otherwise warn that 113k ids exceed the model's context,
    # which is expected here since only the first n are kept.
    ids = tokenizer(text, verbose=False)["input_ids"]
    if len(ids) < n:
        raise ValueError(f"n must be at most {len(ids)} (the text has only {len(ids)} tokens), got {n}")
    return torch.tensor(ids[:n], dtype=torch.long)
