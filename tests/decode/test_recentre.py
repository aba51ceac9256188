"""MagicPIG's ``recentre`` option (pigviz.decode.session): once a layer's index has grown to r
times the tokens its mean was taken over, the insertion is a rebuild on a fresh mean with the same
planes, so the index then holds what a fresh build over the same tokens holds; with recentre=0
the prefill's mean stays; the re-centrings over a long run are geometric (logarithmic in count);
bad values are refused before any model loads."""

import pytest
import torch

from pigviz.decode import session as decoding
from pigviz.lsh import kernels
from pigviz.lsh.index import build_index, packed_tables
from tests.factories import tiny_llama

numba_only = pytest.mark.skipif(not kernels.available(), reason="the offloaded step needs numba")
LAYER = 1  # sampled (layer 0 is dense by default)
OPTS = dict(K=5, L=6, sinks=4, recent=16)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama()


def _drifting_keys(n, Hkv=2, d=16, seed=0):
    """A cone of keys whose centre drifts over the later tokens, as a long generation's do."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(Hkv, n, d, generator=g) + 0.5 * torch.randn(Hkv, 1, d, generator=g)
    k[:, n // 4 :] += torch.linspace(0, 2, n - n // 4)[:, None] * torch.randn(Hkv, 1, d, generator=g)
    return k


def _assert_same_index(index, fresh):
    entries, offsets = packed_tables(index)
    assert index.n == fresh.n
    assert torch.equal(index.mean, fresh.mean)
    assert torch.equal(index.planes, fresh.planes)
    assert torch.equal(entries, fresh.entries) and torch.equal(offsets, fresh.offsets)


def _session(model, **options):
    return decoding.DecodeSession(model, "magicpig", **OPTS, **options)


def _grow(session, k, prefill, stops):
    """Build the layer's index on the first ``prefill`` keys, as prepare does, then insert up to
    each stop in turn, as the decode steps do; returns the stops at which it re-centred."""
    session._build(LAYER, k[:, :prefill], None)
    at = []
    for stop in stops:
        before = session.recentres
        session._insert(LAYER, k, stop)
        if session.recentres > before:
            at.append(stop)
    return at


def test_a_recentred_index_is_a_fresh_build_over_the_same_tokens(tiny):
    k = _drifting_keys(1100)
    session = _session(tiny, recentre=2)
    seed = 0 * 1000 + LAYER  # the session's seed for the layer
    at = _grow(session, k, 100, range(101, 1101))
    assert at == [200, 400, 800]
    index = session.layers[LAYER].index
    centred_on = build_index(k[:, : at[-1]], seed=seed, **OPTS)
    # Right after the last re-centring the index was that build; the 300 tokens inserted since
    # were filed with its mean, as a build over all 1,100 tokens with that mean files them.
    assert torch.equal(index.mean, centred_on.mean)
    _assert_same_index(index, build_index(k, seed=seed, mean=centred_on.mean, **OPTS))
    assert session.layers[LAYER].n == 1100 and session.layers[LAYER].centred_n == 800
    # Exactly at a re-centring: a fresh build (its own mean) of the same tokens.
    session = _session(tiny, recentre=2)
    _grow(session, k, 100, [150, 200])
    _assert_same_index(session.layers[LAYER].index, build_index(k[:, :200], seed=seed, **OPTS))
    assert session.upkeeps == 2 and session.recentres == 1 and session.upkeep_tokens == 100
    assert session.recentre_tokens == 200 and 0 < session.recentre_seconds <= session.upkeep_seconds


def test_recentre_0_keeps_the_prefill_mean(tiny):
    k = _drifting_keys(1100)
    assert _session(tiny).options["recentre"] == 2  # the default re-centres at each doubling
    session = _session(tiny, recentre=0)
    assert _grow(session, k, 100, range(110, 1101, 10)) == []
    prefill = build_index(k[:, :100], seed=LAYER, **OPTS)
    index = session.layers[LAYER].index
    assert torch.equal(index.mean, prefill.mean)
    _assert_same_index(index, build_index(k, seed=LAYER, mean=prefill.mean, **OPTS))
    assert session.recentres == session.recentre_tokens == 0 and session.recentre_seconds == 0.0
    assert session.upkeeps == 100 and session.upkeep_tokens == 1000
    # The keys drift: the mean a re-centring would take is elsewhere.
    assert not torch.allclose(index.mean, build_index(k, seed=LAYER, **OPTS).mean, atol=0.1)


@pytest.mark.parametrize(
    ("r", "prefill", "stops", "expected"),
    [
        (2, 100, range(101, 1101), [200, 400, 800]),  # one token at a time: each doubling
        (3, 100, range(101, 1101), [300, 900]),
        (2, 100, range(100 + 257, 1101, 257), [357, 871]),  # folds of a 256-token buffer
        (2, 1000, range(1001, 1101), []),  # the index never doubled
    ],
)
def test_recentrings_are_geometric(tiny, r, prefill, stops, expected):
    k = _drifting_keys(1100)
    session = _session(tiny, recentre=r)
    assert _grow(session, k, prefill, stops) == expected
    assert session.recentres == len(expected) and session.recentre_tokens == sum(expected)
    # Each re-centring at least r times the last: the keys re-hashed stay within r / (r - 1) of
    # the final index, however long the run.
    assert session.recentre_tokens <= r / (r - 1) * stops[-1]
    assert session.upkeeps == len(stops) and session.upkeep_tokens == stops[-1] - prefill


def _decode(model, ids, prefill, placement, **options):
    """Prefill ``prefill`` ids densely, then decode the rest one token at a time through the swap."""
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "magicpig", placement=placement, **OPTS, **options) as session:
        decoding.forward(model, ids[:prefill], cache, logits_to_keep=1)
        session.prepare(cache)
        session.phase = "decode"
        logits = [decoding.forward(model, ids[t : t + 1], cache) for t in range(prefill, len(ids))]
    return session, cache, torch.cat(logits)


@pytest.mark.parametrize("placement", ["device", pytest.param("cpu_offload", marks=numba_only)])
def test_decoding_recentres_each_sampled_layer_on_both_placements(tiny, placement):
    ids = torch.randint(0, 96, (200,), generator=torch.Generator().manual_seed(3))
    prefill, buffer = 40, 7
    session, cache, logits = _decode(tiny, ids, prefill, placement, buffer=buffer, recentre=2, kv_dtype="model")
    assert torch.isfinite(logits).all()
    # The step path inserts once the buffer would pass 7 tokens: folds at 48, 56, 64, ... 200;
    # re-centring at the first fold reaching 80 (2 x 40), then 160.
    assert session.recentres == 2 and session.rebuilds == 0
    state = session.layers[LAYER]
    n = prefill + (buffer + 1) * ((len(ids) - prefill) // (buffer + 1))
    assert state.n == n and state.centred_n == 160
    if placement == "cpu_offload":
        off = session._offloaded[LAYER][0]
        keys = off.cpu_keys[:, :n]
    else:
        keys = cache.layers[LAYER].keys[0, :, :n]
    centred_on = build_index(keys[:, :160], seed=LAYER, **OPTS)
    assert torch.equal(state.index.mean, centred_on.mean)
    _assert_same_index(state.index, build_index(keys, seed=LAYER, mean=centred_on.mean, **OPTS))
    # The same tokens, read the same way, whichever placement: the same logits as the device path.
    if placement == "cpu_offload":
        ref, _, ref_logits = _decode(tiny, ids, prefill, "device", buffer=buffer, recentre=2, kv_dtype="model")
        assert ref.recentres == session.recentres
        assert torch.allclose(logits, ref_logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("value", "error"), [(1, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)]
)
def test_bad_recentre_is_refused_naming_it(value, error):
    with pytest.raises(error, match="recentre"):
        decoding.check_options("magicpig", {"recentre": value})
    assert decoding.check_options("magicpig", {"recentre": 2})["recentre"] == 2
    assert decoding.check_options("magicpig", {})["recentre"] == 2
    assert decoding.check_options("magicpig", {"recentre": 0})["recentre"] == 0


def test_the_cli_passes_recentre_and_refuses_a_bad_one_before_loading(monkeypatch, capsys):
    from pigviz.cli import build_parser, main
    from pigviz.cli import decode as cli_decode

    assert build_parser().parse_args(["generate", "--prompt", "Hi", "--recentre", "2"]).recentre == 2
    assert build_parser().parse_args(["generate", "--prompt", "Hi"]).recentre is None

    def tripwire(*args, **kwargs):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(cli_decode, "load_model", tripwire)
    assert main(["generate", "--prompt", "Hi", "--recentre", "1", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "recentre must be 0" in err and "at least 2" in err
    assert main(["generate", "--prompt", "Hi", "--attention", "topk", "--recentre", "2", "--quiet"]) == 2
    assert "unknown option(s) recentre" in capsys.readouterr().err
    # A good value gets past the checks to the load (and on to generate, as the other options).
    seen = {}

    def fake_generate(model, tokenizer, prompt, attention, max_new_tokens, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cli_decode, "load_model", lambda *a, **k: (object(), object()))
    monkeypatch.setattr(cli_decode, "generate", fake_generate)
    with pytest.raises(RuntimeError, match="stop here"):
        main(["generate", "--prompt", "Hi", "--recentre", "2", "--device", "cpu", "--quiet"])
    assert seen["recentre"] == 2


class _Tokenizer:
    """Enough of a tokenizer for generate on token ids."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def test_generate_passes_recentre_and_reports_the_recentrings(tiny):
    from pigviz.decode.generation import generate

    ids = torch.randint(0, 96, (40,), generator=torch.Generator().manual_seed(4))
    kwargs = dict(progress=False, stop_at_eos=False, buffer=7, kv_dtype="model", **OPTS)
    # Token 0 comes from the prefill; decode steps then feed tokens 40 .. 198: folds up to 192.
    out = generate(tiny, _Tokenizer(), ids, "magicpig", 160, recentre=2, **kwargs)
    assert out.options["recentre"] == 2
    assert out.extra["recentres"] == 2 and out.extra["recentre_tokens"] == 80 + 160  # one sampled layer
    assert 0 < out.extra["recentre_seconds"] <= out.upkeep_seconds and out.rebuilds == 0
    plain = generate(tiny, _Tokenizer(), ids, "magicpig", 160, recentre=0, **kwargs)
    assert plain.options["recentre"] == 0 and "recentres" not in plain.extra
    assert plain.upkeeps == out.upkeeps and plain.upkeep_tokens == out.upkeep_tokens
