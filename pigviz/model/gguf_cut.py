"""A GGUF model cut to its first N transformer blocks, with their real (still quantised) weights.

Why: a device machine that takes at most 64 MiB of files per call cannot receive the bundled
94 MB SmolLM2 GGUF, but a cut of its first layers fits. Block ``i`` of a causal decoder reads
only the outputs of blocks ``0 .. i-1``, so every kept layer computes exactly what it computes
in the full model (same keys, same queries, same per-layer attention budgets); only the logits
differ, as the final norm and the output head now read layer N-1's output.

The cut copies every metadata field (``<arch>.block_count`` set to N), the tensors outside the
blocks (``token_embd``, ``output_norm``, ``output`` where present) and ``blk.0 .. blk.N-1``,
byte for byte: nothing is de-quantised or re-quantised.
"""

from __future__ import annotations

import re
from pathlib import Path

from pigviz._util.io import atomic_path
from pigviz._util.validate import check_int

__all__ = ["gguf_block_count", "cut_gguf", "cut_gguf_size", "layers_that_fit"]

_BLOCK = re.compile(r"^blk\.(\d+)\.")


def _reader(path):
    try:
        import gguf  # heavy: loads only when cutting, so importing pigviz.model stays light
    except ImportError as exc:
        raise ModuleNotFoundError("cutting a GGUF needs the gguf package: pip install gguf") from exc

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"src must be an existing GGUF file, got {str(path)!r}")
    return gguf, gguf.GGUFReader(path)


def _arch_and_blocks(gguf, reader) -> tuple[str, int]:
    arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise ValueError("src has no general.architecture field; it is not a model GGUF")
    arch = arch_field.contents()
    blocks = reader.get_field(f"{arch}.block_count")
    if blocks is None:
        raise ValueError(f"src has no {arch}.block_count field; cannot tell how many layers it holds")
    return arch, int(blocks.contents())


def _check_layers(n_layers, block_count: int) -> int:
    return check_int("n_layers", n_layers, 1, block_count)


def _kept(tensors, n_layers: int) -> list:
    out = []
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m is None or int(m.group(1)) < n_layers:
            out.append(t)
    return out


def gguf_block_count(src) -> int:
    """How many transformer blocks (``<arch>.block_count``) the GGUF file ``src`` holds."""
    gguf, reader = _reader(src)
    return _arch_and_blocks(gguf, reader)[1]


def _size_bound(reader, n_layers: int) -> int:
    align = reader.alignment
    return reader.data_offset + sum(-(-t.n_bytes // align) * align for t in _kept(reader.tensors, n_layers))


def cut_gguf_size(src, n_layers: int) -> int:
    """An upper bound on the bytes :func:`cut_gguf` writes for ``n_layers`` (no file written):
    the source's header (the cut's is smaller: fewer tensor entries) plus the kept tensors,
    each padded to the file's alignment."""
    check_int("n_layers", n_layers)  # a wrong type fails before the seconds it takes to read src
    gguf, reader = _reader(src)
    _, block_count = _arch_and_blocks(gguf, reader)
    return _size_bound(reader, _check_layers(n_layers, block_count))


def layers_that_fit(src, max_bytes: int) -> int:
    """The most layers a cut of ``src`` can keep in at most ``max_bytes`` (by
    :func:`cut_gguf_size`'s bound); 0 when not even one layer fits."""
    max_bytes = check_int("max_bytes", max_bytes)
    gguf, reader = _reader(src)
    _, block_count = _arch_and_blocks(gguf, reader)
    fits = [n for n in range(1, block_count + 1) if _size_bound(reader, n) <= max_bytes]
    return max(fits, default=0)


def cut_gguf(src, dst, n_layers: int) -> Path:
    """Write ``dst``: the GGUF ``src`` cut to its first ``n_layers`` blocks (1 .. block_count),
    metadata and kept tensors copied unchanged except ``<arch>.block_count``. Atomic: ``dst``
    appears only once complete. Returns ``dst``."""
    check_int("n_layers", n_layers)  # a wrong type fails before the seconds it takes to read src
    gguf, reader = _reader(src)
    arch, block_count = _arch_and_blocks(gguf, reader)
    n_layers = _check_layers(n_layers, block_count)
    dst = Path(dst)
    if dst.exists() and dst.resolve() == Path(src).resolve():
        raise ValueError("dst must differ from src: the cut is read from src while it is written")

    with atomic_path(dst) as tmp:
        writer = gguf.GGUFWriter(tmp, arch, endianess=reader.endianess)
        writer.data_alignment = reader.alignment
        for field in reader.fields.values():
            # GGUF.* are the reader's view of the header, and the writer adds the architecture itself.
            if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
                continue
            vtype = field.types[0]
            sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            value = n_layers if field.name == f"{arch}.block_count" else field.contents()
            writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
        kept = _kept(reader.tensors, n_layers)
        for t in kept:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for t in kept:
                writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        finally:
            writer.close()
    return dst
