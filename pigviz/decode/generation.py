"""Greedy generation with a swappable decode attention: ``pigviz.generate``.

The prompt is prefilled with dense sdpa, the LSH indexes (MagicPIG) are built from the cache,
and every new token is decoded with the chosen attention (see :mod:`pigviz.decode.session`). The
result keeps, per token, the wall time and the attention budget actually used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pigviz._util.threads import fitted_threads
from pigviz._util.validate import check_int
from pigviz.decode.cache import storage_bytes
from pigviz.decode.session import _check_seen, check_swappable, forward, use_attention
from pigviz.model.loading import check_context

__all__ = ["GenerationResult", "generate", "prompt_ids"]


def prompt_ids(tokenizer, prompt, *, chat: bool = False):
    """A prompt as a 1-D LongTensor: a str (optionally wrapped in the chat template) or ids.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        Tokenizes a str prompt (and applies its chat template).
    prompt : str or sequence of int
        A str, or token ids: 1-D, or 2-D with one row (batch 1).
    chat : bool
        Wrap a str prompt in the tokenizer's chat template, as one user turn followed by the
        generation prompt.

    Returns
    -------
    torch.Tensor, int64, (n,)
        The token ids.

    Raises
    ------
    ValueError
        A batch of prompts (a list of str, or ids of more than one row), or ids that are empty or
        not 1-D.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    if isinstance(prompt, str):
        if chat:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        return torch.tensor(tokenizer(prompt)["input_ids"], dtype=torch.long)
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, str) for p in prompt):
        raise ValueError(f"batch size must be 1: pass one prompt, got a list of {len(prompt)}")
    ids = torch.as_tensor(prompt, dtype=torch.long)
    if ids.ndim == 2:
        if ids.shape[0] != 1:
            raise ValueError(f"batch size must be 1, got token ids of shape {tuple(ids.shape)}")
        ids = ids[0]
    if ids.ndim != 1 or ids.numel() == 0:
        raise ValueError(f"prompt must be a str or a non-empty 1-D sequence of token ids, got shape {tuple(ids.shape)}")
    return ids


