import json
import shutil

import pytest
import torch

from pigviz._util.io import sha256_file
from pigviz.cli import main
from pigviz.model import shipped


@pytest.fixture(scope="module")
def cap(shipped_capture):
    return shipped_capture


def test_manifest_matches_the_files_on_disk():
    assert shipped.check_shipped() == []
    entry = shipped.read_manifest()["files"][shipped.CAPTURE_FILE]
    path = shipped.data_dir() / shipped.CAPTURE_FILE
    assert entry["sha256"] == sha256_file(path) and entry["bytes"] == path.stat().st_size
    assert entry["command"] == "pigviz data regenerate"


def test_data_folder_stays_small():
    total = sum(p.stat().st_size for p in shipped.data_dir().rglob("*") if p.is_file())
    assert total < 10.5 * 2**20


def test_shipped_capture_shapes_and_metadata(cap):
    n_pairs = len(shipped.SHIPPED_LAYERS)
    assert cap.queries.shape == (n_pairs, 3, shipped.SHIPPED_LAST, 64)
    assert cap.keys.shape == cap.values.shape == (n_pairs, 1, shipped.SHIPPED_N_TOKENS, 64)
    assert cap.keys.dtype == torch.float16 and cap.metadata["dtype"] == "float16"
    assert cap.layers == list(shipped.SHIPPED_LAYERS)
    assert cap.query_positions.tolist() == list(range(8192 - 64, 8192))
    assert cap.extras["sink_weight"].shape == (30, 9)
    assert cap.extras["key_norm_pos0"].shape == cap.extras["key_norm_median"].shape == (30, 3)
    assert all(t.dtype == torch.float32 for t in cap.extras.values())
    entry = shipped.read_manifest()["files"][shipped.CAPTURE_FILE]
    for key in ("model_revision", "text_sha256", "token_ids_sha256", "torch_version", "transformers_version"):
        assert entry[key] == cap.metadata[key], key
    assert entry["layers"] == cap.layers and entry["kv_heads"] == cap.kv_heads


def test_kept_kv_heads_follow_the_documented_rule(cap):
    assert cap.kv_heads == shipped.choose_kv_heads(cap.extras["sink_weight"], cap.group_size, cap.layers)


def test_shipped_tensors_agree_with_the_all_layer_summaries(cap):
    """The fp16 tensors and the fp32 summaries come from the same prefill."""
    from_tensors = shipped.sink_weights(cap)
    summary = torch.stack(
        [cap.extras["sink_weight"][layer, heads] for layer, heads in zip(cap.layers, cap.query_heads)]
    )
    torch.testing.assert_close(from_tensors, summary, atol=2e-3, rtol=1e-2)
    key0, median = shipped.key_norm_stats(cap)
    expected0 = torch.stack(
        [cap.extras["key_norm_pos0"][layer, heads] for layer, heads in zip(cap.layers, cap.kv_heads)]
    )
    torch.testing.assert_close(key0, expected0, atol=1e-2, rtol=1e-3)


def test_shipped_qkv_reproduce_the_models_outputs(cap):
    for row in range(len(cap.layers)):
        torch.testing.assert_close(cap.reference_outputs(row), cap.outputs[row].float(), atol=2e-2, rtol=1e-2)


def test_early_layer_has_no_sink_and_later_ones_do(cap):
    """Why these layers: layer 2 barely looks at position 0; the middle/late ones lean on it."""
    sink = cap.extras["sink_weight"]
    assert sink[2].max() < 1e-3
    for layer in shipped.SHIPPED_LAYERS[1:]:
        assert sink[layer].max() > 0.3


def test_tampered_file_is_refused(tmp_path, monkeypatch):
    for name in ("manifest.json", shipped.CAPTURE_FILE):
        shutil.copy(shipped.data_dir() / name, tmp_path / name)
    target = tmp_path / shipped.CAPTURE_FILE
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    monkeypatch.setenv("PIGVIZ_DATA_DIR", str(tmp_path))
    assert shipped.check_shipped() and "does not match" in shipped.check_shipped()[0]
    with pytest.raises(ValueError, match="pigviz data regenerate"):
        shipped.load_shipped_capture()


def test_broken_manifest_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PIGVIZ_DATA_DIR", str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json"):
        shipped.read_manifest()
    (tmp_path / "manifest.json").write_text(
        json.dumps({"format": shipped.MANIFEST_FORMAT, "files": {"x.bin": {"sha256": "0"}}})
    )
    with pytest.raises(ValueError, match="lacks bytes"):
        shipped.read_manifest()


@pytest.mark.parametrize(
    "manifest,match",
    [
        ([1, 2], "JSON object"),
        ("just text", "JSON object"),
        ({"format": "pigviz-data-manifest-v1", "files": ["x.bin"]}, "'files' table"),
        ({"format": "pigviz-data-manifest-v1", "files": {"x.bin": "abc"}}, "entry 'x.bin' must be an object"),
        ({"format": "pigviz-data-manifest-v1", "files": {"x.bin": None}}, "entry 'x.bin' must be an object"),
    ],
)
def test_malformed_manifest_is_a_value_error_naming_the_file(tmp_path, monkeypatch, manifest, match):
    monkeypatch.setenv("PIGVIZ_DATA_DIR", str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=match) as info:
        shipped.read_manifest()
    assert "manifest.json" in str(info.value)


