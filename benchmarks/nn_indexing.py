"""Bandwidth of the indexing family of ignis.nn beside PyTorch, in one process: embedding
forward (gather) and backward (scatter-add into the table), dropout forward/backward, and rotary
position embeddings (RoPE).

Cases: a GPT-2-sized table (50304 x 768) looked up by 8 x 1024 token ids; dropout (p = 0.1) of a
16384 x 4096 activation; RoPE of (8, 32, 2048, 128) queries. float32 and bfloat16. PyTorch runs
``F.embedding``, ``aten.embedding_dense_backward``, ``aten.native_dropout`` /
``native_dropout_backward`` and the Llama formulation of RoPE (``x * cos + rotate_half(x) *
sin`` with cos/sin tables computed once, outside the timing). Timing: the median of CUDA-event
rounds after a warm-up (helpers shared with ``benchmarks/reduction.py``). Bandwidth counts the
bytes an op must move once: gather reads and writes the picked rows; scatter-add reads the
gradient and writes the table; dropout reads x and writes y and a one-byte mask; RoPE reads and
writes x; both libraries are credited with the same bytes. ``vs torch`` is ignis's bandwidth
over PyTorch's; the last column compares the results (dropout masks come from different
generators, so they are not compared). The embedding lookup moves about 50 MB (float32), some
10-15 us of device time: its row also shows each library's host time per call, which is of the
same size (back-to-back calls, so a call slower on the host than on the device sets the pace).

Run on a GPU machine: ``python benchmarks/nn_indexing.py``. Prints a Markdown table.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from reduction import time_ignis, time_torch

import ignis

VOCAB, DIM, TOKENS = 50304, 768, 8 * 1024
DROPOUT_SHAPE, P = (16384, 4096), 0.1
ROPE_SHAPE = (8, 32, 2048, 128)


def _rel(ours: Any, theirs: Any) -> str:
    a = np.asarray(ours.to_host(), dtype=np.float64)
    b = theirs.float().cpu().numpy().astype(np.float64)
    scale = np.maximum(np.abs(b), np.max(np.abs(b)) * 1e-3 + 1e-30)
    return f"{float(np.max(np.abs(a - b) / scale)):.1e}"


def _row(
    name: str, dtype: str, shape: str, nbytes: float, f_ignis: Any, f_torch: Any, diff: str
) -> str:
    gbs_i = nbytes / time_ignis(f_ignis) / 1e6
    gbs_t = nbytes / time_torch(f_torch) / 1e6
    ratio = gbs_i / gbs_t
    return f"| {name} | {dtype} | {shape} | {gbs_i:.0f} | {gbs_t:.0f} | {ratio:.2f}x | {diff} |"


def embedding_rows(dtype: str, gen: Any) -> list[str]:
    import torch

    tdt = getattr(torch, dtype)
    w = torch.randn(VOCAB, DIM, device="cuda", dtype=tdt, generator=gen)
    ids = torch.randint(0, VOCAB, (TOKENS,), device="cuda", generator=gen)
    g = torch.randn(TOKENS, DIM, device="cuda", dtype=tdt, generator=gen)
    wi, idsi, gi = ignis.from_dlpack(w), ignis.from_dlpack(ids), ignis.from_dlpack(g)
    size = w.element_size()
    rows = []
    fwd_bytes = 2 * TOKENS * DIM * size + TOKENS * 8
    rows.append(
        _row(
            "embedding fwd",
            dtype,
            f"{VOCAB}x{DIM}, {TOKENS} ids",
            fwd_bytes,
            lambda: ignis.nn.embedding(idsi, wi),
            lambda: torch.nn.functional.embedding(ids, w),
            _rel(ignis.nn.embedding(idsi, wi), torch.nn.functional.embedding(ids, w)),
        )
    )
    bwd_bytes = TOKENS * DIM * size + VOCAB * DIM * size + TOKENS * 8

    def t_bwd() -> Any:
        return torch.ops.aten.embedding_dense_backward(g, ids, VOCAB, -1, False)

    for det in (False, True):
        rows.append(
            _row(
                "embedding bwd" + (" (deterministic)" if det else ""),
                dtype,
                f"{TOKENS}x{DIM} -> {VOCAB}x{DIM}",
                bwd_bytes,
                lambda det=det: ignis.nn.embedding_backward(gi, idsi, VOCAB, deterministic=det),
                t_bwd,
                _rel(ignis.nn.embedding_backward(gi, idsi, VOCAB, deterministic=det), t_bwd()),
            )
        )
    return rows


def dropout_rows(dtype: str, gen: Any) -> list[str]:
    import torch

    x = torch.randn(DROPOUT_SHAPE, device="cuda", dtype=getattr(torch, dtype), generator=gen)
    xi = ignis.from_dlpack(x)
    n, size = x.numel(), x.element_size()
    shape = "x".join(map(str, DROPOUT_SHAPE))
    _, mask_t = torch.native_dropout(x, P, True)
    _, mask_i = ignis.nn.dropout(xi, P, seed=1, offset=0)
    return [
        _row(
            "dropout fwd",
            dtype,
            shape,
            n * (2 * size + 1),
            lambda: ignis.nn.dropout(xi, P, seed=1, offset=0),
            lambda: torch.native_dropout(x, P, True),
            "-",
        ),
        _row(
            "dropout bwd",
            dtype,
            shape,
            n * (2 * size + 1),
            lambda: ignis.nn.dropout_backward(xi, mask_i, P),
            lambda: torch.ops.aten.native_dropout_backward(x, mask_t, 1.0 / (1.0 - P)),
            "-",
        ),
    ]


def rope_rows(dtype: str, gen: Any) -> list[str]:
    import torch

    b, h, s, d = ROPE_SHAPE
    x = torch.randn(ROPE_SHAPE, device="cuda", dtype=getattr(torch, dtype), generator=gen)
    xi = ignis.from_dlpack(x)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(s, device="cuda", dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def t_rope() -> Any:
        rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
        return x * cos + rotated * sin

    nbytes = 2 * x.numel() * x.element_size()
    shape = "x".join(map(str, ROPE_SHAPE))
    return [
        _row(
            "rope",
            dtype,
            shape,
            nbytes,
            lambda: ignis.nn.rope(xi),
            t_rope,
            _rel(ignis.nn.rope(xi), t_rope()),
        ),
        _row(
            "rope backward", dtype, shape, nbytes, lambda: ignis.nn.rope_backward(xi), t_rope, "-"
        ),
    ]


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/nn_indexing.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    print(f"# Embedding, dropout and RoPE on {ignis.Device(0).name}\n")
    print("| op | dtype | shape | ignis GB/s | torch GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for family in (embedding_rows, dropout_rows, rope_rows):
        for dtype in ("float32", "bfloat16"):
            for row in family(dtype, gen):
                print(row, flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