@dataclass
class GenerationResult:
    """One greedy generation. Token 0 comes from the dense prefill: its ``step_seconds`` entry
    is the prefill (plus index build) time and its budget is 1.

    Parameters
    ----------
    attention : str
        The method decoded with.
    options : dict
        Its settings, checked and completed with the defaults.
    prompt_tokens : int
        Tokens of the prompt.
    token_ids : list of int
        The tokens generated, token 0 included.
    text : str
        The tokens decoded together, special tokens skipped.
    token_texts : list of str
        Each token decoded on its own, for side-by-side views.
    step_seconds : list of float
        Wall time of each token: the prefill (plus index build) for token 0, then each decode step.
    budgets : list of float
        Each token's attention budget: keys read / keys visible, mean over sampled layers and
        heads (1 for token 0).
    prefill_seconds : float
        The prefill's time, the index build left out.
    index_seconds : float
        The index build's time (MagicPIG; 0 otherwise).
    attention_seconds : float
        Decode-phase attention time, all layers.
    rebuilds : int
        Whole-index rebuilds (0 in ordinary generation since tokens are inserted).
    upkeeps : int
        The index upkeep: per-layer insertions of the exact buffer into the index.
    upkeep_tokens : int
        The tokens they inserted, over all sampled layers.
    upkeep_seconds : float
        Their time (part of ``attention_seconds``).
    attention_step_seconds : list of float
        Each decode step's attention (all layers), beside ``step_seconds[1:]``: medians leave out
        the first step, which also loads the compiled kernels and fills lookup tables.
    step_cpu_seconds : list of float
        Each decode step in this thread's CPU time (one torch thread): steady on a busy machine.
    attention_cpu_seconds, index_cpu_seconds : float
        ``attention_seconds`` and ``index_seconds`` in this thread's CPU time.
    extra : dict
        What else the run recorded (:func:`generate` says what).
    """

    attention: str
    options: dict
    prompt_tokens: int
    token_ids: list
    text: str
    token_texts: list  # each token decoded on its own, for side-by-side views
    step_seconds: list
    budgets: list
    prefill_seconds: float
    index_seconds: float
    attention_seconds: float = 0.0
    rebuilds: int = 0  # whole-index rebuilds (0 in ordinary generation since tokens are inserted)
    # The index upkeep: per-layer insertions of the exact buffer into the index, the tokens
    # inserted (over all sampled layers) and their time (part of attention_seconds).
    upkeeps: int = 0
    upkeep_tokens: int = 0
    upkeep_seconds: float = 0.0
    # Each decode step's attention (all layers), beside step_seconds[1:]: medians leave out the
    # first step, which also loads the compiled kernels and fills lookup tables.
    attention_step_seconds: list = field(default_factory=list)
    # The same clocks in this thread's CPU time (one torch thread): steady on a busy machine.
    step_cpu_seconds: list = field(default_factory=list)
    attention_cpu_seconds: float = 0.0
    index_cpu_seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def decode_ms_per_token(self) -> float:
        """Mean wall time of a decode step, token 0 (the prefill) left out.

        Returns
        -------
        float
            Milliseconds per token; NaN if only token 0 was made.
        """
        steps = self.step_seconds[1:]
        return 1e3 * sum(steps) / len(steps) if steps else float("nan")

    def mean_budget(self) -> float:
        """Mean attention budget of the decode steps, token 0 (the dense prefill) left out.

        Returns
        -------
        float
            Keys read / keys visible; 1.0 if only token 0 was made.
        """
        steps = self.budgets[1:]
        return sum(steps) / len(steps) if steps else 1.0

    def as_dict(self) -> dict:
        """The result as plain data (for JSON): every field, with the tuples of ``options`` as lists.

        Returns
        -------
        dict
            Field name -> value.
        """
        keys = (
            "attention",
            "options",
            "prompt_tokens",
            "token_ids",
            "text",
            "token_texts",
            "step_seconds",
            "budgets",
            "prefill_seconds",
            "index_seconds",
            "attention_seconds",
            "attention_step_seconds",
            "rebuilds",
            "upkeeps",
            "upkeep_tokens",
            "upkeep_seconds",
            "step_cpu_seconds",
            "attention_cpu_seconds",
            "index_cpu_seconds",
            "extra",
        )
        out = {k: getattr(self, k) for k in keys}
        out["options"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()}
        return out