def test_cli_check_reports_a_mismatch(monkeypatch, capsys):
    fake = {
        "path": None,
        "sha256": "a" * 64,
        "expected": "b" * 64,
        "match": False,
        "within_precision": False,
        "comparison": {
            "within_precision": False,
            "tensors": {},
            "problems": ["keys: differs by 3.00 fp16 steps (at most 1 allowed)"],
        },
    }
    monkeypatch.setattr(shipped, "regenerate_shipped", lambda out_dir, check, progress: fake)
    assert main(["data", "regenerate", "--check", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "beyond its stored precision" in err and "3.00 fp16 steps" in err


def test_cli_check_accepts_a_rebuild_within_stored_precision(monkeypatch, capsys):
    comparison = {
        "within_precision": True,
        "problems": [],
        "tensors": {"keys": {"max_abs": 1e-3, "max_rel": 4e-4, "differing_fraction": 0.01, "max_fp16_steps": 1.0}},
    }
    fake = {
        "path": None,
        "sha256": "a" * 64,
        "expected": "b" * 64,
        "match": False,
        "within_precision": True,
        "comparison": comparison,
    }
    monkeypatch.setattr(shipped, "regenerate_shipped", lambda out_dir, check, progress: fake)
    assert main(["data", "regenerate", "--check", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "within the precision it is stored in" in out and "1.00 steps" in out


def _nudged(cap, name, steps):
    """A copy of ``cap`` whose tensor ``name`` moves its largest element by ``steps`` fp16 steps."""
    import copy

    other = copy.copy(cap)
    other.extras = dict(cap.extras)
    tensor = (cap.extras[name[6:]] if name.startswith("extra.") else getattr(cap, name)).clone()
    flat = tensor.view(-1)
    i = int(flat.float().abs().argmax())
    if tensor.dtype == torch.float16:
        for _ in range(steps):
            flat[i] = _next_fp16(flat[i])
    else:
        flat[i] = flat[i] * (1 + steps)
    if name.startswith("extra."):
        other.extras[name[6:]] = tensor
    else:
        setattr(other, name, tensor)
    return other


def _next_fp16(x):
    """The next fp16 value above ``x`` (0-d fp16 tensor), by its bit pattern."""
    bits = x.view(torch.int16).clone()
    bits += 1 if float(x) >= 0 else -1
    return bits.view(torch.float16)


def test_compare_captures_allows_one_fp16_step_and_no_more(cap):
    assert shipped.compare_captures(cap, cap)["within_precision"]
    one = shipped.compare_captures(cap, _nudged(cap, "keys", 1))
    assert one["within_precision"], one["problems"]
    assert one["tensors"]["keys"]["max_fp16_steps"] == pytest.approx(1.0, abs=0.01)
    two = shipped.compare_captures(cap, _nudged(cap, "keys", 2))
    assert not two["within_precision"]
    assert any(p.startswith("keys: differs by 2.00 fp16 steps") for p in two["problems"]), two["problems"]
    assert "keys" in shipped.largest_difference(two)


def test_compare_captures_bounds_the_fp32_summaries_relatively(cap):
    name = "extra.sink_weight"
    tiny = _nudged(cap, name, 0)
    tiny.extras["sink_weight"] = cap.extras["sink_weight"] * (1 + 0.5 * shipped.FP32_SUMMARY_RTOL)
    assert shipped.compare_captures(cap, tiny)["within_precision"]
    big = _nudged(cap, name, 0)
    big.extras["sink_weight"] = cap.extras["sink_weight"] * (1 + 3 * shipped.FP32_SUMMARY_RTOL)
    problems = shipped.compare_captures(cap, big)["problems"]
    assert problems and problems[0].startswith(name), problems


def test_compare_captures_names_a_different_text_or_head_choice(cap):
    import copy

    other = copy.copy(cap)
    flipped = [[1 - heads[0]] for heads in cap.kv_heads]
    other.metadata = dict(cap.metadata, token_ids_sha256="0" * 64, kv_heads=flipped)
    problems = shipped.compare_captures(cap, other)["problems"]
    assert any("token_ids_sha256" in p for p in problems), problems
    assert any("KV heads" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.model
def test_regeneration_reproduces_the_shipped_file_to_its_stored_precision(tmp_path):
    """Bit-for-bit equality holds only on the CPU that made the file; any machine must agree to
    the precision the file stores (one fp16 step, fp32 summaries within 1e-5 relative)."""
    from pigviz.model.loading import ModelUnavailableError, bundled_gguf_path

    try:
        bundled_gguf_path(shipped.SHIPPED_MODEL)
    except ModelUnavailableError as exc:
        pytest.skip(str(exc))
    result = shipped.regenerate_shipped(tmp_path, progress=False)
    comparison = result["comparison"]
    assert comparison is not None, "the shipped capture was not found to compare with"
    assert result["within_precision"], "; ".join(comparison["problems"])
    print("largest regeneration difference:", shipped.largest_difference(comparison))
    rebuilt = json.loads((tmp_path / "manifest.json").read_text())
    shipped_entry = shipped.read_manifest()["files"][shipped.CAPTURE_FILE]
    rebuilt_entry = rebuilt["files"][shipped.CAPTURE_FILE]
    different = {k for k in shipped_entry if shipped_entry[k] != rebuilt_entry.get(k)}
    # The digest and size are the bits; everything that says what was captured must agree.
    assert different <= {"sha256", "bytes"}, {k: (shipped_entry[k], rebuilt_entry.get(k)) for k in different}
