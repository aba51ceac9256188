"""Small synthetic objects that several test folders build."""

import torch

import pigviz
from pigviz.model import capture as capmod
from pigviz.model.capture import Capture


def synthetic_metadata(n, t, d, layers, n_heads, n_kv, *, n_model_layers, kv_heads=None) -> dict:
    """Capture metadata for synthetic tensors: every field a real capture records."""
    return {
        "format": capmod.FORMAT,
        "model_name": "synthetic",
        "model_kind": "test",
        "model_revision": "r0",
        "text_source": "none",
        "text_sha256": "0" * 64,
        "token_ids_sha256": "1" * 64,
        "n_tokens": n,
        "last": t,
        "layers": list(layers),
        "kv_heads": kv_heads or [list(range(n_kv))] * len(layers),
        "n_model_layers": n_model_layers,
        "n_model_heads": n_heads,
        "n_model_kv_heads": n_kv,
        "head_dim": d,
        "scaling": d**-0.5,
        "dtype": "float32",
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": "x",
        "python_version": "x",
    }


def make_capture(n_layers=3, n_heads=6, n_kv=2, n=40, t=8, d=4, seed=0, outputs=True) -> Capture:
    """A random capture with consistent metadata, for storage and bookkeeping tests."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_layers, n_heads, t, d, generator=gen)
    k = torch.randn(n_layers, n_kv, n, d, generator=gen)
    v = torch.randn(n_layers, n_kv, n, d, generator=gen)
    meta = synthetic_metadata(n, t, d, list(range(n_layers)), n_heads, n_kv, n_model_layers=n_layers)
    cap = Capture(queries=q, keys=k, values=v, query_positions=torch.arange(n - t, n), metadata=meta)
    if outputs:
        cap.outputs = torch.stack([cap.reference_outputs(r) for r in range(n_layers)])
    return cap


def tiny_llama(num_hidden_layers: int = 2, seed: int = 0):
    """A random-weight Llama of a few thousand parameters (transformers' sdpa attention), for decode tests
    that need a real model's cache and attention calls but none of its knowledge."""
    import transformers  # only the decode tests need it

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
