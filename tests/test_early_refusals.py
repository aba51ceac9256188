"""Every entry point that loads the model or runs a prefill checks its arguments first: on a
fresh machine (an empty model cache) a wrong argument is refused in under 2 seconds, as on one
with a warm cache, and nothing is loaded.

Each case runs in a fresh interpreter whose ``PIGVIZ_CACHE_DIR`` is an empty folder, with every
way of loading the model (``load_model``, transformers' ``from_pretrained``, the GGUF
de-quantisation) and of prefilling (``capture``, ``forward``) replaced by a tripwire. The case
must raise the expected error (a CLI command: exit 2 with the message on stderr), trip nothing,
import neither torch nor transformers where no device is asked for, and finish within 2 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pigviz.model import loading

LIMIT_S = 2.0

_HARNESS = r"""
import contextlib, io, json, sys, time

class LoadAttempted(BaseException):
    pass

tripped = []

def tripwire(what):
    def fail(*args, **kwargs):
        tripped.append(what)
        raise LoadAttempted(what)
    return fail

from pigviz.model import capture as capture_mod, loading, shipped, tokens
from pigviz.study import run as study_run
from pigviz.decode import evaluate as decode_eval, session
from pigviz.cli import data as cli_data, decode as cli_decode

for module, name in [
    (loading, "load_model"), (loading, "_from_pretrained"), (loading, "_dequantise_into"),
    (study_run, "load_model"), (study_run, "capture"), (cli_data, "load_model"), (cli_data, "capture"),
    (cli_decode, "load_model"), (capture_mod, "capture"), (decode_eval, "forward"), (session, "forward"),
    (shipped, "load_model"), (tokens, "load_model"),
]:
    setattr(module, name, tripwire(f"{module.__name__}.{name}"))

class Config:
    num_hidden_layers, num_attention_heads, num_key_value_heads = 4, 3, 1
    max_position_embeddings, model_type = 512, "llama"

class StandIn:
    # A model as far as the argument checks look; running it trips the wire.
    config = Config()
    def parameters(self):
        tripped.append("model parameters")
        raise LoadAttempted("model parameters")
    __call__ = tripwire("model forward")

def my_estimator(q, keys, values, budget):
    tripped.append("estimator")
    raise LoadAttempted("the estimator ran")

CASE = sys.argv[1]
err = io.StringIO()
t0 = time.perf_counter()
result = {"raised": None, "message": "", "rc": None}
try:
    with contextlib.redirect_stderr(err):
        exec(CASE)
except LoadAttempted as exc:
    result["raised"] = "LoadAttempted"
except Exception as exc:
    result["raised"], result["message"] = type(exc).__name__, str(exc)
