"""The shipped tokens: checked against their manifest and the capture, rebuilt by the tokenizer."""

import json

import pytest

from pigviz.model import shipped, tokens


def test_the_shipped_tokens_are_the_captures_and_match_their_manifest():
    pieces = tokens.load_tokens()
    assert len(pieces) == shipped.SHIPPED_N_TOKENS and all(isinstance(p, str) and p for p in pieces)
    entry = shipped.read_manifest()["files"][tokens.TOKENS_FILE]
    capture = shipped.read_manifest()["files"][shipped.CAPTURE_FILE]
    assert entry["token_ids_sha256"] == capture["token_ids_sha256"] and entry["command"] == tokens.TOKENS_COMMAND
    assert not shipped.check_shipped()


def test_tampered_tokens_are_refused(tmp_path, monkeypatch):
    for name in ("manifest.json", tokens.TOKENS_FILE, shipped.CAPTURE_FILE):
        (tmp_path / name).write_bytes((shipped.data_dir() / name).read_bytes())
    monkeypatch.setenv("PIGVIZ_DATA_DIR", str(tmp_path))
    data = json.loads((tmp_path / tokens.TOKENS_FILE).read_text())
    data["tokens"][5] = "changed"
    (tmp_path / tokens.TOKENS_FILE).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="does not match its manifest sha256"):
        tokens.load_tokens()
    assert tokens.load_tokens(verify=False)[5] == "changed"


def test_the_tokenizer_rebuilds_the_shipped_file(smollm2):
    data = tokens.build_tokens(smollm2[1])
    shipped_data = json.loads((shipped.data_dir() / tokens.TOKENS_FILE).read_text())
    assert data == shipped_data
    assert "".join(data["tokens"]) == smollm2[1].decode(data["ids"])
