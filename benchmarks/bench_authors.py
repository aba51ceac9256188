"""pigviz's compiled step side by side with the MagicPIG authors' CPU kernels, at 1, 2, ... threads.

    python benchmarks/build_authors_kernels.py --source PATH   # once: builds their kernels outside the repo
    python benchmarks/bench_authors.py                          # SmolLM2 at 8k, Llama-like at 98k; 1 and 2 threads
    python benchmarks/bench_authors.py --threads 1,2,4 --json /tmp/authors.json

What is timed, per layer and decode step, on the same synthetic keys (bf16 K/V, as the authors
store them), the same index and the same query hash codes, (K, L) = (10, 150):

* **authors**: ``LSH.batch_retrieve`` (walk the query's buckets, keep tokens hit at least twice)
  then ``SparseAttentionServer.attention_wrapper`` (q·k, their log u correction, softmax, the
  value mix, log-normaliser), their tables and bf16 stores filled from pigviz's index with the
  tokens they offload (all but the sinks and the recent window), exactly as their
  ``models/attnserver.py`` does; their GPU part (hashing, sinks and window) is not timed;
* **pigviz, same work**: :func:`pigviz.lsh.fused.attend_sampled`, given the same bucket ids,
  reading the sample only (its CPU half of ``placement="cpu_offload"``);
* **pigviz, whole step**: :func:`pigviz.lsh.fused.decode_step`, which also hashes the queries and
  reads the exact set (what the single-device path runs per layer).

Both select the same sampled set in every head (checked before timing: the harness stops if
not). Their OpenMP loops ask for 64 threads (``num_threads(64)``); each thread count runs in a
process of its own with ``OMP_THREAD_LIMIT`` set, which caps them, and pigviz gets the same
``threads``. Each block of calls (one side, four queries back to back) starts after a 5 ms
pause, so that threads the other side left spinning (OpenMP spins a while after a parallel
region unless ``OMP_WAIT_POLICY=passive``, see ``--omp-wait-policy``) do not take its cores.
Times are wall-clock medians (and minima) over interleaved blocks, so load on the machine hits
both alike; the ratio authors / pigviz is printed per row. Their kernels and
sources stay outside this repository: without a build (``build_authors_kernels.py``), a
compiler or their sources, this prints why and exits 0 (a skip).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SHAPES = {"SmolLM2-135M": (9, 3, 64), "Llama-3.1-8B-like": (32, 8, 128)}
DEFAULT_ROWS = (("SmolLM2-135M", 8192), ("Llama-3.1-8B-like", 98304))
K, L, SINKS, RECENT = 10, 150, 4, 64
SKIP = "SKIPPED (authors' kernels)"


def find_build(folder: str | None) -> dict | None:
    """``built.json`` of a build (the newest under the default root unless ``folder``)."""
    from build_authors_kernels import DEFAULT_ROOT

    candidates = [Path(folder) / "built.json"] if folder else sorted(DEFAULT_ROOT.glob("*/built.json"))
    found = [p for p in candidates if p.is_file()]
    if not found:
        return None
    info = json.loads(max(found, key=lambda p: p.stat().st_mtime).read_text(encoding="utf-8"))
    return info if all(Path(p).is_file() for p in info["modules"].values()) else None


def _import_authors(info: dict):
    import torch  # noqa: F401  (their modules link against torch's libraries)

    for path in info["modules"].values():
        sys.path.insert(0, str(Path(path).parent))
    import lsh
    import sparse_attention_cpu

    return lsh.LSH, sparse_attention_cpu.SparseAttentionServer


def _timed_median(calls, repeats: int, pause: float = 0.005) -> dict:
    """Interleaved timings: each round calls every function once per query, in turn, each
    block of calls after a short pause, so that threads left spinning by the previous block
    (OpenMP's, torch's) are asleep again and take no core from it."""
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            time.sleep(pause)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: {"median_ms": 1e3 * statistics.median(t), "min_ms": 1e3 * min(t)} for name, t in times.items()}


def run_row(LSH, Server, shape: str, n: int, threads: int, repeats: int, seed: int = 0) -> dict:
    import numpy as np
    import torch

    from pigviz.lsh import fused
    from pigviz.lsh.index import build_index
    from pigviz.lsh.magicpig import synthetic_decode_step

    H, Hkv, d = SHAPES[shape]
    q0, k, v = synthetic_decode_step(H, Hkv, n, d, seed=seed)
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
    index = build_index(k, K=K, L=L, sinks=SINKS, recent=RECENT, seed=seed)
    lo, hi = SINKS, n - RECENT
    m = hi - lo
    gen = torch.Generator().manual_seed(seed + 1)
    queries = [(q0 + 0.1 * torch.randn(q0.shape, generator=gen)).to(torch.bfloat16).float() for _ in range(4)]

    # Their stores, as models/attnserver.py fills them: the offloaded tokens only, keys centred.
    mean = index.mean.to(torch.bfloat16)[:, None, :]
    off_k = (k[:, lo:hi] - mean).contiguous()
    off_v = v[:, lo:hi].contiguous()
    kn = off_k.float().norm(dim=-1).contiguous()
    server = Server()
    server.alloc(1, H, Hkv, d, 1, n)
    server.fill(0, 0, off_k, off_v, kn)
    # Their tables from pigviz's: the offloaded tokens' ids (shifted by the sinks), sorted by bucket.
    sizes = index.bucket_sizes().to(torch.int64)
    codes = torch.stack(
        [torch.stack([torch.repeat_interleave(torch.arange(2**K), sizes[g, t]) for t in range(L)]) for g in range(Hkv)]
    )  # (Hkv, L, n): the bucket of each entry
    ids = index.token_ids()
    keep = (ids >= lo) & (ids < hi)
    sorted_ids = (ids[keep].view(Hkv, L, m) - lo).to(torch.int32).contiguous()
    sorted_codes = codes[keep].view(Hkv, L, m).to(torch.int16).contiguous()
    tables = LSH()
    tables.alloc(K, L, 1, H, Hkv, 1, n)
    tables.fill(0, 0, sorted_codes, sorted_ids)

    results = torch.zeros((H, n), dtype=torch.int32)
    nnz = torch.zeros(H, dtype=torch.int32)
    output = torch.zeros((H, d), dtype=torch.bfloat16)
    max_expsum = torch.zeros((2, H), dtype=torch.float32)
    bf16_query = hasattr(server, "attention_wrapper_bf16")  # their bf16 build reads a bf16 query
    prepared = []
    for q in queries:
        codes_q = index.bucket_ids(q).to(torch.int32).contiguous()
        qa = q.to(torch.bfloat16) if bf16_query else q
        prepared.append((q, codes_q, qa, q.norm(dim=-1).contiguous()))

    def authors(p):
        _, codes_q, qa, qn = p
        tables.batch_retrieve(0, codes_q, results, nnz)
        server.attention_wrapper(0, K, L, output, max_expsum, qa, qn, results, nnz)

    out_pig = torch.empty((H, d), dtype=torch.float32)

    def pigviz_same_work(p):
        q, codes_q, _, _ = p
        fused.attend_sampled(index, q, codes_q, k, v, min_hits=2, scale=d**-0.5, threads=threads, out=out_pig)

    def pigviz_whole_step(p):
        fused.decode_step(index, p[0][None, :, None], k[None], v[None], min_hits=2, scale=d**-0.5, threads=threads)

    # The same sampled sets, head by head, before anything is timed; the bytes each side must
    # read for the first query (its floor): key and value rows, the token ids scanned (theirs
    # int32), two offsets per table, and the per-head hit marks (their byte mask, cleared per
    # head; pigviz's two bit sets).
    floors_bytes = None
    for p in prepared:
        authors(p)
        _, _, sampled = fused.attend_sampled(index, p[0], p[1], k, v, min_hits=2, scale=d**-0.5, threads=threads)
        _, stats = fused.attend(index, p[0], k, v, return_read_mask=True, threads=threads)
        for h in range(H):
            theirs = np.sort(results[h, : int(nnz[h])].numpy().astype(np.int64) + lo)
            ours = stats["read_mask"][h, lo:hi].nonzero()[:, 0].numpy() + lo
            if int(nnz[h]) != int(sampled[h]) or not np.array_equal(theirs, ours):
                raise SystemExit(f"{shape} n={n}: head {h} samples differ (authors {int(nnz[h])}, pigviz {sampled[h]})")
        if floors_bytes is None:
            rows_read = int(stats["sampled"].sum()) * 2 * d * 2  # bf16 K and V rows
            scanned = int(stats["candidates"].sum())
            offsets_read = H * L * 2 * 4
            floors_bytes = {
                "authors": rows_read + scanned * 4 + offsets_read + H * n,
                "pigviz_same_work": rows_read + scanned * index.entries.element_size() + offsets_read + H * n // 2,
            }
    calls = {
        "authors": lambda: [authors(p) for p in prepared],
        "pigviz_same_work": lambda: [pigviz_same_work(p) for p in prepared],
        "pigviz_whole_step": lambda: [pigviz_whole_step(p) for p in prepared],
    }
    for fn in calls.values():
        fn()  # warm: first-touch of the stores, numba's scratch
    timing = _timed_median(calls, repeats)
    per = len(prepared)
    row = {
        "shape": shape,
        "n": n,
        "threads": threads,
        "K": K,
        "L": L,
        "threads_used": fused.threads_used(H, n, threads),  # a small step runs fewer (fused.threads_used)
        "authors_threads": threads,  # their OpenMP regions start every thread they are given
        "pigviz_work_per_thread": fused.work_per_thread(),  # this machine's calibration (or PIGVIZ_THREAD_WORK)
        "sampled_per_head": float(nnz.double().mean()),
        "same_sampled_sets": True,
        "authors_bf16_build": bf16_query,
    }
    for name, t in timing.items():
        row[f"{name}_ms"] = t["median_ms"] / per
        row[f"{name}_min_ms"] = t["min_ms"] / per
    row["authors_over_pigviz"] = row["authors_ms"] / row["pigviz_same_work_ms"]
    row["authors_over_pigviz_whole_step"] = row["authors_ms"] / row["pigviz_whole_step_ms"]
    row["bandwidth_gbs"] = bandwidth / 1e9
    for name, nbytes in floors_bytes.items():
        row[f"{name}_bytes"] = nbytes
        row[f"{name}_floor_ms"] = 1e3 * nbytes / bandwidth
        row[f"{name}_over_floor"] = row[f"{name}_ms"] / row[f"{name}_floor_ms"]
    return row


def memory_bandwidth(threads: int, gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second of summing a float32 tensor with ``threads`` torch threads (best of
    ``repeats``, wall clock): the floors' yardstick, measured in each process."""
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(int(gib * 2**30) // 4)
    x.sum()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return x.nbytes / best


bandwidth = 1.0  # set by child() before any row


def child(args) -> int:
    import torch

    global bandwidth
    bandwidth = memory_bandwidth(args.child)
    torch.set_num_threads(args.child)
    info = find_build(args.build_dir)
    LSH, Server = _import_authors(info)
    rows = []
    for spec in args.rows.split(","):
        shape, n = _parse_row(spec)
        rows.append(run_row(LSH, Server, shape, n, args.child, args.repeats))
        print(f"  {shape} n={n} threads={args.child} done", file=sys.stderr, flush=True)
    Path(args.child_out).write_text(json.dumps(rows), encoding="utf-8")
    return 0


def _parse_row(spec: str) -> tuple[str, int]:
    name, _, n = spec.partition(":")
    aliases = {"smollm2": "SmolLM2-135M", "llama": "Llama-3.1-8B-like"}
    shape = aliases.get(name.lower(), name)
    if shape not in SHAPES or not n.isdigit():
        raise SystemExit(f"--rows takes shape:n pairs, shape one of smollm2, llama; got {spec!r}")
    return shape, int(n)


def table(rows: list[dict]) -> str:
    head = (
        f"{'shape':<18}{'n':>7}{'threads':>8}{'authors':>8}{'pigviz':>7}{'sampled/head':>13}"
        f"{'authors ms':>11}{'x floor':>8}"
        f"{'pigviz ms':>10}{'x floor':>8}{'authors/pigviz':>15}{'whole step ms':>14}{'authors/whole':>14}"
        f"{'pigviz 1->t':>12}"
    )
    lines = [head, "-" * len(head)]
    one = {(r["shape"], r["n"]): r for r in rows if r["threads"] == 1}
    for r in rows:
        base = one.get((r["shape"], r["n"]))
        # A speed-up only where pigviz's count changed: otherwise the two times differ by noise.
        changed = base is not None and r["threads_used"] != base["threads_used"]
        scaling = f"{base['pigviz_same_work_ms'] / r['pigviz_same_work_ms']:.2f}x" if changed else "-"
        authors_used = r.get("authors_threads", r["threads"])
        lines.append(
            f"{r['shape']:<18}{r['n']:>7}{r['threads']:>8}{authors_used:>8}{r['threads_used']:>7}"
            f"{r['sampled_per_head']:>13.0f}{r['authors_ms']:>11.3f}"
            f"{r['authors_over_floor']:>7.1f}x{r['pigviz_same_work_ms']:>10.3f}{r['pigviz_same_work_over_floor']:>7.1f}x"
            f"{r['authors_over_pigviz']:>14.2f}x{r['pigviz_whole_step_ms']:>14.3f}"
            f"{r['authors_over_pigviz_whole_step']:>13.2f}x{scaling:>12}"
        )
    lines.append(
        "authors = their batch_retrieve + attention_wrapper; pigviz = fused.attend_sampled on the same bucket ids\n"
        "(the same work: sample only); whole step = fused.decode_step (also hashes and reads the exact set);\n"
        "authors, pigviz = the threads each started (pigviz fewer for a step below this machine's measured\n"
        "work per thread: fused.work_per_thread); pigviz 1->t only where pigviz's count changed;\n"
        "medians of interleaved wall-clock calls; authors/pigviz > 1: pigviz is faster; x floor = time over the\n"
        "bytes each must read at the sequential read bandwidth measured with as many threads (row field)."
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (one process each)")
    parser.add_argument("--rows", default=",".join(f"{s}:{n}" for s, n in DEFAULT_ROWS), help="shape:n, ...")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds timed per row")
    parser.add_argument("--build-dir", default=None, help="the folder build_authors_kernels.py printed")
    parser.add_argument(
        "--omp-wait-policy",
        choices=("default", "passive", "active"),
        default="default",
        help="OMP_WAIT_POLICY for the run (their OpenMP and torch's read it). default: unset, OpenMP spins "
        "a while between regions, as both run in a decode loop; passive: threads sleep at once (a "
        "torch matmul on 2 threads then waits to wake them)",
    )
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child(args)
    info = find_build(args.build_dir)
    if info is None:
        print(
            f"{SKIP}: no build of the MagicPIG authors' kernels found. Build them outside the repository with\n"
            "  python benchmarks/build_authors_kernels.py --source PATH   (a checkout or git dir of "
            "Infini-AI-Lab/MagicPIG; needs g++ and their sources)"
        )
        return 0
    from build_authors_kernels import cpu_has_avx512f

    from pigviz._util.threads import cpu_model

    if not cpu_has_avx512f():
        print(
            f"{SKIP}: this CPU has no AVX-512 (no avx512f in /proc/cpuinfo). The authors' kernels use "
            "AVX-512 intrinsics and are compiled with -mavx512f, so they would die of an illegal "
            "instruction here; run this on a CPU with AVX-512"
        )
        return 0
    counts = [int(t) for t in args.threads.split(",") if t.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="pigviz-authors-") as tmp:
        for t in counts:
            out = Path(tmp) / f"{t}.json"
            env = {**os.environ, "OMP_THREAD_LIMIT": str(t), "OMP_NUM_THREADS": str(t)}
            env.pop("OMP_WAIT_POLICY", None)
            if args.omp_wait_policy != "default":
                env["OMP_WAIT_POLICY"] = args.omp_wait_policy
            command = [sys.executable, str(Path(__file__).resolve()), "--child", str(t), "--child-out", str(out)]
            command += ["--rows", args.rows, "--repeats", str(args.repeats)]
            if args.build_dir:
                command += ["--build-dir", args.build_dir]
            subprocess.run(command, check=True, env=env)
            rows.extend(json.loads(out.read_text(encoding="utf-8")))
    print(
        f"their build: {info['commit'][:12]}, avx512_bf16 {info['avx512bf16']}, OMP_WAIT_POLICY="
        f"{args.omp_wait_policy}; {os.cpu_count()} CPUs here ({cpu_model()}), load average {os.getloadavg()[0]:.1f}"
    )
    print(table(rows))
    if args.json:
        from pigviz._util.io import write_json_atomic

        write_json_atomic(
            args.json,
            {
                "format": "pigviz-authors-side-by-side-v1",
                "authors_build": info,
                "cpu_count": os.cpu_count(),
                "cpu_model": cpu_model(),
                "omp_wait_policy": args.omp_wait_policy,
                "load_average": list(os.getloadavg()),
                "command": " ".join(["python benchmarks/bench_authors.py", *(argv or sys.argv[1:])]),
                "rows": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
