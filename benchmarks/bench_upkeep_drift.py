"""What keeping the prefill's mean costs over a long generation (issue 39, item 3).

    python benchmarks/bench_upkeep_drift.py        # shipped SmolLM2 capture, P = 256 .. 4096, seeds 0-4 (~1 min)
    python benchmarks/bench_upkeep_drift.py --prefills 1024 --seeds 0 --json /tmp/drift.json
    python benchmarks/bench_upkeep_drift.py --json /tmp/drift.json --rows   # every scored row too (~2 MB)

MagicPIG's decoder (:mod:`pigviz.decode.session`) builds one index per sampled layer after the
prefill, centred on the prefill's mean key (sinks and recent window excluded). Tokens generated
later wait in an exact buffer; when it would hold more than ``buffer`` tokens, they are INSERTED
(:func:`pigviz.lsh.index.insert_tokens`): hashed with the index's planes and the PREFILL's mean,
never re-centred (unless the decoder's ``recentre`` option says otherwise). This script measures
what that does to the attention output, against three other ways to treat the generated tokens.

Data: the shipped capture (``pigviz/data/smollm2_8k_capture.safetensors``): SmolLM2-135M, four
layers, one KV head each, 8,192 post-RoPE keys and values, the three query heads of that KV head
at the last 64 positions (8,128 .. 8,191). A "prefill" of the first P tokens stands in for the
prompt; the remaining 8,192 - P tokens stand in for generated text (their keys are the model's
own keys for that text, so the mean drifts as it would while generating it).

For a query at position t (it sees tokens 0 .. t), the decoder's buffer is mirrored exactly: the
step path inserts tokens up to the current one each time the buffer would exceed ``buffer``, so
the index holds ``s = P + (buffer + 1) * floor((t + 1 - P) / (buffer + 1))`` tokens and the
``t + 1 - s`` tokens after them are read exactly. Only queries whose index has grown at least
once (t >= P + buffer) are scored. Four ways, with the same planes (seed ``seed*1000 + layer``,
as the session draws them) and the same (K, L, min_hits, sinks, recent):

* **grown** (pigviz): the index built on the first P keys, then grown by insert_tokens at every
  fold of the buffer (P + 257, P + 514, ... up to s): the prefill's mean;
* **rebuilt**: an index built fresh on the first s keys (re-centred on their own mean); it holds
  the same tokens as the grown one, so it differs ONLY in its mean;
* **authors**: the index of the prefill alone; every token after P is read exactly (the MagicPIG
  authors keep generated tokens in an exact buffer sized for the generation);
* **recentred**: the decoder with ``recentre=2`` (``recentre`` here), at the same folds: grown like
  **grown**, except that a fold bringing the index to at least ``recentre`` times the tokens its
  mean was taken over rebuilds it over every token so far (a fresh mean, the same planes, then
  room to grow), as ``DecodeSession._insert`` does. It re-centres at P, 2P, 4P, ... (rounded up
  to a fold); rows say how many times so far (``recentres``) and the keys those rebuilds hashed
  (``rehashed``; per generated token, ``rehashed / (index_n - P)``, in the summary).

Each is read with :func:`pigviz.lsh.fused.attend` (``buffer_end = t + 1``); the exact output is
:func:`pigviz.attention.softmax_attention_torch` over the same keys and values (float32 of the
stored fp16), so the error is the method's alone. Per prefill length P the table gives the mean
relative output error ||o_hat - o|| / ||o|| over layers, query heads and positions; the share of
visible keys read; the paired difference grown - rebuilt (mean and standard error over the
(layer, query head, seed) units, each averaged over its positions); and how far the prefill's
mean sits from the mean the rebuild centres on, relative to that mean's norm and to the keys'
spread around it (RMS of ||k - mean||).

The latency spike: a re-centring hashes and files the whole layer in one decode step. The run
times each re-centring it makes (the largest is reported), and :func:`time_spike` times, at
8,192 tokens of one captured layer (one KV head, d = 64), the re-centring as the decoder makes it
(``build_index`` + ``make_room``), an ordinary insertion of one fold of the buffer, and one decode
step of the layer's three query heads (:func:`pigviz.lsh.fused.decode_step`) for scale.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pigviz._util.config import DEFAULTS  # noqa: E402
from pigviz._util.io import write_json_atomic  # noqa: E402
from pigviz._util.validate import check_int  # noqa: E402
from pigviz.attention import softmax_attention_torch  # noqa: E402
from pigviz.lsh import fused  # noqa: E402
from pigviz.lsh.index import build_index, insert_tokens, make_room  # noqa: E402

METHODS = ("grown", "rebuilt", "authors", "recentred")
RECENTRE = 2  # the recentred way's factor, as the decoder's option recentre=2
DEFAULT_PREFILLS = (256, 512, 1024, 2048, 4096)
DEFAULT_SEEDS = (0, 1, 2, 3, 4)


def index_size(position: int, prefill: int, buffer: int) -> int:
    """Tokens in the decoder's index when the query at ``position`` is read, mirroring
    ``DecodeSession._magicpig_step``: once the buffer (tokens past the index) would hold more
    than ``buffer`` tokens, every token up to the current one is inserted."""
    return prefill + (buffer + 1) * ((position + 1 - prefill) // (buffer + 1))


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (out.double() - ref.double()).norm(dim=-1) / ref.double().norm(dim=-1)


def drift_rows(
    k: torch.Tensor,
    v: torch.Tensor,
    q: torch.Tensor,
    positions,
    prefill: int,
    *,
    K: int = DEFAULTS.K,
    L: int = DEFAULTS.L,
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    buffer: int = DEFAULTS.buffer,
    seed: int = 0,
    scale: float | None = None,
    threads: int | None = 1,
    recentre: int = RECENTRE,
    timings: list | None = None,
) -> list[dict]:
    """Grown vs rebuilt vs authors' vs recentred index for one layer (see the module docstring).

    ``k``, ``v`` (Hkv, N, d[v]); ``q`` (Hq, T, d), query head h reading KV head h // (Hq / Hkv);
    ``positions`` (T,) ascending token positions of the queries (each < N). Returns one dict per
    (query head, position) whose index has grown at least once (position >= prefill + buffer):
    ``head``, ``prefill``, ``position``, ``index_n`` (tokens indexed), ``buffered`` (tokens read exactly after
    them), ``err_<method>`` (relative output error), ``read_<method>`` (share of the position + 1
    visible keys read: exact set, sample and buffer), ``sampled_<method>`` (keys sampled),
    ``mean_shift`` (||prefill mean - rebuild mean|| / ||rebuild mean||, of the query's KV head)
    and ``mean_shift_spread`` (the same distance over the RMS of ||k - rebuild mean|| of the
    rebuild's sampleable keys); for the recentred way (factor ``recentre`` >= 2), ``centred_n``
    (tokens indexed at its last re-centring, or P), ``recentres`` (re-centrings so far),
    ``rehashed`` (keys those re-centrings hashed) and ``hashed`` (keys it hashed after the
    prefill's build, re-centrings and insertions; the grown way hashes index_n - P). ``timings``,
    a list, gets ``(tokens, seconds)`` of each re-centring (build and room to grow).
    """
    if not all(isinstance(t, torch.Tensor) for t in (k, v, q)):
        raise TypeError("k, v and q must be torch tensors")
    if k.ndim != 3 or v.ndim != 3 or q.ndim != 3 or k.shape[:2] != v.shape[:2] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"k, v must be (kv_heads, N, d[v]) with the same N and q (query_heads, T, d): got k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}, q {tuple(q.shape)}"
        )
    Hkv, N, d = k.shape
    Hq, T, _ = q.shape
    if Hq % Hkv:
        raise ValueError(f"q's query_heads ({Hq}) must be a multiple of k's kv_heads ({Hkv})")
    G = Hq // Hkv
    positions = [int(p) for p in torch.as_tensor(positions).reshape(-1).tolist()]
    if (
        len(positions) != T
        or positions != sorted(positions)
        or (positions and not 0 <= positions[0] <= positions[-1] < N)
    ):
        raise ValueError(f"positions must hold q's {T} query positions, ascending, each in [0, {N - 1}]")
    buffer = check_int("buffer", buffer, 1)
    sinks = check_int("sinks", sinks, 0)
    recent = check_int("recent", recent, 0)
    prefill = check_int("prefill", prefill, sinks + recent + 1, N)
    recentre = check_int("recentre", recentre, 2)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    opts = dict(K=K, L=L, sinks=sinks, recent=recent, seed=seed)
    kf, vf, qf = (t.detach().to(torch.float32).contiguous() for t in (k, v, q))

    grown = build_index(kf[:, :prefill], **opts)
    make_room(grown)  # as DecodeSession._build: the tables get room to grow right after the build
    authors = build_index(kf[:, :prefill], **opts)
    prefill_mean = grown.mean.clone()
    recentred = build_index(kf[:, :prefill], **opts)
    make_room(recentred)
    centred_n, recentres, rehashed, hashed = prefill, 0, 0, 0

    # Queries grouped by the index size their step sees (ascending, so the grown index only grows).
    groups: dict[int, list[int]] = {}
    for i, pos in enumerate(positions):
        s = index_size(pos, prefill, buffer)
        if s > prefill:
            groups.setdefault(s, []).append(i)
    rows = []
    for s, picked in groups.items():
        # Every fold of the buffer between the last one and s, as the decoder inserts them.
        for stop in range(grown.n + buffer + 1, s + 1, buffer + 1):
            insert_tokens(grown, kf, stop)
            if stop >= recentre * centred_n:  # DecodeSession._insert with recentre: rebuild, then room
                t0 = time.perf_counter()
                recentred = build_index(kf[:, :stop], **opts)
                make_room(recentred)
                if timings is not None:
                    timings.append((stop, time.perf_counter() - t0))
                centred_n, recentres, rehashed, hashed = stop, recentres + 1, rehashed + stop, hashed + stop
            else:
                hashed += stop - recentred.n
                insert_tokens(recentred, kf, stop)
        rebuilt = build_index(kf[:, :s], **opts)
        pos = torch.tensor([positions[i] for i in picked])
        # Rows of KV group g are contiguous (attend: row r reads KV head r // (R / Hkv)): g, head, position.
        rows_q = qf.view(Hkv, G, T, d)[:, :, picked].reshape(-1, d)
        ends = (pos + 1).repeat(Hq)
        visible = torch.arange(N)[None, :] < ends[:, None]
        ref = torch.cat(
            [
                softmax_attention_torch(
                    rows_q.view(Hkv, -1, d)[g], kf[g], vf[g], scale=scale, mask=visible.view(Hkv, -1, N)[g]
                )[0]
                for g in range(Hkv)
            ]
        )
        result = {}
        for name, index in (("grown", grown), ("rebuilt", rebuilt), ("authors", authors), ("recentred", recentred)):
            out, st = fused.attend(
                index, rows_q, kf, vf, min_hits=min_hits, scale=scale, buffer_end=ends, threads=threads
            )
            read = (st["keys_read"] + st["buffer"]).double() / ends.double()
            result[name] = (_rel_err(out, ref), read, st["sampled"])
        full_mean = rebuilt.mean.double()
        shift = (prefill_mean.double() - full_mean).norm(dim=-1)
        centred = kf[:, sinks : s - recent].double() - full_mean[:, None]
        spread = centred.pow(2).sum(-1).mean(-1).sqrt()
        for r in range(rows_q.shape[0]):
            head, i = divmod(r, len(picked))
            g = head // G
            row = {
                "head": head,
                "prefill": prefill,
                "position": int(pos[i]),
                "index_n": s,
                "buffered": int(pos[i]) + 1 - s,
                "mean_shift": float(shift[g] / full_mean[g].norm()),
                "mean_shift_spread": float(shift[g] / spread[g]),
                "centred_n": centred_n,
                "recentres": recentres,
                "rehashed": rehashed,
                "hashed": hashed,
            }
            for name in METHODS:
                err, read, sampled = result[name]
                row[f"err_{name}"] = float(err[r])
                row[f"read_{name}"] = float(read[r])
                row[f"sampled_{name}"] = int(sampled[r])
            rows.append(row)
    return rows


def _paired(rows: list[dict], a: str, b: str) -> tuple[float, float | None, list[float]]:
    """err_a - err_b: mean and standard error over (layer, head, seed) units, each unit averaged
    over its positions first (positions of one head are far from independent); and the units."""
    units: dict[tuple, list[float]] = {}
    for r in rows:
        units.setdefault((r["layer"], r["head"], r["seed"]), []).append(r[f"err_{a}"] - r[f"err_{b}"])
    diffs = [sum(u) / len(u) for u in units.values()]
    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return mean, None, diffs
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1))
    return mean, sd / math.sqrt(len(diffs)), diffs


def summarise(rows: list[dict]) -> dict:
    """Means over ``rows`` (each tagged with ``layer`` and ``seed``), the paired differences
    grown - rebuilt and recentred - rebuilt (:func:`_paired`), and the recentred way's work at
    the largest index scored: its re-centrings, and the keys they hashed (``rehashed``) and it
    hashed in all (``hashed``, re-centrings and insertions) per token inserted since the prefill
    (the grown way hashes 1 per token)."""
    if not rows:
        return {"rows": 0}
    out = {"rows": len(rows)}
    for name in METHODS:
        out[f"err_{name}"] = sum(r[f"err_{name}"] for r in rows) / len(rows)
        out[f"read_{name}"] = sum(r[f"read_{name}"] for r in rows) / len(rows)
    mean, se, diffs = _paired(rows, "grown", "rebuilt")
    out["diff_grown_rebuilt"] = mean
    out["diff_se"] = se
    out["units"] = len(diffs)
    out["grown_worse_units"] = sum(x > 0 for x in diffs)
    out["grown_worse_rows"] = sum(r["err_grown"] > r["err_rebuilt"] for r in rows) / len(rows)
    out["ratio_grown_rebuilt"] = out["err_grown"] / out["err_rebuilt"]
    mean, se, diffs = _paired(rows, "recentred", "rebuilt")
    out["diff_recentred_rebuilt"] = mean
    out["diff_recentred_se"] = se
    out["recentred_worse_units"] = sum(x > 0 for x in diffs)
    out["ratio_recentred_rebuilt"] = out["err_recentred"] / out["err_rebuilt"]
    mean, se, diffs = _paired(rows, "grown", "recentred")
    out["diff_grown_recentred"] = mean
    out["diff_grown_recentred_se"] = se
    last = max(rows, key=lambda r: r["index_n"])
    inserted = last["index_n"] - last["prefill"]
    out["index_n"] = last["index_n"]
    out["recentres"] = last["recentres"]
    out["centred_n"] = last["centred_n"]
    out["rehashed_per_token"] = last["rehashed"] / inserted
    out["hashed_per_token"] = last["hashed"] / inserted
    per_layer = {}
    for r in rows:
        per_layer.setdefault(r["layer"], (r["mean_shift"], r["mean_shift_spread"]))
    out["mean_shift"] = sum(m for m, _ in per_layer.values()) / len(per_layer)
    out["mean_shift_spread"] = sum(m for _, m in per_layer.values()) / len(per_layer)
    out["layers"] = {}
    for layer in per_layer:
        mine = [r for r in rows if r["layer"] == layer]
        entry = {
            f"{what}_{name}": sum(r[f"{what}_{name}"] for r in mine) / len(mine)
            for what in ("err", "read")
            for name in METHODS
        }
        entry["ratio_grown_rebuilt"] = entry["err_grown"] / entry["err_rebuilt"]
        entry["ratio_recentred_rebuilt"] = entry["err_recentred"] / entry["err_rebuilt"]
        entry["mean_shift"], entry["mean_shift_spread"] = per_layer[layer]
        out["layers"][str(layer)] = entry
    return out


def time_spike(
    k: torch.Tensor,
    v: torch.Tensor,
    q: torch.Tensor,
    *,
    K: int = DEFAULTS.K,
    L: int = DEFAULTS.L,
    min_hits: int = DEFAULTS.min_hits,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    buffer: int = DEFAULTS.buffer,
    seed: int = 0,
    scale: float | None = None,
    threads: int | None = 1,
    repeats: int = 5,
) -> dict:
    """Seconds (the fastest and the median of ``repeats`` runs) of what one layer's decode step
    pays at ``N = k.shape[1]`` tokens: ``recentre``, a re-centring as the decoder makes it
    (build_index over all N keys, then make_room); ``build`` and ``room``, its two parts; ``insert``,
    an ordinary insertion of one fold of the buffer (``buffer + 1`` keys, the last of the N)
    into an index of the N - buffer - 1 before them, laid out with room; and ``step``, one decode
    step of the ``q`` (Hq, d) query heads over the N keys (:func:`pigviz.lsh.fused.decode_step`,
    the compiled path; None without it). ``k``, ``v`` (Hkv, N, d[v])."""
    repeats = check_int("repeats", repeats, 1)
    buffer = check_int("buffer", buffer, 1)
    kf, vf, qf = (t.detach().to(torch.float32).contiguous() for t in (k, v, q))
    Hkv, N, d = kf.shape
    if N <= sinks + recent + buffer + 1:
        raise ValueError(f"k must hold more than sinks + recent + buffer + 1 = {sinks + recent + buffer + 1} tokens")
    opts = dict(K=K, L=L, sinks=sinks, recent=recent, seed=seed)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    times: dict[str, list[float]] = {"recentre": [], "build": [], "room": [], "insert": [], "step": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        index = build_index(kf, **opts)
        t1 = time.perf_counter()
        make_room(index)
        t2 = time.perf_counter()
        times["build"].append(t1 - t0)
        times["room"].append(t2 - t1)
        times["recentre"].append(t2 - t0)
        before = build_index(kf[:, : N - buffer - 1], **opts)
        make_room(before)
        t0 = time.perf_counter()
        insert_tokens(before, kf, N)
        times["insert"].append(time.perf_counter() - t0)
        query = qf.reshape(1, -1, 1, d)
        fused.decode_step(index, query, kf[None], vf[None], min_hits=min_hits, scale=scale, threads=threads)  # plan
        t0 = time.perf_counter()
        done = fused.decode_step(index, query, kf[None], vf[None], min_hits=min_hits, scale=scale, threads=threads)
        times["step"].append(time.perf_counter() - t0 if done is not None else None)
    out = {"tokens": N, "kv_heads": Hkv, "d": d, "query_heads": int(qf.shape[0]), "repeats": repeats}
    for name, ts in times.items():
        ts = [t for t in ts if t is not None]
        out[name] = {"min": min(ts), "median": sorted(ts)[len(ts) // 2]} if ts else None
    return out


def _parse_ints(text: str, name: str, lo: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{name} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < lo:
        raise SystemExit(f"{name} takes comma-separated integers >= {lo}, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--prefills", default=",".join(map(str, DEFAULT_PREFILLS)), help="prefill lengths P (comma-separated)"
    )
    parser.add_argument(
        "--seeds",
        default=",".join(map(str, DEFAULT_SEEDS)),
        help="plane seeds (comma-separated); index seed = seed*1000 + layer",
    )
    parser.add_argument("--K", type=int, default=DEFAULTS.K)
    parser.add_argument("--L", type=int, default=DEFAULTS.L)
    parser.add_argument("--min-hits", type=int, default=DEFAULTS.min_hits)
    parser.add_argument("--sinks", type=int, default=DEFAULTS.sinks)
    parser.add_argument("--recent", type=int, default=DEFAULTS.recent)
    parser.add_argument("--buffer", type=int, default=DEFAULTS.buffer)
    parser.add_argument(
        "--recentre", type=int, default=RECENTRE, help=f"the recentred way's factor, >= 2 (default {RECENTRE})"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch and kernel threads (results do not depend on it)")
    parser.add_argument("--spike-repeats", type=int, default=5, help="runs of each timing of the latency spike")
    parser.add_argument("--json", type=Path, help="write the summary (and, with --rows, every row) here as JSON")
    parser.add_argument("--rows", action="store_true", help="also write every scored row to --json (~2 MB)")
    args = parser.parse_args(argv)
    from pigviz.model.shipped import load_shipped_capture

    if args.recentre < 2:
        raise SystemExit(f"--recentre must be at least 2, got {args.recentre}")
    if args.spike_repeats < 1:
        raise SystemExit(f"--spike-repeats must be at least 1, got {args.spike_repeats}")
    torch.set_num_threads(max(1, args.threads))
    cap = load_shipped_capture()
    N = cap.n_tokens
    prefills = _parse_ints(args.prefills, "--prefills", args.sinks + args.recent + 1)
    if max(prefills) > N - args.buffer - 1:
        raise SystemExit(f"--prefills must be at most {N - args.buffer - 1} (N - buffer - 1) for a query to see a fold")
    seeds = _parse_ints(args.seeds, "--seeds", 0)
    options = dict(K=args.K, L=args.L, min_hits=args.min_hits, sinks=args.sinks, recent=args.recent, buffer=args.buffer)
    print(
        f"{cap.metadata.get('model_name', 'capture')} layers {cap.layers}, N={N}, queries at "
        f"{int(cap.query_positions[0])}..{int(cap.query_positions[-1])}; {options}; recentre {args.recentre}; "
        f"seeds {seeds}; compiled attend: {fused.available()}; {torch.get_num_threads()} thread(s)"
    )
    t0 = time.perf_counter()
    rows, timings = [], []
    for P in prefills:
        for seed in seeds:
            for r, layer in enumerate(cap.layers):
                for row in drift_rows(
                    cap.keys[r],
                    cap.values[r],
                    cap.queries[r],
                    cap.query_positions,
                    P,
                    seed=seed * 1000 + layer,
                    scale=cap.scaling,
                    threads=args.threads,
                    recentre=args.recentre,
                    timings=timings,
                    **options,
                ):
                    rows.append({"layer": layer, "seed": seed, **row})
        print(f"  done P={P} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    summary = {P: summarise([r for r in rows if r["prefill"] == P]) for P in prefills}
    # The spike at the capture's full length, on its first layer (one KV head, d = 64), queried
    # by that layer's three heads at the last position.
    spike = time_spike(
        cap.keys[0],
        cap.values[0],
        cap.queries[0][:, -1],
        seed=cap.layers[0],
        scale=cap.scaling,
        threads=args.threads,
        repeats=args.spike_repeats,
        **options,
    )
    largest = max(timings, key=lambda x: x[1]) if timings else None
    spike["largest_in_run"] = {"tokens": largest[0], "seconds": largest[1]} if largest else None
    spike["recentrings_in_run"] = len(timings)

    head = (
        f"{'P':>6} {'gen':>5} {'rows':>5} | {'err grown':>9} {'rebuilt':>8} {'authors':>8} {'recentred':>9} | "
        f"{'grown-rebuilt (se)':>19} {'worse':>6} | {'recentred-rebuilt (se)':>22} | "
        f"{'read grown':>10} {'rebuilt':>8} {'authors':>8} {'recentred':>9} | "
        f"{'shift/|m|':>9} {'shift/rms':>9} | {'recentres':>9} {'rehash/tok':>10}"
    )
    print(head)
    print("-" * len(head))
    for P, s in summary.items():
        if not s["rows"]:
            print(f"{P:>6}  no query past a fold of the buffer")
            continue
        se = f"{s['diff_se']:.4f}" if s["diff_se"] is not None else "-"
        se_r = f"{s['diff_recentred_se']:.4f}" if s["diff_recentred_se"] is not None else "-"
        errs = f"{s['err_grown']:>9.4f} {s['err_rebuilt']:>8.4f} {s['err_authors']:>8.4f} {s['err_recentred']:>9.4f}"
        reads = (
            f"{s['read_grown']:>10.2%} {s['read_rebuilt']:>8.2%} {s['read_authors']:>8.2%} {s['read_recentred']:>9.2%}"
        )
        print(
            f"{P:>6} {N - P:>5} {s['rows']:>5} | {errs} | "
            f"{s['diff_grown_rebuilt']:>+10.4f} ({se:>6}) {s['grown_worse_units']:>2}/{s['units']:<3} | "
            f"{s['diff_recentred_rebuilt']:>+13.4f} ({se_r:>6}) | {reads} | "
            f"{s['mean_shift']:>9.3f} {s['mean_shift_spread']:>9.3f} | "
            f"{s['recentres']:>9} {s['rehashed_per_token']:>10.2f}"
        )
    layers = [str(layer) for layer in cap.layers]
    print("err / err rebuilt per layer, grown and recentred:  " + " ".join(f"{'layer ' + x:>13}" for x in layers))
    for P, s in summary.items():
        if s["rows"]:
            cells = [
                f"{s['layers'][x]['ratio_grown_rebuilt']:>6.2f} {s['layers'][x]['ratio_recentred_rebuilt']:>6.2f}"
                for x in layers
            ]
            print(f"{'P = ' + str(P):>49}: " + " ".join(cells))
    print(
        "err: mean ||o_hat - o|| / ||o||; a - b: paired, mean (standard error) over (layer, head, seed) "
        "units; worse: units where grown errs more; read: share of visible keys read; shift: |prefill mean - "
        "rebuild mean| over |rebuild mean| and over the keys' RMS spread around it (mean over layers); "
        f"recentred: the decoder's recentre={args.recentre}; recentres: re-centrings by the largest index "
        "scored; rehash/tok: keys those re-centrings hashed per token generated"
    )

    def _s(x):
        return "-" if x is None else f"{1e3 * x['min']:.1f} ms (median {1e3 * x['median']:.1f})"

    print(
        f"latency spike at {spike['tokens']} tokens (layer {cap.layers[0]}, {spike['kv_heads']} KV head, "
        f"d={spike['d']}, {torch.get_num_threads()} thread(s), fastest of {spike['repeats']}): re-centring "
        f"{_s(spike['recentre'])} = build {_s(spike['build'])} + room {_s(spike['room'])}; an ordinary "
        f"insertion of {args.buffer + 1} tokens {_s(spike['insert'])}; a decode step of "
        f"{spike['query_heads']} query heads {_s(spike['step'])}"
    )
    if largest:
        print(f"largest re-centring in the run: {largest[0]} tokens, {1e3 * largest[1]:.1f} ms ({len(timings)} in all)")
    if args.json:
        result = {
            "benchmark": "bench_upkeep_drift",
            "capture": {
                "layers": cap.layers,
                "n_tokens": N,
                "query_positions": [int(cap.query_positions[0]), int(cap.query_positions[-1])],
            },
            "options": options,
            "recentre": args.recentre,
            "seeds": seeds,
            "prefills": prefills,
            "torch": torch.__version__,
            "fused": fused.available(),
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "seconds": seconds,
            "summary": {str(P): s for P, s in summary.items()},
            "spike": spike,
        }
        if args.rows:
            result["rows"] = rows
        # Atomic (write_json_atomic): an interrupted run never leaves a half-written file behind.
        write_json_atomic(args.json, result)
        data_dir = ROOT / "pigviz" / "data"
        if Path(args.json).resolve().parent == data_dir:  # the shipped file: its manifest entry follows it
            from pigviz.decode.evaluate import record_in_manifest

            record_in_manifest(
                args.json,
                "what keeping the prefill's mean key costs over a long generation: the shipped SmolLM2 capture "
                "(4 layers, 8,192 tokens, queries at its last 64 positions), prefills of 256-4,096 tokens, the "
                "index grown with the prefill's mean vs rebuilt on all keys vs re-centred at each doubling vs "
                "the authors' exact buffer: relative output error, share of keys read, re-centrings; summary only",
                " ".join(["python benchmarks/bench_upkeep_drift.py", *(argv if argv is not None else sys.argv[1:])]),
                directory=data_dir,
            )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
