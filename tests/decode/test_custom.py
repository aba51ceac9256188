"""Your estimator inside real decoding: use_attention takes it, an exact one gives dense
decoding's logits, the budget is enforced, and `pigviz eval --attention module:function` finds it."""

import json
import textwrap

import numpy as np
import pytest
import torch
import transformers

from pigviz.attention import protocol
from pigviz.cli import main
from pigviz.decode import custom
from pigviz.decode import evaluate as decode_eval
from pigviz.decode import session as decoding

COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**COMMON)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def exact_numpy(q, keys, values, budget):
    s = keys @ q / np.sqrt(len(q))
    w = np.exp(s - s.max())
    return w @ values / w.sum(), np.arange(len(keys))


@protocol.declare(torch=True)
def exact_torch(q, keys, values, budget):
    w = torch.softmax(keys @ q / q.shape[0] ** 0.5, 0)
    return w @ values, torch.arange(keys.shape[0])


def decode_rows(model, ids, prefix, attention, **options):
    """Prefill ``prefix`` tokens densely, then feed the rest as decode rows with ``attention``."""
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "dense"):
        decoding.forward(model, ids[:prefix], cache)
    with decoding.use_attention(model, attention, **options) as session:
        session.prepare(cache)
        session.phase = "decode"
        logits = decoding.forward(model, ids[prefix:], cache)
        budgets = session.take_budgets()
    return logits, budgets


@pytest.mark.parametrize("estimator", [exact_numpy, exact_torch, protocol.exact()], ids=["numpy", "torch", "library"])
def test_an_exact_estimator_at_budget_one_gives_dense_decodings_logits(tiny, estimator):
    ids = torch.randint(0, 96, (60,), generator=torch.Generator().manual_seed(1))
    dense, _ = decode_rows(tiny, ids, 40, "dense")
    mine, budgets = decode_rows(tiny, ids, 40, estimator, budget=1.0, dense_layers=())
    torch.testing.assert_close(mine, dense, rtol=0, atol=1e-5)
    assert budgets.tolist() == [1.0] * 20
    assert tiny.config._attn_implementation == "sdpa"


def test_on_smollm2_the_exact_estimator_decodes_as_dense(smollm2):
    from pigviz.model.texts import first_tokens

    model, tok = smollm2
    ids = first_tokens(tok, 200)
    dense, _ = decode_rows(model, ids, 192, "dense")
    mine, _ = decode_rows(model, ids, 192, exact_numpy, budget=1.0, dense_layers=())
    torch.testing.assert_close(mine, dense, rtol=0, atol=2e-4)
    assert torch.equal(mine.argmax(-1), dense.argmax(-1))


def test_the_topk_estimator_decodes_as_the_builtin_topk(tiny):
    ids = torch.randint(0, 96, (70,), generator=torch.Generator().manual_seed(2))
    builtin, b1 = decode_rows(tiny, ids, 50, "topk", budget=0.2)
    mine, b2 = decode_rows(tiny, ids, 50, protocol.topk(), budget=0.2)
    torch.testing.assert_close(mine, builtin, rtol=0, atol=1e-4)
    torch.testing.assert_close(b1, b2)


def test_reading_past_the_budget_in_decoding_is_refused_and_the_model_restored(tiny):
    ids = torch.randint(0, 96, (50,), generator=torch.Generator().manual_seed(3))
    with pytest.raises(
        protocol.OverBudget, match=r"estimator 'exact_numpy' read 41 distinct keys, more than its budget of 20"
    ):
        decode_rows(tiny, ids, 40, exact_numpy, budget=0.5, dense_layers=())
    assert tiny.config._attn_implementation == "sdpa"
    with pytest.raises(TypeError, match="unknown option\\(s\\) K for attention='custom'; it takes: estimator, budget"):
        decode_rows(tiny, ids, 40, exact_numpy, K=3)
    with pytest.raises(ValueError, match="budget must be in"):
        decode_rows(tiny, ids, 40, exact_numpy, budget=0.0)


def test_resolve_finds_module_and_file_estimators(tmp_path, monkeypatch):
    body = textwrap.dedent(
        """
        import numpy as np

        def mine(q, keys, values, budget):
            return values[:budget].mean(0), np.arange(budget)
        """
    )
    (tmp_path / "my_module_for_test.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    assert custom.resolve("my_module_for_test:mine").__name__ == "mine"
    assert custom.resolve(f"{tmp_path / 'my_module_for_test.py'}:mine").__name__ == "mine"
    with pytest.raises(ValueError, match="has no nope"):
        custom.resolve("my_module_for_test:nope")
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        custom.resolve("no_such_module:mine")
    with pytest.raises(ValueError, match="no file"):
        custom.resolve("missing.py:mine")
    with pytest.raises(ValueError, match="module:function"):
        custom.resolve("topk")
    (tmp_path / "not_callable.py").write_text("mine = 3\n")
    with pytest.raises(TypeError, match="callable as estimator"):
        custom.resolve("not_callable:mine")


def test_cli_refuses_an_unknown_estimator_before_loading_the_model(capsys, monkeypatch):
    monkeypatch.setattr("pigviz.cli.decode.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["eval", "--task", "quality", "--attention", "magicpig,no_such_module:mine", "--quiet"]) == 2
    assert "cannot import no_such_module" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--attention", "nonsense"])


def test_quality_eval_runs_an_estimator_at_magicpigs_budget(smollm2):
    model, tok = smollm2
    out = decode_eval.quality_eval(
        model,
        tok,
        prefix=200,
        stretch=6,
        configs=((6, 20),),
        seeds=(0,),
        baselines=("topk", protocol.topk(name="mine")),
        progress=False,
    )
    rows = {r["label"].split(" at ")[0]: r for r in out["rows"]}
    mp, builtin, mine = rows["MagicPIG K=6 L=20"], rows["topk"], rows["mine"]
    assert mine["method"] == "custom" and mine["variant"] == "mine"
    assert mine["options"]["budget"] == pytest.approx(mp["budget"]) and mine["budget"] == pytest.approx(
        builtin["budget"], abs=0.01
    )
    assert mine["kl_mean"] == pytest.approx(builtin["kl_mean"], abs=1e-4)
    json.dumps(out, allow_nan=False)
