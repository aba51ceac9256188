"""The words behind the shipped capture's positions: its 8,192 tokens, decoded one by one.

``pigviz/data/smollm2_8k_tokens.json`` holds the token ids of the shipped capture's text
(``texts.first_tokens``, 8,192 of them) and each one decoded on its own by the bundled
model's tokenizer, so a notebook can show which words a method reads without loading the
model. ``pigviz data tokens`` makes it and its manifest entry; :func:`load_tokens` reads it,
checked against its manifest sha256 and against the capture it belongs to (the sha256 of its
ids must be the capture's ``token_ids_sha256``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import pigviz
from pigviz._util.io import sha256_file, write_json_atomic
from pigviz.model import shipped, texts
from pigviz.model.loading import load_model

__all__ = ["TOKENS_FILE", "TOKENS_COMMAND", "FORMAT", "token_ids_sha256", "build_tokens", "write_tokens", "load_tokens"]

TOKENS_FILE = "smollm2_8k_tokens.json"
TOKENS_COMMAND = "pigviz data tokens"
FORMAT = "pigviz-tokens-v1"


def token_ids_sha256(ids) -> str:
    """The sha256 a capture records for its token ids (little-endian int64 bytes)."""
    return hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest()


def build_tokens(tokenizer, n: int = shipped.SHIPPED_N_TOKENS) -> dict:
    """The first ``n`` tokens of the default text: ids, each decoded alone, and the hashes
    that tie them to a capture. ValueError if the pieces do not join back into the text the
    ids decode to (a tokenizer whose tokens are not whole characters)."""
    ids = [int(i) for i in texts.first_tokens(tokenizer, n)]
    pieces = [tokenizer.decode([i]) for i in ids]
    if "".join(pieces) != tokenizer.decode(ids):
        raise ValueError("the tokens decoded one by one do not join into the decoded text; cannot ship them")
    _, text_sha = texts.long_text()
    return {
        "format": FORMAT,
        "n_tokens": n,
        "text_source": texts.text_source_description(),
        "text_sha256": text_sha,
        "token_ids_sha256": token_ids_sha256(ids),
        "ids": ids,
        "tokens": pieces,
    }


def write_tokens(out_dir=None, *, progress: bool = True):
    """Build the tokens of the shipped capture with the bundled tokenizer, refuse them unless
    their ids are the capture's, write the JSON and its manifest entry. Returns the path."""
    entry = shipped.read_manifest(out_dir)["files"].get(shipped.CAPTURE_FILE, {})  # before the load
    _, tokenizer = load_model(shipped.SHIPPED_MODEL, device="cpu", progress=progress)
    data = build_tokens(tokenizer)
    want = entry.get("token_ids_sha256")
    if want and data["token_ids_sha256"] != want:
        raise ValueError(
            f"the tokens made here (sha256 {data['token_ids_sha256'][:12]}...) are not the shipped capture's "
            f"({want[:12]}...): this Python's stdlib text differs from the one the capture was made from"
        )
    directory = shipped.data_dir() if out_dir is None else Path(out_dir)
    path = write_json_atomic(directory / TOKENS_FILE, data, indent=None)
    _record(path, data, out_dir)
    return path


def _record(path, data: dict, directory) -> None:
    import torch  # heavy: torch loads in ~1 s; only the data command records versions
    import transformers  # heavy: transformers loads in seconds; only the data command needs it

    manifest = shipped.read_manifest(directory)
    manifest["files"][TOKENS_FILE] = {
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "what": (
            f"the {data['n_tokens']} token ids of the shipped capture's text (pigviz.model.texts.long_text, "
            "first tokens) and each decoded alone by SmolLM2-135M's tokenizer, to show the words at the "
            "positions a method reads"
        ),
        "command": TOKENS_COMMAND,
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
        "text_sha256": data["text_sha256"],
        "token_ids_sha256": data["token_ids_sha256"],
    }
    write_json_atomic(shipped.manifest_path(directory), manifest)


def load_tokens(*, verify: bool = True) -> list[str]:
    """The shipped capture's tokens, one string per position (0 .. 8191). With ``verify``, the
    file must match its manifest sha256 and its ids the capture's ``token_ids_sha256``."""
    path = shipped.verified_path(TOKENS_FILE, TOKENS_COMMAND, verify=verify)
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT or len(data.get("tokens", ())) != len(data.get("ids", ())):
        raise ValueError(f"{path} is not a {FORMAT} file with one token per id")
    if verify:
        capture = shipped.read_manifest()["files"].get(shipped.CAPTURE_FILE, {}).get("token_ids_sha256")
        if token_ids_sha256(data["ids"]) != data["token_ids_sha256"] or (
            capture and capture != data["token_ids_sha256"]
        ):
            raise ValueError(f"{path}: its token ids are not the shipped capture's; run `{TOKENS_COMMAND}`")
    return list(data["tokens"])
