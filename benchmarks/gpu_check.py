"""The GPU check of sampled decoding, in one device call (``benchmarks/gpu_check.sh`` wraps it).

    python benchmarks/gpu_check.py prepare                  # here: write .gpu_carry/ (sizes printed)
    python benchmarks/gpu_check.py run --device cuda --carry .gpu_carry --out $OUT/gpu_check.json
    python benchmarks/gpu_check.py import PATH/gpu_check.json   # here: pigviz/data/decode_speed_gpu.json

The device takes at most 64 MiB of files per call, the working tree included, and the bundled
94 MB GGUF does not fit. ``prepare`` carries instead the GGUF cut to its first layers with their
real weights (``pigviz.model.gguf_cut``; as many layers as fit beside the tree, 8 of 30 at
present): every kept layer computes what it computes in the full model, so per-layer keys and
budgets match the full model's for those layers; only the logits differ. ``run`` (device, one
call of a few minutes) does, each part under a time guard, writing the JSON after each:

1. ``pytest -m cuda`` over the test files that hold CUDA tests (their summary is recorded);
2. quality: the teacher-forced evaluation of ``pigviz/data/decode_quality_smollm2.json``'s settings
   (its token ids, carried; its first (K, L), its seeds, TopK at the matched budget) with the
   cut model, on this machine's CPU and on its GPU, both fp32, compared row by row. Same
   machine, same library versions, same model: what differs is the device's float rounding,
   which can flip a few bucket bits, hence tolerances (``TOLERANCE``), not equality;
3. speed: per-token decode time, dense vs MagicPIG (K=10, L=150) in both placements (the padded
   all-GPU form, and MagicPIG's own ``cpu_offload``: model, query hashing, sinks and window on
   the GPU, the rest of the cache, the tables and the sampled attention on the CPU; row
   ``magicpig_offload``, with the GPU memory it freed), on a random-weight 30-layer
   model built from SmolLM2's config (the cut has too few layers to time the real depth), at a
   few contexts in bf16 and fp32, attention timed apart with GPU synchronisation, the budget
   printed beside each row. The synchronisation brackets every attention call, so the host
   cannot run ahead of the GPU there: whole steps are timed serialised, an upper bound on a
   free-running step (and the padded path's never waiting inside a layer does not show in
   them). Random keys hash differently from trained ones: read budgets from the quality part;
4. a bf16 smoke run of the cut model: MagicPIG generation with a small buffer (so the index is
   rebuilt), a capture, and the TopK, Quest and StreamingLLM baselines.

TF32 is off for every fp32 matmul, in this process and in pytest's, and recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FORMAT = "pigviz-gpu-check-v2"
CARRY = ROOT / ".gpu_carry"
REFERENCE = ROOT / "pigviz" / "data" / "decode_quality_smollm2.json"
LIMIT = 64 * 2**20  # what one device call may carry, the working tree included
MARGIN = 2 * 2**20  # the tree grows a little between prepare and the call
CUT_NAME = "smollm2-cut-{n}.gguf"
TOLERANCE = {"perplexity_rel": 0.01, "kl_rel": 0.25, "kl_abs": 0.005, "top1_abs": 0.04, "budget_rel": 0.05}
SPEED_KL = (10, 150)
# (method, options, row label): both placements of MagicPIG beside dense.
SPEED_METHODS = (
    ("dense", {}),
    ("magicpig", {"K": SPEED_KL[0], "L": SPEED_KL[1]}),
    ("magicpig", {"K": SPEED_KL[0], "L": SPEED_KL[1], "placement": "cpu_offload"}, "magicpig_offload"),
)
SPEED_LAYERS = 30  # SmolLM2-135M's depth
SPEED_SEED = 0
# Seconds each part may take at most on the device; all of them also stop at --budget-s.
CAPS = {"pytest": 150, "quality": 180, "speed": 170, "smoke": 90}
TF32_PRELUDE = "import torch; torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False"


# -- shared ---------------------------------------------------------------------------------------
def compare_rows(reference: list[dict], measured: list[dict]) -> list[dict]:
    """One line per measured row: reference (CPU) value, device value, within tolerance or not."""

    def key(r):
        return (r["method"], r.get("K"), r.get("L"), r.get("seed"))

    ref = {key(r): r for r in reference}
    out = []
    for row in measured:
        cpu = ref.get(key(row))
        if cpu is None:
            out.append({"label": row["label"], "seed": row.get("seed"), "ok": False, "why": "no CPU row to compare"})
            continue
        checks = {
            "perplexity": abs(row["perplexity"] - cpu["perplexity"]) <= TOLERANCE["perplexity_rel"] * cpu["perplexity"]
            if row["method"] == "dense"
            else True,
            "kl": abs(row["kl_mean"] - cpu["kl_mean"]) <= TOLERANCE["kl_rel"] * cpu["kl_mean"] + TOLERANCE["kl_abs"],
            "top1": abs(row["top1_agreement"] - cpu["top1_agreement"]) <= TOLERANCE["top1_abs"],
            "budget": abs(row["budget"] - cpu["budget"]) <= TOLERANCE["budget_rel"] * cpu["budget"],
        }
        out.append(
            {
                "label": row["label"],
                "seed": row.get("seed"),
                "ok": all(checks.values()),
                "failed": [k for k, ok in checks.items() if not ok],
                **{
                    f"{name}_{side}": r[field]
                    for name, field in (
                        ("kl", "kl_mean"),
                        ("top1", "top1_agreement"),
                        ("budget", "budget"),
                        ("ppl", "perplexity"),
                    )
                    for side, r in (("cpu", cpu), ("device", row))
                },
            }
        )
    return out


def _ids_sha(ids: list[int]) -> str:
    import numpy as np

    return hashlib.sha256(np.asarray(ids, dtype="<i8").tobytes()).hexdigest()


def _sha256(path: Path) -> str:
    from pigviz._util.io import sha256_file

    return sha256_file(path)


# -- prepare (here) -------------------------------------------------------------------------------
def tree_bytes() -> int:
    """Bytes of what a device call sends besides the carry: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    total = 0
    for name in filter(None, listed.split(b"\0")):
        path = ROOT / os.fsdecode(name)
        if path.is_file() or path.is_symlink():  # a deleted tracked file is still listed
            total += path.lstat().st_size
    return total


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _exclude_carry() -> None:
    exclude = subprocess.run(
        ["git", "rev-parse", "--git-path", "info/exclude"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    exclude = (ROOT / exclude).resolve()
    line = f"/{CARRY.name}/"
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    if line not in text.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as fh:
            fh.write(("" if not text or text.endswith("\n") else "\n") + line + "\n")


def prepare(args) -> int:
    """Write .gpu_carry/: the cut GGUF, the gguf package, the CPU run's token ids, sha256s."""
    import gguf

    from pigviz._util.io import atomic_path, write_json_atomic
    from pigviz.model import gguf_cut, loading, texts

    # The cut is made from the installed package's file, never from an earlier cut.
    os.environ.pop(loading.GGUF_OVERRIDE_ENV["smollm2-135m"], None)
    src = loading.bundled_gguf_path()
    _exclude_carry()
    if CARRY.exists():
        shutil.rmtree(CARRY)
    site = CARRY / "site"
    package = Path(gguf.__file__).parent
    shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    for info in package.parent.glob("gguf-*.dist-info"):  # transformers asks importlib.metadata for its version
        shutil.copytree(info, site / info.name)

    settings = json.loads(REFERENCE.read_text(encoding="utf-8"))["settings"]
    n_ids = settings["prefix"] + settings["stretch"] + 1
    _, tokenizer = loading.load_model(device="cpu", progress=False)  # only its tokenizer is needed
    ids = texts.first_tokens(tokenizer, n_ids).tolist()
    if _ids_sha(ids) != settings["token_ids_sha256"]:
        raise SystemExit(
            f"this machine tokenises another text than {REFERENCE.name} was made from (token ids sha256 "
            "differs): prepare where that file was made"
        )
    write_json_atomic(CARRY / "ids.json", ids, indent=None)

    tree = tree_bytes()
    others = _folder_bytes(CARRY) + 16384  # + info.json and SHA256SUMS, written below
    room = LIMIT - MARGIN - tree - others
    n_layers = args.n_layers or gguf_cut.layers_that_fit(src, room)
    if n_layers < 1:
        raise SystemExit(f"the working tree ({tree:,} bytes) leaves no room for even one layer of the model")
    cut = gguf_cut.cut_gguf(src, CARRY / CUT_NAME.format(n=n_layers), n_layers)
    blocks = gguf_cut.gguf_block_count(src)
    info = {
        "n_layers": n_layers,
        "block_count": blocks,
        "cut": cut.name,
        "cut_sha256": _sha256(cut),
        "source": src.name,
        "source_sha256": _sha256(src),
        "token_ids": len(ids),
        "token_ids_sha256": settings["token_ids_sha256"],
        "reference": REFERENCE.name,
    }
    write_json_atomic(CARRY / "info.json", info)
    sums = [f"{_sha256(p)}  {p.relative_to(CARRY).as_posix()}" for p in sorted(CARRY.rglob("*")) if p.is_file()]
    with atomic_path(CARRY / "SHA256SUMS") as tmp:
        Path(tmp).write_text("\n".join(sums) + "\n", encoding="utf-8")
    carry = _folder_bytes(CARRY)
    total = tree + carry
    mib = lambda b: f"{b / 2**20:.2f} MiB"  # noqa: E731
    print(
        f"cut GGUF: {cut.name}, the first {n_layers} of {blocks} layers, {mib(cut.stat().st_size)}\n"
        f"carry {CARRY.name}/: {mib(carry)} (gguf package, {len(ids)} token ids, sha256s)\n"
        f"working tree: {mib(tree)}\n"
        f"total: {mib(total)} of the {mib(LIMIT)} a call may carry ({mib(LIMIT - total)} to spare)"
    )
    if total > LIMIT - MARGIN // 2:
        raise SystemExit("too big to carry: lower --n-layers or make the working tree smaller")
    print(
        "\nThe device call (one, a few minutes):\n"
        '  run(carry=[".gpu_carry"], timeout_s=540, command="bash benchmarks/gpu_check.sh run")'
    )
    return 0


# -- run (device) ---------------------------------------------------------------------------------
class PartTimeout(Exception):
    """A part ran past its share of the call's time."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise PartTimeout in this (main) thread after ``seconds``; a long C call ends first."""

    def fire(signum, frame):
        raise PartTimeout(f"stopped after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _finite(obj):
    """JSON without NaN or inf (write_json_atomic refuses them): such a number becomes None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class Check:
    """The result being built, written to ``out`` after every part."""

    def __init__(self, out: Path, budget_s: float):
        self.out = out
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + budget_s
        self.result: dict = {"format": FORMAT, "passed": False, "complete": False, "parts": {}}

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def save(self) -> None:
        from pigviz._util.io import write_json_atomic

        self.result["seconds_total"] = round(time.perf_counter() - self.t0, 1)
        write_json_atomic(self.out, _finite(self.result))

    def part(self, name: str, fn, cap: float, need: float = 15.0) -> None:
        """Run ``fn(record)`` (it fills ``record`` and sets record["ok"]) in at most ``cap`` seconds."""
        record: dict = {"ok": False}
        self.result["parts"][name] = record
        limit = min(cap, self.left() - 5)
        print(f"\n== {name} (up to {max(limit, 0):.0f} s)", flush=True)
        if limit < need:
            record.update(status="skipped", why=f"only {self.left():.0f} s of the call's budget left")
            print(f"   skipped: {record['why']}", flush=True)
            self.save()
            return
        t = time.perf_counter()
        try:
            with time_limit(limit):
                fn(record)
            record["status"] = "done"
        except PartTimeout as exc:
            record.update(status="timeout", ok=False, why=str(exc))
        except Exception as exc:  # a failed part must not stop the others
            record.update(status="error", ok=False, why=f"{type(exc).__name__}: {exc}")
            record["traceback"] = traceback.format_exc()[-3000:]
            print(record["traceback"], flush=True)
        record["seconds"] = round(time.perf_counter() - t, 1)
        print(
            f"   {name}: {record['status']}, {'ok' if record['ok'] else 'NOT ok'} ({record['seconds']} s)", flush=True
        )
        self.save()


def _cuda_test_files() -> list[str]:
    """Test files holding a CUDA test: collecting the whole suite would import the widget and
    browser tests' packages, which a device image lacks."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.cuda" in p.read_text(encoding="utf-8")
    )


def part_pytest(record: dict, device: str, limit: float) -> None:
    files = _cuda_test_files()
    command = [
        sys.executable,
        "-c",
        f"import sys; {TF32_PRELUDE}; import pytest; sys.exit(pytest.main(sys.argv[1:]))",
        "-m",
        "cuda",
        "-q",
        "-p",
        "no:cacheprovider",
        *files,
    ]
    record["command"] = "pytest -m cuda -q " + " ".join(files) + "   (TF32 off)"
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit - 3)
        output, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc = None
    lines = [x for x in output.strip().splitlines() if x.strip()]
    record.update(rc=rc, summary=lines[-1] if lines else "", output_tail=output[-4000:])
    print(output[-4000:], flush=True)
    skipped_on_gpu = device.startswith("cuda") and "skipped" in record["summary"]
    record["ok"] = rc == 0 and not skipped_on_gpu
    if skipped_on_gpu:
        record["why"] = "a CUDA test was skipped on a CUDA machine"
    if rc is None:
        record["why"] = "pytest ran past its time"


def _slim(rows: list[dict]) -> list[dict]:
    """Quality rows without the per-token lists (the JSON stays small enough to ship)."""
    return [{k: v for k, v in r.items() if not k.endswith("_per_token")} for r in rows]


def part_quality(record: dict, device: str, ids: list[int], quick: bool) -> None:
    import torch

    from pigviz.decode import evaluate as decode_eval
    from pigviz.model.loading import load_model

    settings = json.loads(REFERENCE.read_text(encoding="utf-8"))["settings"]
    prefix, stretch = (1024, 32) if quick else (settings["prefix"], settings["stretch"])
    # All the reference's seeds: TopK runs at their mean budget.
    seeds = settings["seeds"][:1] if quick else settings["seeds"]
    K, L = settings["configs"][0]
    record["settings"] = {"prefix": prefix, "stretch": stretch, "K": K, "L": L, "seeds": seeds, "baselines": ["topk"]}
    record["tolerance"] = TOLERANCE
    sides = {}
    for side in ("cpu", device):
        model, tokenizer = load_model(device=side, dtype="float32", progress=False)
        t = time.perf_counter()
        q = decode_eval.quality_eval(
            model,
            tokenizer,
            prefix=prefix,
            stretch=stretch,
            configs=[(K, L)],
            seeds=seeds,
            baselines=["topk"],
            min_hits=settings["min_hits"],
            sinks=settings["sinks"],
            recent=settings["recent"],
            dense_layers=settings["dense_layers"],
            ids=ids,
            progress=False,
        )
        sides[side] = q
        record[f"seconds_{'cpu' if side == 'cpu' else 'device'}"] = round(time.perf_counter() - t, 1)
        record[f"rows_{'cpu' if side == 'cpu' else 'device'}"] = _slim(q["rows"])
        record[f"threads_{'cpu' if side == 'cpu' else 'device'}"] = torch.get_num_threads()
        print(f"   {side}: {len(q['rows'])} rows in {time.perf_counter() - t:.1f} s", flush=True)
        del model
    verdicts = compare_rows(sides["cpu"]["rows"], sides[device]["rows"])
    record["verdicts"] = verdicts
    print(f"   quality, CPU vs {device}, same machine and model (the first {prefix:,} + {stretch} tokens):")
    for v in verdicts:
        detail = (
            ""
            if "kl_cpu" not in v
            else (
                f"KL {v['kl_cpu']:.4f} -> {v['kl_device']:.4f}  top-1 "
                f"{100 * v['top1_cpu']:.1f}% -> {100 * v['top1_device']:.1f}%  budget "
                f"{100 * v['budget_cpu']:.2f}% -> {100 * v['budget_device']:.2f}%  ppl "
                f"{v['ppl_cpu']:.3f} -> {v['ppl_device']:.3f}"
            )
        )
        print(f"   {'ok  ' if v['ok'] else 'FAIL'} {v['label']:<38} seed {v['seed']!s:>4}  {detail} {v.get('why', '')}")
    record["ok"] = bool(verdicts) and all(v["ok"] for v in verdicts)


def part_smoke(record: dict, device: str, ids: list[int], quick: bool) -> None:
    import torch

    from pigviz.decode.generation import generate
    from pigviz.model.capture import capture
    from pigviz.model.loading import load_model

    model, tokenizer = load_model(device=device, dtype="bfloat16", progress=False)
    prompt = torch.tensor(ids[: 256 if quick else 2048])
    problems, runs = [], {}
    specs = [
        ("magicpig", 6 if quick else 16, {"K": 8, "L": 40, "buffer": 4}),  # a small buffer: insertions
        ("dense", 6 if quick else 16, {}),
        ("topk", 4 if quick else 8, {"budget": 0.05}),
        ("quest", 4 if quick else 8, {"budget": 0.05}),
        ("streaming", 4 if quick else 8, {}),
    ]
    for method, n_new, options in specs:
        g = generate(model, tokenizer, prompt, method, n_new, progress=False, stop_at_eos=False, **options)
        runs[method] = {
            "options": options,
            "tokens": len(g.token_ids),
            "token_ids": g.token_ids,
            "mean_budget": g.mean_budget(),
            "upkeeps": g.upkeeps,
            "rebuilds": g.rebuilds,
            "ms_per_token": g.decode_ms_per_token(),
            "text": g.text[:200],
        }
        if not all(0 < b <= 1 for b in g.budgets):
            problems.append(f"{method}: a budget outside (0, 1]")
        if len(g.token_ids) != n_new:
            problems.append(f"{method}: {len(g.token_ids)} tokens instead of {n_new}")
        print(
            f"   {method:<9} {len(g.token_ids)} tokens, mean budget {100 * g.mean_budget():5.1f}%, "
            f"{g.upkeeps} insertions, {g.rebuilds} rebuilds, {g.decode_ms_per_token():.1f} ms/token",
            flush=True,
        )
    if runs["magicpig"]["upkeeps"] < 1 or runs["magicpig"]["rebuilds"] != 0:
        problems.append("magicpig: the buffer was never filed into the index, or the index was rebuilt (buffer 4)")
    same = sum(a == b for a, b in zip(runs["magicpig"]["token_ids"], runs["dense"]["token_ids"]))
    runs["magicpig"]["same_tokens_as_dense"] = same
    cap = capture(model, tokenizer, n_tokens=256 if quick else 1024, last=16, progress=False)
    finite = all(bool(torch.isfinite(t.float()).all()) for t in (cap.queries, cap.keys, cap.values))
    record["capture"] = {
        "queries": list(cap.queries.shape),
        "keys": list(cap.keys.shape),
        "dtype": str(cap.keys.dtype).replace("torch.", ""),
        "finite": finite,
    }
    if not finite or cap.keys.shape[0] != model.config.num_hidden_layers:
        problems.append("capture: non-finite values or a layer missing")
    print(f"   capture {record['capture']}", flush=True)
    record.update(dtype="bfloat16", generations=runs, problems=problems)
    record["ok"] = not problems and all(math.isfinite(r["mean_budget"]) for r in runs.values())


def random_model(config, device: str, dtype: str, seed: int = SPEED_SEED):
    """A ``SPEED_LAYERS``-layer model of SmolLM2's shape with random weights: the speed of a
    decode step depends on the shapes, not on what the weights learned."""
    import torch
    from transformers import AutoModelForCausalLM

    from pigviz.model.loading import ModelSource, resolve_dtype

    config = copy.deepcopy(config)
    config.num_hidden_layers = SPEED_LAYERS
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [config.layer_types[0]] * SPEED_LAYERS
    torch.manual_seed(seed)  # drawn on the CPU, so every machine times the same weights
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    model = model.to(device=device, dtype=resolve_dtype(dtype, device)).eval()
    model.pigviz_source = ModelSource(
        name=f"smollm2-135m-shape-random-{SPEED_LAYERS}-layers",
        kind="random-init",
        revision=f"seed:{seed}",
        path="SmolLM2-135M's config (from the carried cut), random weights",
    )
    return model


def part_speed(record: dict, device: str, ids: list[int], quick: bool, contexts: list[int], steps: int) -> None:
    import bench_decode
    import torch
    from bench_decode import measure, table

    from pigviz.model.loading import load_model

    cut, _ = load_model(device="cpu", dtype="float32", progress=False)
    config = cut.config
    del cut
    # The floors' yardstick: the device's own sequential read bandwidth (an offloaded row's CPU
    # part reads host memory, so its floor is optimistic).
    bench_decode.bandwidth = device_bandwidth(device)
    record["bandwidth_gbs"] = bench_decode.bandwidth / 1e9
    record.update(
        model=f"random weights (seed {SPEED_SEED}), SmolLM2-135M's shape with {SPEED_LAYERS} layers",
        contexts=contexts,
        steps=steps,
        methods={
            "dense": {},
            "magicpig": {"K": SPEED_KL[0], "L": SPEED_KL[1]},
            "magicpig_offload": {"K": SPEED_KL[0], "L": SPEED_KL[1], "placement": "cpu_offload"},
        },
        tables={},
        cpu_threads=torch.get_num_threads(),
    )
    id_tensor = torch.tensor(ids)
    dtypes = ("bfloat16", "float32")
    for dtype in dtypes:
        model = random_model(config, device, dtype)
        rows = record["tables"].setdefault(dtype, [])
        for context in contexts:
            new = measure(
                model,
                None,
                contexts=[context],
                methods=SPEED_METHODS,
                steps=steps,
                ids=id_tensor,
                progress=True,
            )
            rows.extend(dict(r, dtype=dtype) for r in new)
        print(f"\n   speed, {dtype}, {device}:\n" + table(rows), flush=True)
        for r in rows:
            if r["method"] == "magicpig":
                print(f"   budget at {r['context']:,} tokens ({dtype}): {100 * r['budget']:.2f}% of the keys read")
            if r.get("offload"):
                freed = r["offload"].get("cuda_allocated_freed", r["offload"]["device_bytes_freed"])
                where = f"{r['context']:,} tokens ({dtype})"
                print(f"   cpu_offload at {where}: {freed / 2**20:.1f} MiB of device memory freed")
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    record["ok"] = all(len(record["tables"].get(d, [])) == len(SPEED_METHODS) * len(contexts) for d in dtypes)


def device_bandwidth(device: str, gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second of summing a float32 tensor on ``device`` (best of ``repeats``)."""
    import torch

    x = torch.ones(int(gib * 2**30) // 4, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        t0 = time.perf_counter()
        x.sum()
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
        best = min(best, time.perf_counter() - t0)
    del x
    return int(gib * 2**30) / best


def _numba_version() -> str | None:
    """numba's version where the compiled CPU path runs (the quality part's CPU side), else None."""
    from pigviz.lsh import kernels

    return kernels.numba.__version__ if kernels.available() else None


def _tf32_off() -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "pytest": "off too (set before pytest.main in its process)",
    }


def run(args) -> int:
    import torch

    from pigviz.decode import evaluate as decode_eval
    from pigviz.model import loading

    out = Path(args.out)
    check = Check(out, args.budget_s)
    result = check.result
    result["tf32"] = _tf32_off()
    carry = Path(args.carry)
    info = json.loads((carry / "info.json").read_text(encoding="utf-8"))
    ids = json.loads((carry / "ids.json").read_text(encoding="utf-8"))
    if _ids_sha(ids[: info["token_ids"]]) != info["token_ids_sha256"]:
        raise SystemExit(f"{carry}/ids.json does not hold the token ids of {info['reference']} (sha256 differs)")
    gguf_path = loading.bundled_gguf_path()
    if gguf_path.name != info["cut"]:
        raise SystemExit(
            f"the model file is {gguf_path}, not the carried cut {info['cut']}: set "
            f"{loading.GGUF_OVERRIDE_ENV['smollm2-135m']} (gpu_check.sh run does)"
        )
    result["carry"] = info
    result["quick"] = args.quick

    t = time.perf_counter()
    try:
        model, _ = loading.load_model(device=args.device, dtype="float32", progress=False)  # de-quantised once
    except Exception:
        result["error"] = "loading the cut model failed:\n" + traceback.format_exc()[-3000:]
        check.save()
        raise
    env = decode_eval.environment(model)
    del model
    if env["model"]["revision"] != f"sha256:{info['cut_sha256']}":
        raise SystemExit(f"the loaded model is not the carried cut ({env['model']}); see {carry}/info.json")
    env.update(
        tf32=result["tf32"],
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        cuda_version=torch.version.cuda,
        numba=_numba_version(),
        model_note=f"the bundled GGUF cut to its first {info['n_layers']} of {info['block_count']} layers",
    )
    result["environment"] = env
    result["seconds_load"] = round(time.perf_counter() - t, 1)
    print(f"{env['hardware']}: cut model ({info['n_layers']} layers) loaded in {result['seconds_load']} s", flush=True)
    check.save()

    contexts = [1024] if args.quick else [int(c) for c in args.contexts.split(",")]
    steps = 4 if args.quick else args.steps
    parts = {
        "pytest": lambda r: part_pytest(r, args.device, min(CAPS["pytest"], check.left() - 5)),
        "quality": lambda r: part_quality(r, args.device, ids, args.quick),
        "speed": lambda r: part_speed(r, args.device, ids, args.quick, contexts, steps),
        "smoke": lambda r: part_smoke(r, args.device, ids, args.quick),
    }
    chosen = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(parts))
    if unknown or not chosen:
        raise SystemExit(f"--parts must name some of {', '.join(parts)}; got {args.parts!r}")
    result["parts_asked"] = chosen
    for name in parts:  # always in this order: the speed table ships, the smoke run matters least
        if name in chosen:
            check.part(name, parts[name], CAPS[name])

    speed = result["parts"]["speed"].get("tables", {})
    # Notebook 07 prints environment.hardware and a table of `speed`: the bf16 one, as GPUs run.
    result["speed"] = speed.get("bfloat16", [])
    result["speed_dtype"] = "bfloat16"
    result["complete"] = set(result["parts"]) == set(parts) and all(
        p.get("status") == "done" for p in result["parts"].values()
    )
    result["passed"] = result["complete"] and all(p["ok"] for p in result["parts"].values())
    check.save()
    print("\nparts: " + ", ".join(f"{k} {'ok' if p['ok'] else p.get('status')}" for k, p in result["parts"].items()))
    verdict = "PASSED" if result["passed"] else "FAILED"
    print(f"{verdict}: wrote {out} ({env['hardware']}, {result['seconds_total']} s)")
    return 0 if result["passed"] else 1


# -- import (here) --------------------------------------------------------------------------------
def import_result(args) -> int:
    from pigviz._util.io import write_json_atomic
    from pigviz.decode import evaluate as decode_eval
    from pigviz.decode import report
    from pigviz.model import shipped

    data = json.loads(Path(args.path).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT or not data.get("passed") or not data.get("speed"):
        raise SystemExit(
            f"{args.path} is not a passed pigviz GPU check ({FORMAT}) with a speed table; not importing it"
        )
    if data.get("quick") or not str(data["environment"].get("device", "")).startswith("cuda"):
        raise SystemExit(f"{args.path} is a dry run (--quick or not on a GPU); not importing it")
    target = shipped.data_dir() / report.GPU_SPEED_FILE
    write_json_atomic(target, data)
    hardware = data["environment"]["hardware"]
    decode_eval.record_in_manifest(
        target,
        f"GPU check on {hardware}: per-token decode time dense vs MagicPIG (K={SPEED_KL[0]}, L={SPEED_KL[1]}) of a "
        f"random-weight {SPEED_LAYERS}-layer SmolLM2-shaped model in bf16 (`speed`) and fp32 (parts.speed.tables), "
        "TF32 off; the cut SmolLM2's teacher-forced quality on that machine's CPU vs its GPU; pytest -m cuda",
        "bash benchmarks/gpu_check.sh run (one device call; see its header), then gpu_check.sh import",
    )
    print(f"wrote {target} ({hardware}) and its manifest entry")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="here: write .gpu_carry/ and print the device call")
    p.add_argument("--n-layers", type=int, default=None, help="layers to keep (default: as many as fit)")
    p = sub.add_parser("run", help="on the device: every part, one JSON")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True, help="JSON file to write (rewritten after every part)")
    p.add_argument("--carry", default=str(CARRY), help="the folder prepare wrote")
    p.add_argument("--contexts", default="2048,4096,8192", help="speed: prefix lengths")
    p.add_argument("--steps", type=int, default=32, help="speed: timed decode steps per method")
    p.add_argument("--budget-s", type=float, default=480, help="seconds for the whole run (the call's limit is 540)")
    p.add_argument("--quick", action="store_true", help="dry run: small sizes everywhere (a CPU rehearsal)")
    p.add_argument("--parts", default="pytest,quality,speed,smoke", help="which parts to run (a rerun: fewer)")
    p = sub.add_parser("import", help="here: ship a passed check's result as pigviz/data/decode_speed_gpu.json")
    p.add_argument("path")
    args = parser.parse_args(argv)
    return {"prepare": prepare, "run": run, "import": import_result}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
