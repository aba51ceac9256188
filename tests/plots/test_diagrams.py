"""The method's diagrams: drawn from their data, the picture agrees with it, bad data is named."""

import math

import numpy as np
import pytest

from pigviz.lsh.reference import magicpig_reference
from pigviz.plots import diagrams as D


def shapes(fig, name):
    return [s for s in fig.layout.shapes if s.name == name]


def texts(fig):
    """Every piece of text the figure shows: annotations, text traces, the title."""
    out = [a.text for a in fig.layout.annotations if a.text] + [fig.layout.title.text]
    for tr in fig.data:
        if tr.text is not None:
            out += list(tr.text)
    return out


def assert_clean(fig):
    """No NaN in any trace, no text under 12 px, no emoji (the test browser has no emoji font)."""
    for tr in fig.data:
        for arr in (tr.x, tr.y):
            assert np.all(np.isfinite(np.asarray(arr, dtype=float))), tr.name
        if tr.textfont is not None and tr.textfont.size is not None:
            assert tr.textfont.size >= 12
    for a in fig.layout.annotations:
        assert a.font.size is None or a.font.size >= 12
    for s in fig.layout.shapes:
        for v in (s.x0, s.x1, s.y0, s.y1):
            assert v is None or math.isfinite(v)
    assert all(ord(ch) < 0x2600 for t in texts(fig) for ch in t)


# A hand-made step: n = 10, K = 2 (4 buckets), L = 3 tables, sinks = 1, recent = 2.
KB = np.array(
    [
        [9, 1, 1, 0, 2, 1, 3, 1, 9, 9],
        [9, 2, 2, 2, 0, 3, 1, 2, 9, 9],
        [9, 3, 0, 3, 3, 1, 0, 2, 9, 9],
    ]
)  # the exact set's columns (0, 8, 9) hold no bucket: never read
QB = np.array([1, 2, 3])
# hits of keys 1..7: key1 3, key2 2, key3 2, key4 1, key5 1, key6 0, key7 2 -> sampled 1, 2, 3, 7
SAMPLED = [1, 2, 3, 7]


def hand(**over):
    args = dict(K=2, sinks=1, recent=2, u=[0.9, 0.5, 0.4, 0.05], scores=np.linspace(-1, 1, 10))
    args.update(over)
    return D.decode_step_diagram(KB, QB, **args)


def test_the_hand_made_step_is_drawn_as_its_data_says():
    fig = hand()
    assert_clean(fig)
    # The query's bucket lit once per table, at its bucket's place in the strip.
    lit = shapes(fig, "q bucket")
    assert len(lit) == 3 and len(shapes(fig, "bucket")) == 3 * 3
    strips = sorted(shapes(fig, "q bucket") + shapes(fig, "bucket"), key=lambda s: (-s.y0, s.x0))
    for t in range(3):
        row = strips[4 * t : 4 * t + 4]
        assert [s.name for s in row].index("q bucket") == QB[t]
    # Each indexed key's cell lit in each table where it shares the query's bucket.
    in_q = shapes(fig, "key in q bucket")
    assert len(in_q) == int((KB[:, 1:8] == QB[:, None]).sum()) == 11
    assert len(in_q) + len(shapes(fig, "key bucket")) == 3 * 7  # the exact set is not in the tables
    # Hit counts as written, the sampled keys highlighted, the exact set drawn apart.
    (counts,) = [tr for tr in fig.data if tr.name == "hit counts"]
    assert list(counts.text) == ["3", "2", "2", "1", "1", "0", "2"]
    highlighted = shapes(fig, "sampled")
    assert sorted(int(s.x0) for s in highlighted) == SAMPLED
    assert len(shapes(fig, "not sampled")) == 3 and len(shapes(fig, "exact")) == 3
    # u and -log u under each sampled key; one softmax bar per key read.
    assert {"0.90", "0.50", "0.40", "0.05", "+0.1", "+0.7", "+0.9", "+3.0"} <= set(texts(fig))
    assert len(shapes(fig, "weight sampled")) == 4 and len(shapes(fig, "weight exact")) == 3
    # The keys the output mixes: one weight bar each, the exact set and the sample, 7 of the 10.
    read = sorted(int(s.x0) for s in shapes(fig, "weight sampled") + shapes(fig, "weight exact"))
    assert read == [0, *SAMPLED, 8, 9]


def test_min_hits_and_optional_data_change_the_picture():
    fig = hand(min_hits=3, u=[0.2], scores=None)
    assert [int(s.x0) for s in shapes(fig, "sampled")] == [1]
    assert not shapes(fig, "weight sampled")  # no scores: no weights drawn, the formula only
    fig = hand(u=None, scores=None)
    assert len(shapes(fig, "sampled")) == 4
    # without u, no u and -log u rows under the sampled keys (and without scores, no weights)
    assert {tr.name for tr in hand().data} - {tr.name for tr in fig.data} == {"u", "\u2212log u", "weights"}
    assert_clean(fig)


