"""Torch ops per MagicPIG decode step, and how many of them would make a CPU wait for a GPU.

    python benchmarks/count_ops.py                 # one layer's attend, then SmolLM2 decode tokens
    python benchmarks/count_ops.py --attend-only   # without the model

Runs on the CPU: the counts are those of the torch path a GPU takes (``PIGVIZ_NO_NUMBA=1``
switches the compiled CPU step off), with the reference estimator (``PIGVIZ_PADDED=0``) and
with the sync-free padded one (``PIGVIZ_PADDED=1``). Every aten op below autograd is counted
with a TorchDispatchMode (under inference_mode, as in decoding, it also sees composite ops
such as ``aten.to`` that may do nothing: a count to compare, not a count of GPU kernels).

Finiteness checks are off, as on a GPU without ``PIGVIZ_DEBUG=1``.

"Waits" counts what on a GPU would block the host until the device catches up: a scalar
read (int(), float(), bool(), .item(): ``_local_scalar_dense``, or ``item`` / ``is_nonzero``
under inference_mode), ``nonzero``, boolean-mask selection (``masked_select``, ``index``
with a bool index), ``repeat_interleave`` without a host-known output size, and calls of
``.cpu()`` / ``.tolist()`` (which never dispatch on a CPU tensor, so the methods are
wrapped). Every tensor here is on the CPU, so this is an upper bound: it also counts reads of
tensors that live on the CPU by design (the decode buffer's ends, which the session makes
there); ``--where`` lists the pigviz line behind each. The CUDA tests run the padded path
under ``torch.cuda.set_sync_debug_mode("error")``, which sees the real thing.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

# Scalar reads dispatch as _local_scalar_dense, or under inference_mode as item / is_nonzero.
_WAITS = {
    "aten._local_scalar_dense.default",
    "aten.item.default",
    "aten.is_nonzero.default",
    "aten.nonzero.default",
    "aten.masked_select.default",
}


def _site() -> str:
    """The innermost pigviz line on the stack: where a wait comes from."""
    for frame in reversed(traceback.extract_stack()):
        if f"{os.sep}pigviz{os.sep}" in frame.filename:
            return f"{frame.filename.split(os.sep + 'pigviz' + os.sep)[-1]}:{frame.lineno} {frame.name}"
    return "outside pigviz"


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.waits = collections.Counter()
        self.sites = collections.Counter()

    def wait(self, kind):
        self.waits[kind] += 1
        self.sites[_site()] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        self.ops[name] += 1
        if name in _WAITS:
            self.wait(name)
        elif name.startswith("aten.index.") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())
        ):
            self.wait("index with a bool mask")
        elif name.startswith("aten.repeat_interleave") and kwargs.get("output_size") is None:
            self.wait("repeat_interleave without output_size")
        return func(*args, **kwargs)


def count(fn):
    """Ops of ``fn()``; ``.tolist()`` and ``.cpu()`` never dispatch on a CPU tensor, so their
    calls are counted by wrapping the methods (each would be a copy to the host on a GPU, but
    a call on a tensor that lives on the CPU by design counts too: an upper bound)."""
    counter = OpCounter()
    originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu")}

    def wrap(name, method):
        def counted(self, *args, **kwargs):
            counter.wait(f".{name}()")
            return method(self, *args, **kwargs)

        return counted

    try:
        for name, method in originals.items():
            setattr(torch.Tensor, name, wrap(name, method))
        with counter:
            fn()
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)
    return counter


def _env(padded: str):
    from pigviz.lsh import magicpig

    os.environ["PIGVIZ_NO_NUMBA"] = "1"
    os.environ["PIGVIZ_PADDED"] = padded
    # As on a GPU without PIGVIZ_DEBUG=1: no finiteness checks (on the CPU they always run).
    magicpig._check_finite = lambda device: False


def attend_counts() -> list[tuple]:
    from pigviz.lsh import magicpig
    from pigviz.lsh.index import build_index

    rows = []
    for heads, kv_heads, n, d in ((9, 3, 8192, 64), (32, 8, 8192, 128)):
        q, k, v = magicpig.synthetic_decode_step(heads=heads, kv_heads=kv_heads, n=n, d=d)
        index = build_index(k, K=10, L=150)
        for padded in ("0", "1"):
            _env(padded)
            magicpig.attend(index, q, k, v)  # warm the log u table and the scratch
            c = count(lambda: magicpig.attend(index, q, k, v))
            rows.append((f"attend H={heads} Hkv={kv_heads} n={n} d={d}", padded, c))
    return rows


def decode_counts(context: int, tokens: int) -> list[tuple]:
    from pigviz.decode.session import forward, new_cache, use_attention
    from pigviz.model import loading, texts

    model, tokenizer = loading.load_model(device="cpu", progress=False)
    ids = texts.first_tokens(tokenizer, context + tokens + 1)
    prompt = ids[:context]
    rows = []
    for method, padded in (("dense", "0"), ("magicpig", "0"), ("magicpig", "1")):
        _env(padded)
        cache = new_cache(model)
        with use_attention(model, method) as session:
            forward(model, prompt, cache, logits_to_keep=1)
            session.prepare(cache)
            session.phase = "decode"
            forward(model, ids[context : context + 1], cache)  # warm-up token
            session.take_budgets()

            def step():
                for t in range(1, tokens + 1):
                    forward(model, ids[context + t : context + t + 1], cache)
                    session.take_budgets()

            c = count(step)
        for key in c.ops:
            c.ops[key] /= tokens
        for counts in (c.waits, c.sites):
            for key in counts:
                counts[key] /= tokens
        rows.append((f"SmolLM2 decode token, context {context}, {method}", padded, c))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attend-only", action="store_true")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=2)
    parser.add_argument("--top", type=int, default=0, help="also list the N most frequent ops per row")
    parser.add_argument("--where", action="store_true", help="also list where in pigviz the waits come from")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = attend_counts()
    if not args.attend_only:
        rows += decode_counts(args.context, args.tokens)
    print(f"{'what':58s} {'path':9s} {'ops':>8s} {'waits':>6s}  waits by kind")
    for what, padded, c in rows:
        path = "padded" if padded == "1" else "reference"
        kinds = ", ".join(f"{k} {v:g}" for k, v in c.waits.most_common())
        print(f"{what:58s} {path:9s} {sum(c.ops.values()):8.0f} {sum(c.waits.values()):6.0f}  {kinds}")
        for name, times in c.ops.most_common(args.top):
            print(f"    {times:8.1f}  {name}")
        for site, times in c.sites.most_common() if args.where else ():
            print(f"    {times:8.1f}  waits at {site}")
    return rows


if __name__ == "__main__":
    main()
