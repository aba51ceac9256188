"""One sampled layer's decode step in MagicPIG's own placement (``placement="cpu_offload"``).

The model runs on its device (a GPU, or the CPU); the layer's cache is split by
:class:`pigviz.decode.cache.OffloadLayer`. Per decode step:

1. **device**: the query rows are hashed against the index's hyperplanes (a copy of them on
   the device), giving each row's bucket in every table;
2. the rows and their buckets go to pinned host memory, asynchronously; an event marks them;
3. **device**, queued behind that copy: exact attention over [sinks | recent | buffer], each
   row seeing the buffer up to its own position, with its log-normaliser;
4. **CPU**, as soon as the event has fired (while the device still works on 3): the compiled
   sampled attention (:func:`pigviz.lsh.fused.attend_sampled`, threaded) over the tokens the
   tables sample, with its log-normaliser, written into pinned memory;
5. **device**: the CPU's part arrives asynchronously and the two are merged by log-sum-exp,
   out = (e^{lse_e} out_e + e^{lse_c} out_c) / (e^{lse_e} + e^{lse_c}).

The CPU waits for the device once per layer (step 4 needs the query), as in the authors'
system. With the model on the CPU, both sides run there: the same steps with no copies, which
a test pins to the single-device path (the same keys read, outputs within 1e-5).
"""

from __future__ import annotations

import math

__all__ = ["OffloadStep"]


class OffloadStep:
    """The per-layer state of the offloaded step: the hyperplanes on the device and reused
    host buffers."""

    def __init__(self, index, device):
        self.device = device
        self.planes = index.planes.to(device)
        self.K, self.L = index.K, index.L
        self.pinned = device.type == "cuda"
        self._host: dict = {}

    def _buffers(self, rows: int, d: int, dv: int):
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        key = (rows, d, dv)
        if key not in self._host:
            pin = self.pinned
            self._host = {
                key: (
                    torch.empty((rows, d), dtype=torch.float32, pin_memory=pin),
                    torch.empty((rows, self.L), dtype=torch.int64, pin_memory=pin),
                    torch.empty((rows, dv), dtype=torch.float32, pin_memory=pin),
                    torch.empty(rows, dtype=torch.float32, pin_memory=pin),
                )
            }
        return self._host[key]

    def buckets(self, rows):
        """Each row's bucket in every table, (R, L) int64 on the device: the signs of
        ``rows @ planes`` packed by :func:`pigviz.lsh.index.bucket_ids`, the index's own coder."""
        from pigviz.lsh.index import bucket_ids  # heavy: imports torch

        return bucket_ids(rows, self.planes, self.K, self.L)

    def __call__(self, index, layer, query, *, scale: float, min_hits: int, threads):
        """``query`` (1, H, T, d) on the device; ``layer`` the OffloadLayer, already holding
        this step's T tokens at the end of its buffer. Returns ``(output (1, T, H, dv) float32
        on the device, sampled (R,) int64 numpy, rows in KV-major order)``: row ``g * G * T +
        j * T + t`` is query head ``g * G + j`` at chunk position t."""
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

        from pigviz.lsh.fused import attend_sampled  # heavy: imports torch and numba

        _, H, T, d = query.shape
        keys, values = layer.keys[0], layer.values[0]  # (Hkv, m, d) on the device
        Hkv, m, dv = values.shape
        G = H // Hkv
        rows = query[0].to(torch.float32).reshape(Hkv, G * T, d)  # head-major within each KV group
        flat = rows.reshape(-1, d)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        buckets = self.buckets(flat)
        q_host, b_host, out_host, lse_host = self._buffers(flat.shape[0], d, dv)
        if self.pinned:
            q_host.copy_(flat, non_blocking=True)
            b_host.copy_(buckets, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        else:
            q_host, b_host = flat, buckets
        # The exact part, queued on the device behind the copies: row t of the chunk sees the
        # buffer up to its own token, the last T columns being this chunk's tokens.
        scores = torch.bmm(rows, keys.to(torch.float32).transpose(1, 2)) * scale  # (Hkv, G*T, m)
        if T > 1:
            own = torch.arange(T, device=keys.device).repeat(G)  # (G*T,) chunk position of each row
            hidden = torch.arange(m, device=keys.device)[None, :] > (m - T + own)[:, None]
            scores = scores.masked_fill(hidden[None], -math.inf)
        lse_exact = torch.logsumexp(scores, -1)
        out_exact = torch.bmm(torch.softmax(scores, -1), values.to(torch.float32))
        if self.pinned:
            ready.synchronize()  # the rows are on the host; the device goes on with the exact part
        out_c, lse_c, sampled = attend_sampled(
            index,
            q_host,
            b_host,
            layer.cpu_keys,
            layer.cpu_values,
            min_hits=min_hits,
            scale=scale,
            threads=threads,
            out=out_host,
        )
        lse_host.copy_(torch.from_numpy(lse_c))
        if self.pinned:
            out_c = out_c.to(self.device, non_blocking=True)
            lse_s = lse_host.to(self.device, non_blocking=True)
        else:
            lse_s = lse_host
        out_c = out_c.view(Hkv, G * T, dv)
        lse_s = lse_s.view(Hkv, G * T)
        top = torch.maximum(lse_exact, lse_s)  # finite: every row reads its exact tokens
        w_exact = torch.exp(lse_exact - top)
        w_sampled = torch.exp(lse_s - top)  # 0 for a row that sampled nothing (lse -inf)
        merged = (w_exact[..., None] * out_exact + w_sampled[..., None] * out_c) / (w_exact + w_sampled)[..., None]
        out = merged.view(Hkv, G, T, dv).reshape(H, T, dv).transpose(0, 1)[None]
        return out, sampled
