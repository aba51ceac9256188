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
            "problems": ["keys: differs by 5.0e-03 normwise relative (at most 1.0e-03 allowed)"],
        },
    }
    monkeypatch.setattr(shipped, "regenerate_shipped", lambda out_dir=None, check=False, progress=True: fake)
    assert main(["data", "regenerate", "--check", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "beyond its stored precision" in err and "keys: differs by 5.0e-03" in err


def test_cli_check_accepts_a_rebuild_within_stored_precision(monkeypatch, capsys):
    comparison = {
        "within_precision": True,
        "problems": [],
        "tensors": {
            "keys": {
                "normwise_rel": 2e-5,
                "worst_row_rel": 7e-4,
                "worst_row": [0, 0, 5],
                "max_abs": 8e-3,
                "differing_fraction": 0.01,
            }
        },
    }
    fake = {
        "path": None,
        "sha256": "a" * 64,
        "expected": "b" * 64,
        "match": False,
        "within_precision": True,
        "comparison": comparison,
    }
    import subprocess

    from pigviz.cli import data as data_cli

    monkeypatch.setattr(shipped, "regenerate_shipped", lambda out_dir=None, check=False, progress=True: fake)
    seen = []

    def verify(data_dir):
        seen.append(data_dir)
        return subprocess.CompletedProcess([], 0, stdout="table\n\n155 passed, 0 failed\n", stderr="")

    monkeypatch.setattr(data_cli, "verify_in_fresh_process", verify)
    assert main(["data", "regenerate", "--check", "--quiet"]) == 0
    assert len(seen) == 1 and seen[0] != str(shipped.data_dir())
    out = capsys.readouterr().out
    assert "every claim of pigviz verify passes on the rebuilt data (155 passed, 0 failed)" in out
    assert "within the precision it is stored in" in out and "fp16 keys: 2.0e-05 normwise" in out


def _with(cap, name, tensor):
    """A copy of ``cap`` whose tensor ``name`` (``"keys"``, ``"extra.sink_weight"``) is ``tensor``."""
    import copy

    other = copy.copy(cap)
    other.extras = dict(cap.extras)
    if name.startswith("extra."):
        other.extras[name[6:]] = tensor
    else:
        setattr(other, name, tensor)
    return other


def _next_fp16(t):
    """Every element of an fp16 tensor moved to the next fp16 value away from zero, by its bits."""
    bits = t.view(torch.int16).clone()
    bits += torch.where(t >= 0, 1, -1).to(torch.int16)
    return bits.view(torch.float16)


def test_compare_captures_accepts_rounding_flips_of_one_fp16_step(cap):
    assert shipped.compare_captures(cap, cap)["within_precision"]
    # A scattered 1% of the elements rounded the other way, as a rebuild on another CPU does.
    keys = cap.keys.clone()
    flip = torch.rand(keys.shape, generator=torch.Generator().manual_seed(0)) < 0.01
    keys[flip] = _next_fp16(keys)[flip]
    result = shipped.compare_captures(cap, _with(cap, "keys", keys))
    assert result["within_precision"], result["problems"]
    entry = result["tensors"]["keys"]
    assert 0 < entry["normwise_rel"] < shipped.TENSOR_RTOL and entry["worst_row_rel"] < shipped.ROW_RTOL
    assert "fp16 keys" in shipped.largest_difference(result)


@pytest.mark.parametrize("name", ["queries", "keys", "values", "outputs"])
def test_compare_captures_refuses_noise_on_one_head_and_names_the_tensor(cap, name):
    tensor = getattr(cap, name).clone()
    head = tensor[1, 0].float()
    noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) * head.abs() * 1e-2
    tensor[1, 0] = (head + noise).half()
    problems = shipped.compare_captures(cap, _with(cap, name, tensor))["problems"]
    assert problems and all(p.startswith(f"{name}:") for p in problems), problems
    assert any("row(s) differ" in p for p in problems), problems


def test_compare_captures_refuses_two_swapped_key_rows(cap):
    keys = cap.keys.clone()
    keys[2, 0, [100, 5000]] = keys[2, 0, [5000, 100]]
    problems = shipped.compare_captures(cap, _with(cap, "keys", keys))["problems"]
    assert all(p.startswith("keys:") for p in problems), problems
    rows = [p for p in problems if "row(s) differ" in p]
    assert rows and rows[0].startswith("keys: 2 row(s) differ"), problems
    assert "(2, 0, 100)" in rows[0] or "(2, 0, 5000)" in rows[0], problems


def test_the_bounds_follow_from_the_fp16_step_and_the_depth():
    assert shipped.FP16_STEP == 2.0**-10
    assert shipped.FP32_DRIFT == pytest.approx(4 * 30 * 8192**0.5 / 2**24)
    assert shipped.ROW_RTOL == pytest.approx(1.6e-3, rel=0.02)
    assert shipped.TENSOR_RTOL == pytest.approx(1.0e-3, rel=0.03)


def test_compare_captures_bounds_the_fp32_summaries_relatively(cap):
    name = "extra.sink_weight"
    sink = cap.extras["sink_weight"]
    tiny = _with(cap, name, sink * (1 + 0.5 * shipped.FP32_SUMMARY_RTOL))
    assert shipped.compare_captures(cap, tiny)["within_precision"]
    big = _with(cap, name, sink * (1 + 3 * shipped.FP32_SUMMARY_RTOL))
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
def test_regeneration_on_another_cpu_kernel_matches_to_the_stored_precision_and_keeps_every_claim():
    """The capture rebuilt with torch's portable kernels (ATEN_CPU_CAPABILITY=default: other sums,
    other bits than this CPU's vector kernels) agrees with the shipped file within the bounds,
    says it captured the same things, and every claim of `pigviz verify` passes on it."""
    import os
    import subprocess
    import sys

    from pigviz.model.loading import ModelUnavailableError, bundled_gguf_path

    try:
        bundled_gguf_path(shipped.SHIPPED_MODEL)
    except ModelUnavailableError as exc:
        pytest.skip(str(exc))
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    done = subprocess.run(
        [sys.executable, "-m", "pigviz", "data", "regenerate", "--check", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    print(done.stdout[-3000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "within the precision it is stored in" in done.stdout or "bit for bit" in done.stdout
    assert "every claim of pigviz verify passes on the rebuilt data" in done.stdout


def test_data_check_names_the_file_that_does_not_match(tmp_path, capsys):
    manifest = shipped.read_manifest()
    for name in ["manifest.json", *manifest["files"]]:
        shutil.copy(shipped.data_dir() / name, tmp_path / name)
    assert main(["data", "check", "--data-dir", str(tmp_path)]) == 0
    count = len(manifest["files"])
    assert f"{count} of {count} shipped files match" in capsys.readouterr().out
    (tmp_path / shipped.CAPTURE_FILE).write_bytes(b"not the capture")
    assert main(["data", "check", "--data-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert shipped.CAPTURE_FILE in out and f"{count - 1} of {count}" in out