def generate(
    model,
    tokenizer,
    prompt,
    attention: str = "magicpig",
    max_new_tokens: int = 32,
    *,
    chat: bool = False,
    stop_at_eos: bool = True,
    progress: bool = True,
    allow_long_context: bool = False,
    **options,
) -> GenerationResult:
    """Greedy decoding of ``prompt`` with ``attention``. The prompt is prefilled with dense
    sdpa, then every new token is decoded with the chosen attention. The model's attention
    implementation is restored after.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention can be swapped (:func:`pigviz.decode.session.use_attention`).
    tokenizer : transformers tokenizer
        Its tokenizer.
    prompt : str or sequence of int
        A str or token ids, batch 1 (:func:`prompt_ids`).
    attention : str, one of METHODS
        The decode attention (``pigviz.decode.session.METHODS``).
    max_new_tokens : int >= 1
        Tokens to generate, token 0 (the prefill's) included.
    chat : bool
        Wrap a str prompt in the tokenizer's chat template.
    stop_at_eos : bool
        Stop after the tokenizer's end-of-sequence token.
    progress : bool
        Show a progress bar.
    allow_long_context : bool
        Let the prompt plus ``max_new_tokens`` go past the model's trained context.
    **options
        That method's settings (see ``_OPTIONS``, e.g. K, L, min_hits, sinks, recent, seed,
        buffer, recentre, dense_layers, kv_dtype, placement and threads for "magicpig"; budget
        for the baselines).

    Returns
    -------
    GenerationResult
        ``extra`` holds the cache's bytes (``cache_bytes``), the threads the decode steps ran on
        (``decode_threads``) and, with ``placement="cpu_offload"``, what the offload moved
        (``offload``: the device bytes it freed, the CPU bytes it holds); with ``recentre``, the
        re-centrings (``recentres``), the keys they re-hashed (``recentre_tokens``) and their
        time (``recentre_seconds``).

    Raises
    ------
    TypeError
        ``model`` not a transformers model, an unknown option, or an option of the wrong type.
    ValueError
        A model whose attention cannot be swapped, an unknown ``attention``, an option or
        ``max_new_tokens`` outside its range, a prompt that is not one non-empty prompt, or a
        context past the model's trained length without ``allow_long_context``.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    from tqdm.auto import tqdm  # heavy: progress bars only for long runs

    check_swappable(model)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
    ids = prompt_ids(tokenizer, prompt, chat=chat)
    check_context(model, ids.numel() + max_new_tokens, allow_long_context)
    eos = getattr(tokenizer, "eos_token_id", None)
    with use_attention(model, attention, **options) as session:
        cache = session.new_cache(model)  # MagicPIG: its sampled layers' K/V in kv_dtype from the start
        session.time_attention = True  # on a GPU: synchronise around attention so its clock is real
        t0 = time.perf_counter()
        logits = forward(model, ids, cache, logits_to_keep=1)
        _check_seen(session, model)
        session.prepare(cache)
        session.phase = "decode"
        tokens, times, budgets = [int(logits[-1].argmax())], [time.perf_counter() - t0], [1.0]
        prefill_s = times[0] - session.index_seconds
        bar = tqdm(total=max_new_tokens, desc=f"decode ({attention})", unit="tok", disable=not progress)
        bar.update(1)
        cpu_times, attention_times = [], []
        # A decode step is many small operations: a thread team stalls beside a busy core, so the
        # steps run with the threads that fit the cores free when decoding starts (recorded).
        with fitted_threads() as threads:
            while len(tokens) < max_new_tokens and not (stop_at_eos and tokens[-1] == eos):
                t0, c0, a0 = time.perf_counter(), time.thread_time(), session.attention_seconds
                logits = forward(model, torch.tensor([tokens[-1]]), cache)
                tokens.append(int(logits[-1].argmax()))
                times.append(time.perf_counter() - t0)
                cpu_times.append(time.thread_time() - c0)
                attention_times.append(session.attention_seconds - a0)
                step_budget = session.take_budgets()
                budgets.append(1.0 if step_budget is None else float(step_budget[-1]))
                bar.update(1)
        bar.close()
    extra = {"cache_bytes": storage_bytes(cache), "decode_threads": threads}
    if session.offload_report is not None:
        extra["offload"] = session.offload_report
    if session.options.get("recentre"):  # MagicPIG's re-centrings (part of upkeeps and upkeep_seconds)
        extra["recentres"] = session.recentres
        extra["recentre_tokens"] = session.recentre_tokens
        extra["recentre_seconds"] = session.recentre_seconds
    return GenerationResult(
        attention=attention,
        options=session.options,
        prompt_tokens=int(ids.numel()),
        token_ids=tokens,
        text=tokenizer.decode(tokens, skip_special_tokens=True),
        token_texts=[tokenizer.decode([t]) for t in tokens],
        step_seconds=times,
        budgets=budgets,
        prefill_seconds=prefill_s,
        index_seconds=session.index_seconds,
        attention_seconds=session.attention_seconds,
        attention_step_seconds=attention_times,
        rebuilds=session.rebuilds,
        upkeeps=session.upkeeps,
        upkeep_tokens=session.upkeep_tokens,
        upkeep_seconds=session.upkeep_seconds,
        step_cpu_seconds=cpu_times,
        attention_cpu_seconds=session.attention_cpu_seconds,
        index_cpu_seconds=session.index_cpu_seconds,
        extra=extra,
    )
