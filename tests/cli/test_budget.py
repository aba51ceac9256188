import json
import subprocess
import sys
from pathlib import Path

import pytest

from pigviz.cli import main
from pigviz.memory.model_shapes import known_models

ROOT = Path(__file__).resolve().parents[2]


def test_json_output(capsys):
    assert main(["budget", "--model", "llama-3.1-8b", "--context", "98304", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kv_bytes_per_token"] == 131_072
    assert report["kv_bytes"] == 12 * 2**30
    assert report["table_bytes"] == 15_099_494_400
    assert report["candidates_per_query"] == 14_400
    assert round(100 * report["candidate_share_of_key_bytes"], 2) == 0.23
    assert report["model"]["name"] == "Llama-3.1-8B"


def test_text_output_and_options(capsys):
    assert (
        main(
            ["budget", "--model", "Llama-3.1-70B", "--context", "131072", "--dtype-bytes", "1", "--K", "8", "--L", "50"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "160 KiB" in out and "K=8, L=50" in out and "20 GiB" in out


def test_config_path(tmp_path, capsys):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "hidden_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["budget", "--model", str(tmp_path / "config.json"), "--context", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 2 * 2 * 1 * 32 * 2


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "gpt-9", "--context", "10"], "Known models: " + ", ".join(known_models())),
        (["--model", "llama-3.1-8b", "--context", "-5"], "context must be in [1"),
        (["--model", "llama-3.1-8b", "--context", "10", "--K", "0"], "K must be in [1"),
        (["--model", "llama-3.1-8b", "--context", "10", "--L", "0"], "L must be in [1"),
        (["--model", "llama-3.1-8b", "--context", "10", "--dtype-bytes", "3"], "dtype_bytes must be one of"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args, message, capsys):
    assert main(["budget", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pigviz budget: error:") and message in err


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "pigviz", "budget", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_module_entry_point_subprocess():
    ok = _run("--model", "Qwen2.5-7B", "--context", "32768", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 2
    bad = _run("--model", "no-such-model", "--context", "100")
    assert bad.returncode == 2 and "SmolLM2-135M" in bad.stderr and bad.stdout == ""
    neg = _run("--model", "Qwen2.5-7B", "--context", "-1")
    assert neg.returncode == 2 and "context" in neg.stderr


def test_all_models_print_the_rows_notebook_05a_shows(capsys):
    from pigviz.cli import text
    from pigviz.memory import budget

    assert main(["budget", "--model", "all", "--context", "98304"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == text.model_table(98_304)
    assert out.count("past its") == 4  # Qwen2.5-0.5B, Qwen2.5-1.5B, SmolLM2-135M, Mistral-7B-v0.1
    assert main(["budget", "--model", "all", "--context", "98304", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == known_models() and rows == budget.model_rows(98_304)