elapsed = time.perf_counter() - t0
result.update(
    elapsed=elapsed, tripped=tripped, stderr=err.getvalue(),
    torch="torch" in sys.modules, transformers="transformers" in sys.modules,
)
print(json.dumps(result))
"""

# (id, code run after the harness, expected exception (None: a CLI exit code 2), text the
# message must hold, torch allowed to load (a device was asked for))
CASES = [
    (
        "evaluate_estimator layers",
        "from pigviz.study.estimators import evaluate_estimator\nevaluate_estimator(my_estimator, layers=[99])",
        "ValueError",
        "layers",
        False,
    ),
    (
        "evaluate_estimator positions",
        "from pigviz.study.estimators import evaluate_estimator\n"
        "evaluate_estimator(my_estimator, layers=[1], positions=[64])",
        "ValueError",
        "positions entry",
        False,
    ),
    (
        "cached_capture context",
        "study_run.cached_capture(context=9000)",
        "ValueError",
        "at most 8192",
        False,
    ),
    (
        "check_study_args last",
        "study_run.check_study_args(study_run.StudySpec(), last=100)",
        "ValueError",
        "recent >= 99",
        False,
    ),
    (
        "capture layers",
        "capture_mod_capture = __import__('importlib').reload(capture_mod).capture\n"
        "capture_mod_capture(StandIn(), None, n_tokens=64, last=4, layers=[9])",
        "ValueError",
        "layers entry must be in [0, 3]",
        False,
    ),
    (
        "quality_eval baselines",
        "decode_eval.quality_eval(StandIn(), None, prefix=100, stretch=8, baselines=('topq',))",
        "ValueError",
        "baseline",
        False,
    ),
    (
        "passkey_eval lengths",
        "decode_eval.passkey_eval(StandIn(), None, lengths=(100,))",
        "ValueError",
        "lengths entry",
        False,
    ),
    ("pigviz study --layers 99", ["study", "--layers", "99", "--out", "r.json"], None, "layers", False),
    ("pigviz study --last 100", ["study", "--last", "100", "--out", "r.json"], None, "recent", False),
    ("pigviz study --context 9000", ["study", "--context", "9000", "--out", "r.json"], None, "8192", False),
    (
        "pigviz study --out in a missing folder",
        ["study", "--out", "no/such/folder/r.json"],
        None,
        "does not exist",
        False,
    ),
    ("pigviz study --dtype", ["study", "--dtype", "float8", "--out", "r.json"], None, "dtype", False),
    ("pigviz capture --layers 30", ["capture", "--layers", "30", "--out", "c.safetensors"], None, "[0, 29]", False),
    ("pigviz capture --kv-heads 3", ["capture", "--kv-heads", "3", "--out", "c.safetensors"], None, "[0, 2]", False),
    ("pigviz capture --context 9000", ["capture", "--context", "9000", "--out", "c.safetensors"], None, "8192", False),
    ("pigviz capture --last 0", ["capture", "--last", "0", "--out", "c.safetensors"], None, "--last", False),
    (
        "pigviz eval --prefix 8000",
        ["eval", "--prefix", "8000", "--stretch", "256"],
        None,
        "prefix + stretch must be at most 8192",
        False,
    ),
    ("pigviz eval --dense-layers 40", ["eval", "--dense-layers", "40"], None, "dense_layers entry", False),
    ("pigviz eval --configs 40x150", ["eval", "--configs", "40x150"], None, "K must be in [1, 30]", False),
    ("pigviz eval --task passkey --lengths 100", ["eval", "--task", "passkey", "--lengths", "100"], None, "128", False),
    ("pigviz eval --device", ["eval", "--device", "tpu"], None, "device", False),
    ("pigviz generate --from-text 9000", ["generate", "--from-text", "9000"], None, "8192", False),
    (
        "pigviz generate an option dense does not take",
        ["generate", "--prompt", "hi", "--attention", "dense", "--K", "3"],
        None,
        "unknown option",
        False,
    ),
    ("pigviz data regenerate --out-dir", ["data", "regenerate", "--out-dir", "missing"], None, "out_dir", False),
    ("pigviz data tokens --out-dir", ["data", "tokens", "--out-dir", "missing"], None, "manifest", False),
    ("pigviz generate --K 99", ["generate", "--prompt", "hi", "--K", "99"], None, "K must be in [1, 30]", False),
]


def _bundled_model_installed() -> bool:
    try:
        loading.bundled_gguf_path()
    except loading.ModelUnavailableError:
        return False
    return True


def run_case(code, tmp_path) -> dict:
    if isinstance(code, list):
        code = f"from pigviz.cli.main import main\nrc = main({code!r})\nresult['rc'] = rc\n"
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PIGVIZ_SMOLLM2_GGUF"}
    env.update(PIGVIZ_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", _HARNESS, textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not any(cache.iterdir()), "the refusal wrote into the model cache"
    return result


@pytest.mark.skipif(not _bundled_model_installed(), reason="the limits come from the bundled model's GGUF header")
@pytest.mark.parametrize("name,code,raises,text,device", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_refused_before_the_model_loads(name, code, raises, text, device, tmp_path):
    result = run_case(code, tmp_path)
    print(f"{name}: refused in {result['elapsed']:.3f} s")  # shown with -s or -rA: the timings
    assert result["tripped"] == [], f"{name} tried to load or run the model: {result['tripped']}"
    if raises is None:  # a CLI command: exit status 2, the message on stderr
        assert result["raised"] is None, result
        assert result["rc"] == 2 and text in result["stderr"], result
    else:
        assert result["raised"] == raises and text in result["message"], result
    assert not result["transformers"], f"{name} imported transformers before refusing"
    if not device:
        assert not result["torch"], f"{name} imported torch before refusing"
    assert result["elapsed"] < LIMIT_S, f"{name} took {result['elapsed']:.2f} s to refuse (limit {LIMIT_S} s)"


def test_model_limits_come_from_the_files_without_a_load(tmp_path, monkeypatch):
    config = {"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2}
    folder = tmp_path / "local-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(config, max_position_embeddings=32768)))
    assert loading.model_limits(str(folder)) == loading.ModelLimits(28, 2, 32768)
    # a hub id: its config.json in the Hugging Face cache (refs/main -> snapshots/<commit>/), else None
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert loading.model_limits("Qwen/Qwen2.5-1.5B") is None
    snapshot = hub / "models--Qwen--Qwen2.5-1.5B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    (hub / "models--Qwen--Qwen2.5-1.5B" / "refs").mkdir()
    (hub / "models--Qwen--Qwen2.5-1.5B" / "refs" / "main").write_text("abc123")
    assert loading.model_limits("Qwen/Qwen2.5-1.5B") == loading.ModelLimits(28, 2, None)
    with pytest.raises(ValueError, match=r"layers entry must be in \[0, 27\], got 28"):
        loading.check_model_args(str(folder), layers=[28])
    with pytest.raises(ValueError, match="n_tokens must be at most 32768"):
        loading.check_model_args(str(folder), n_tokens=40000)
    assert loading.check_model_args(str(folder), n_tokens=40000, allow_long_context=True).layers == 28


@pytest.mark.skipif(not _bundled_model_installed(), reason="needs the bundled model's GGUF")
def test_the_bundled_models_limits_are_read_from_its_gguf_header():
    assert loading.model_limits() == loading.ModelLimits(layers=30, kv_heads=3, max_context=8192)