def test_the_default_is_the_toy_and_the_toy_is_the_reference_algorithm():
    toy = D.toy_decode_step()
    fig = D.decode_step_diagram()
    assert_clean(fig)
    assert fig.to_json() == D.decode_step_diagram(**toy).to_json()
    n, sinks, recent = toy["key_buckets"].shape[1], toy["sinks"], toy["recent"]
    hits = (toy["key_buckets"] == toy["query_buckets"][:, None]).sum(0)[sinks : n - recent]
    n_sampled = int((hits >= 2).sum())
    assert 2 <= n_sampled == len(shapes(fig, "sampled")) == toy["u"].size
    # The same keys as pigviz.lsh.reference reads on the toy's vectors.
    q, keys, planes = D._toy_vectors(n, 16, 3, 4, sinks, recent, 18)
    _, read = magicpig_reference(q, keys, np.eye(n), planes, 3, 4, sinks, recent)
    sampled = sorted(int(s.x0) for s in shapes(fig, "sampled"))
    assert list(read) == sorted([*range(sinks), *sampled, *range(n - recent, n)])


def test_other_toys_draw():
    for kw in (
        dict(n=12, K=1, L=1, sinks=1, recent=0, min_hits=1),
        dict(n=48, K=4, L=8, sinks=4, recent=8),
        dict(seed=3),
    ):
        assert_clean(D.decode_step_diagram(**D.toy_decode_step(**kw)))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: hand(K=0), "K must be"),
        (lambda: hand(K=5), "K must be"),
        (
            lambda: D.decode_step_diagram(np.zeros((9, 10), int), np.zeros(9, int), K=2, sinks=1, recent=1),
            "L \\(the rows",
        ),
        (lambda: D.decode_step_diagram(np.zeros((3, 49), int), QB, K=2, sinks=1, recent=1), "n \\(the columns"),
        (lambda: D.decode_step_diagram(KB, QB[:2], K=2, sinks=1, recent=2), "query_buckets"),
        (lambda: D.decode_step_diagram(KB, [1, 2, 4], K=2, sinks=1, recent=2), "query_buckets"),
        (lambda: D.decode_step_diagram(KB[0], QB, K=2, sinks=1, recent=2), "key_buckets"),
        (lambda: D.decode_step_diagram(KB * 1.0, QB, K=2, sinks=1, recent=2), "key_buckets"),
        (lambda: D.decode_step_diagram(KB, QB % 2, K=1, sinks=1, recent=2), "key_buckets"),  # 3 >= 2^1
        (lambda: hand(sinks=5, recent=5), "sinks \\+ recent"),
        (lambda: hand(min_hits=4), "min_hits"),
        (lambda: hand(u=[0.5, 0.5]), "u"),
        (lambda: hand(u=[0.5, 0.5, 0.5, 1.5]), "u"),
        (lambda: hand(scores=np.zeros(9)), "scores"),
        (lambda: hand(u=None), "scores needs u"),
        (lambda: D.decode_step_diagram(query_buckets=QB), "key_buckets"),
        (lambda: D.toy_decode_step(n=49), "n must be"),
        (lambda: D.toy_decode_step(L=9), "L must be"),
        (lambda: D.toy_decode_step(sinks=3, recent=21), "sinks \\+ recent"),
        (lambda: D.placement_diagram(bytes_down=-1), "bytes_down"),
        (lambda: D.placement_diagram(bytes_up=float("nan")), "bytes_up"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_placement_prints_the_bytes_it_is_given():
    plain = D.placement_diagram()
    assert_clean(plain)
    assert not any("/ step" in t for t in texts(plain))
    fig = D.placement_diagram(bytes_down=1536, bytes_up=300)
    assert_clean(fig)
    shown = " ".join(texts(fig))
    assert "1.5 KiB / step" in shown and "300 B / step" in shown
    (gpu,), (cpu,) = shapes(fig, "GPU"), shapes(fig, "CPU")
    # GPU: weights, hashing, exact attention, merge; CPU: the cache, the tables, the sampled step
    assert len(shapes(fig, "GPU box")) == 4 and len(shapes(fig, "CPU box")) == 3
    # Two arrows between the devices: the query down to the CPU, the partial output back up.
    arrows = [(a.ay, a.y) for a in fig.layout.annotations if a.showarrow]
    assert sorted(start > end for start, end in arrows) == [False, True]
    assert all(gpu.y0 > y > cpu.y1 for arrow in arrows for y in arrow)
