"""Run every kernel family of the library once over the shapes that break kernels.

This is the program ``scripts/sanitize`` runs under ``compute-sanitizer`` (one run per tool): it
calls the NvArray ops of each family on odd sizes (0, 1, 31, 33, a size that is no multiple of
any vector width, and 1000003 with ``--size full``), on non-contiguous views (steps, negative
steps, transposes) and on broadcast operands, so that one sanitizer run covers every kernel and
its edge paths. It also runs on ``--device cpu`` (NumPy backend), which is how the CPU test suite
checks that the driver itself works.

Each family synchronizes at its end, so an asynchronous fault is reported next to the family that
caused it. A light check compares a few results with NumPy in float64: the point is coverage,
not accuracy (the unit tests do that), but a driver that silently computed nothing would
sanitize nothing.

Usage::

    python tests/sanitize/exercise_kernels.py --device cuda:0 --size full --report out.json

The JSON report holds, per family, the number of ops run and any failure, and (on a GPU) the
distinct kernel names ignis launched, from its own launch counters. Exit status 1 when a family
failed. The ``nn`` groups (normalization, losses, indexing, dropout/rope, attention, optimizer
steps) run where ``ignis.nn`` has their functions; a CUDA error there fails the run, any other
error is reported as "not exercised" (a front end whose signature changed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
try:  # run from the source tree without an install
    import ignis
except ImportError:  # pragma: no cover - depends on how it is started
    sys.path.insert(0, str(HERE.parents[2] / "ignis" / "src"))
    import ignis
import ignis.nn  # noqa: E402 - after the path fallback above
from ignis._array._cuda_backend import attention as cuda_attention  # noqa: E402

FLOATS = ("float32", "float16", "bfloat16", "float64")
INTS = ("int32", "int64", "int8", "uint8")
ALL_DTYPES = FLOATS + INTS + ("bool",)

# 4099: a prime, no multiple of any vector width (2, 4, 8, 16) or of a block; 1000003 likewise,
# and larger than one block-stride loop pass.
SIZES = {"small": (0, 1, 31, 33, 4099), "full": (0, 1, 31, 33, 4099, 1000003)}


class Driver:
    """Runs families of ops on one device and records what happened."""

    def __init__(self, device: str, size: str, seed: int = 0):
        self.device = device
        self.sizes = SIZES[size]
        self.rng = np.random.default_rng(seed)
        self.ops = 0
        self.results: dict[str, dict[str, Any]] = {}

    # -- helpers ----------------------------------------------------------------------------------
    def host(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """Random host data of ``dtype`` (never all zeros), values safe for log/sqrt/power."""
        if dtype == "bool":
            return self.rng.random(shape) < 0.5
        if dtype in INTS:
            info = np.iinfo(dtype)
            lo, hi = max(info.min, -20), min(info.max, 20)
            return self.rng.integers(lo, hi + 1, size=shape).astype(dtype)
        values = self.rng.uniform(0.25, 2.0, size=shape) * self.rng.choice([-1.0, 1.0], size=shape)
        return values.astype(np.float64)

    def arr(self, shape: tuple[int, ...], dtype: str) -> ignis.NvArray:
        return ignis.from_host(self.host(shape, dtype), dtype=dtype, device=self.device)

    def positive(self, shape: tuple[int, ...], dtype: str) -> ignis.NvArray:
        values = self.rng.uniform(0.25, 2.0, size=shape)
        return ignis.from_host(values, dtype=dtype, device=self.device)

    def views(self, n: int, dtype: str) -> list[ignis.NvArray]:
        """A 1-D operand of ``n`` elements in several layouts: contiguous, contiguous but one
        element past an aligned start (vectorized paths must notice), strided, reversed, and a
        transposed 2-D column read back as 1-D."""
        base = self.arr((2 * n + 1,), dtype)
        out = [self.arr((n,), dtype), base[1 : n + 1], base[1::2]]
        out.append(base[2 * n : 0 : -2] if n else base[:0])
        out.append(self.arr((n, 3), dtype).T[1])  # stride of 3 elements, offset of one
        return out

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.ops += 1
        return fn(*args, **kwargs)

    def sync(self) -> None:
        if self.device != "cpu":
            ignis.synchronize()

    def check(self, got: Any, expected: np.ndarray, rtol: float, what: str) -> None:
        g = np.asarray(got.to_host() if hasattr(got, "to_host") else got, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if g.shape != e.shape or not np.allclose(g, e, rtol=rtol, atol=rtol, equal_nan=True):
            worst = np.max(np.abs(g - e)) if g.shape == e.shape and g.size else "shape"
            raise AssertionError(f"{what}: result differs from NumPy (worst {worst})")

    # -- families ---------------------------------------------------------------------------------
    def elementwise(self) -> None:
        from ignis._array import _semantics as sem

        for n in self.sizes:
            for dtype in FLOATS:
                for x in self.views(n, dtype):
                    for op, rule in sem.UNARY_OPS.items():
                        if rule == "integer":
                            continue  # bitwise: the integer loop below
                        src = ignis.abs(x) + 0.5 if op in ("log", "sqrt", "rsqrt") else x
                        fn = getattr(ignis, "negative" if op == "neg" else op)
                        self.run(fn, src)
                    self.run(ignis.gelu, x, approximate="tanh")
            for dtype in INTS + ("bool",):
                x = self.arr((n,), dtype)
                self.run(ignis.abs, x)
                self.run(ignis.bitwise_invert, x)
                if dtype != "bool":
                    self.run(ignis.negative, x)
                    self.run(ignis.relu, x[::-1])
                    self.run(ignis.floor_divide, x, x[::-1])
                    self.run(ignis.remainder, x, 3)
                    self.run(ignis.bitwise_left_shift, x, 2)
                self.run(ignis.exp, x)  # int -> float conversion path
        # binary ops: contiguous, broadcast (row x column), strided, scalar operands
        binaries = (
            "add",
            "subtract",
            "multiply",
            "divide",
            "maximum",
            "minimum",
            "power",
            "equal",
            "not_equal",
            "less",
            "less_equal",
            "greater",
            "greater_equal",
        )
        for n in self.sizes:
            for dtype in ("float32", "bfloat16", "float16", "int32", "int64", "uint8"):
                a = self.arr((n,), dtype)
                b = self.positive((n,), dtype) if dtype in FLOATS else self.arr((n,), dtype)
                a2, b2 = self.arr((n + 1,), dtype), self.arr((n + 1,), dtype)
                col = self.arr((min(n, 33), 1), dtype)
                row = self.arr((1, min(n, 33)), dtype)
                for op in binaries:
                    fn = getattr(ignis, op)
                    self.run(fn, a, b)
                    self.run(fn, a[::-1], b)
                    self.run(fn, a2[1:], b2[:-1])  # contiguous, misaligned by one element
                    self.run(fn, col, row)
                    self.run(fn, a, 3)
                    self.run(fn, 2, a[::2])
                # the row- and column-broadcast kernels: a dense matrix against a row or a
                # column on either side, vector and scalar widths (n odd or not)
                mat = self.arr((3, n), dtype)
                rowv, colv = self.arr((n,), dtype), self.arr((3, 1), dtype)
                for op in ("add", "multiply", "greater"):
                    fn = getattr(ignis, op)
                    for pair in ((mat, rowv), (rowv, mat), (mat, colv), (colv, mat)):
                        self.run(fn, *pair)
            x = self.arr((n,), "float32")
            self.run(ignis.add, x, self.arr((n,), "float16"))  # mixed dtypes
            self.run(ignis.where, x > 0, x, self.arr((1,), "float32"))
            self.run(ignis.where, self.arr((n,), "int8"), 1.5, x[::-1])
            self.run(ignis.clip, x, -0.5, 0.5)
            y = ignis.zeros((n,), "float32", device=self.device)
            y += x
            self.run(ignis.accumulate, y, x[::-1])
        a = self.arr((4099,), "float32")
        self.check(ignis.add(a, a[::-1]), a.to_host() + a.to_host()[::-1], 1e-6, "add")

    def copy_cast_fill(self) -> None:
        for n in self.sizes:
            for src_dtype in ALL_DTYPES:
                x = self.arr((n,), src_dtype)
                for dst_dtype in ALL_DTYPES:
                    self.run(x.astype, dst_dtype)
                    self.run(x[::-2].astype, dst_dtype)
                    self.run(x[1:].astype, dst_dtype)  # misaligned start
                self.run(x.contiguous)
                self.run(x[::-1].contiguous)
            m = self.arr((n, 3), "float32")
            self.run(m.T.contiguous)  # transposed copy
            self.run(m[:, None, :].broadcast_to, (n, 5, 3))
            self.run(m[:, None, :].broadcast_to((n, 5, 3)).contiguous)
            for dtype in ALL_DTYPES:
                self.run(ignis.zeros, (n,), dtype, device=self.device)
                self.run(ignis.ones, (n, 3), dtype, device=self.device)
                self.run(ignis.full, (n,), 1, dtype, device=self.device)
                z = ignis.empty((n, 3), dtype, device=self.device)
                self.run(z.T.fill_, 1)  # strided fill
                z[::2] = self.arr((len(range(0, n, 2)), 3), dtype)  # strided copy into a view
            self.run(ignis.arange, n, device=self.device)
            self.run(ignis.arange, 0.5, n, 0.75, dtype="float32", device=self.device)
            self.run(ignis.arange, n, 0, -3, dtype="int32", device=self.device)
        parts = [self.arr((k, 3), "float32") for k in (0, 1, 31)]
        self.run(ignis.concatenate, parts)
        self.run(ignis.concatenate, [p.T for p in parts], axis=1)
        self.run(ignis.stack, [self.arr((33,), "float16")[::-1], self.arr((33,), "float16")])
        x = self.arr((33,), "float64")
        self.check(x.astype("float32")[::-1].contiguous(), x.to_host()[::-1], 1e-6, "cast")

    def random(self) -> None:
        for n in self.sizes:
            for dtype in FLOATS:
                self.run(ignis.random.rand, n, dtype=dtype, device=self.device)
                self.run(ignis.random.randn, (n, 3), dtype=dtype, device=self.device)
            for dtype in INTS:
                self.run(ignis.random.randint, 0, 7, (n,), dtype=dtype, device=self.device)
            self.run(ignis.random.randint, -(2**40), 2**40, (n,), dtype="int64", device=self.device)
        u = ignis.random.rand(4099, device=self.device).to_host()
        if not (u.min() >= 0 and u.max() < 1 and 0.4 < u.mean() < 0.6):
            raise AssertionError("rand: values are not uniform on [0, 1)")

    def reductions(self) -> None:
        shapes = [(n,) for n in self.sizes] + [(1, 1), (31, 33), (33, 0, 5), (7, 33, 31), (3, 4099)]
        axes_list: list[Any] = [None, 0, -1, (0, -1)]
        for shape in shapes:
            for dtype in ("float32", "float16", "bfloat16", "float64", "int32", "int64", "bool"):
                x = self.arr(shape, dtype)
                views = [x]
                if len(shape) >= 2:
                    views.append(x.swapaxes(0, -1))  # transposed
                if shape[0] > 1:
                    views.append(x[::-2])  # reversed and strided
                # contiguous, starting one row past an aligned address
                views.append(self.arr((shape[0] + 1,) + shape[1:], dtype)[1:])
                for v in views:
                    for axis in axes_list:
                        if axis is not None and len(shape) == 1 and axis == (0, -1):
                            continue
                        for op in (ignis.sum, ignis.mean, ignis.var):
                            self.run(op, v, axis=axis)
                        self.run(ignis.sum, v, axis=axis, keepdims=True)
                        if v.numel:
                            self.run(ignis.max, v, axis=axis)
                            self.run(ignis.min, v, axis=axis, keepdims=True)
                    if v.numel:
                        self.run(ignis.argmax, v)
                        self.run(ignis.argmin, v, axis=-1)
                        self.run(ignis.argmax, v, axis=0, keepdims=True)
        x = self.arr((7, 33, 31), "float32")
        self.check(ignis.sum(x, axis=(0, 2)), x.to_host().sum(axis=(0, 2)), 1e-4, "sum")

    def softmax(self) -> None:
        for shape in [(1,), (31,), (33, 1), (2, 4099), (4099, 3), (5, 33, 31)]:
            for dtype in FLOATS:
                x = self.arr(shape, dtype)
                for axis in (-1, 0):
                    self.run(ignis.softmax, x, axis=axis)
                    self.run(ignis.log_softmax, x, axis=axis)
                if len(shape) > 1:
                    self.run(ignis.softmax, x.swapaxes(0, -1), axis=-1)
        if 1000003 in self.sizes:
            self.run(ignis.softmax, self.arr((1000003,), "float32"))
        x = self.arr((5, 33), "float64")
        h = x.to_host()
        e = np.exp(h - h.max(axis=-1, keepdims=True))
        self.check(ignis.softmax(x), e / e.sum(axis=-1, keepdims=True), 1e-12, "softmax")

    def _matmuls(self) -> None:
        cases = [
            ((1, 1), (1, 1)),
            ((31, 33), (33, 17)),
            ((33, 65), (65, 129)),
            ((3, 31, 33), (33, 17)),  # batch broadcast
            ((2, 1, 5, 7), (3, 7, 9)),  # batch broadcast both ways
            ((0, 5), (5, 3)),  # empty m
            ((4, 0), (0, 3)),  # k == 0: a zero result
            ((33,), (33, 5)),  # vector operands
            ((5, 33), (33,)),
            ((130, 257), (257, 66)),  # several tiles with ragged edges
        ]
        for dtype in FLOATS:
            for sa, sb in cases:
                a, b = self.arr(sa, dtype), self.arr(sb, dtype)
                self.run(ignis.matmul, a, b)
                if len(sa) >= 2 and len(sb) >= 2:
                    self.run(ignis.matmul, a.mT.contiguous().mT, b)  # column-major operand
                    self.run(ignis.matmul, a, b.mT.contiguous(), transpose_b=True)
                    self.run(ignis.matmul, a.mT.contiguous(), b, transpose_a=True)
            a, b = self.arr((31, 33), dtype), self.arr((33, 17), dtype)
            out = self.arr((31, 17), dtype)
            self.run(ignis.matmul, a, b, alpha=0.5, beta=2.0, out=out)
            self.run(ignis.matmul, a[::2], b[:, ::-1])  # strided views are copied first
        a, b = self.arr((31, 33), "float64"), self.arr((33, 17), "float64")
        self.check(ignis.matmul(a, b), a.to_host() @ b.to_host(), 1e-10, "matmul")

    def _wgmma_matmuls(self) -> None:
        """16-bit products whose operands TMA can read (rows of a multiple of 8 elements), so
        that gemm_wgmma takes them on compute capability 9.0: ragged tiles, K below one step,
        a batch with a broadcast dim, transposed views, alpha/beta into a given output."""
        cases = [
            ((1, 8), (8, 8)),
            ((130, 72), (72, 264)),
            ((200, 16), (16, 136)),
            ((3, 64, 136), (136, 72)),
            ((2, 1, 40, 64), (3, 64, 48)),
        ]
        for dtype in ("float16", "bfloat16"):
            for sa, sb in cases:
                a, b = self.arr(sa, dtype), self.arr(sb, dtype)
                self.run(ignis.matmul, a, b)
            a, b = self.arr((96, 136), dtype), self.arr((72, 96), dtype)
            self.run(ignis.matmul, a.mT, b.mT)  # both operands MN-major / K-major views
            a, b = self.arr((64, 136), dtype), self.arr((136, 200), dtype)
            out = self.arr((64, 200), dtype)
            self.run(ignis.matmul, a, b, alpha=0.5, beta=2.0, out=out)
        a, b = self.arr((130, 72), "float16"), self.arr((72, 264), "float16")
        expected = a.to_host().astype(np.float64) @ b.to_host().astype(np.float64)
        self.check(ignis.matmul(a, b), expected, 1e-2, "matmul (16-bit, TMA-readable)")

    def matmul(self) -> None:
        """Own GEMM kernels (cuBLAS off, each kernel family, TF32 on), then cuBLAS."""
        from ignis._array._cuda_backend import matmul as mm

        was_enabled, was_tf32 = ignis.get_cublas_enabled(), ignis.get_allow_tf32()
        try:
            ignis.set_cublas_enabled(False)
            for family in (None, "simt", "tc"):
                mm._force_family = family
                self._matmuls()
            mm._force_family = None
            for tile_n in (128, 256):  # the Hopper kernel, where it runs, with both tiles
                with ignis.tuning(matmul=dict(wgmma=True, wgmma_tile_n=tile_n)):
                    self._wgmma_matmuls()
            ignis.set_allow_tf32(True)
            self._matmuls()
            ignis.set_allow_tf32(False)
            ignis.set_cublas_enabled(True)
            if self.device == "cpu" or ignis.cublas_available():
                self._matmuls()
        finally:
            mm._force_family = None
            ignis.set_cublas_enabled(was_enabled)
            ignis.set_allow_tf32(was_tf32)

    # -- nn families (exercised where ignis.nn has them) ---------------------------------------
    def nn(self) -> dict[str, str]:
        """Each nn group whose functions exist in ``ignis.nn``: 'ran', or why it did not.

        A CUDA error fails the family (that is what the sanitizer run is for); any other error
        is reported per group without failing the run, since these front ends are younger than
        this driver and may have changed their signatures.
        """
        status: dict[str, str] = {}
        for name, (needs, call) in self._nn_calls().items():
            if not all(hasattr(ignis.nn, fn) for fn in needs):
                continue
            try:
                for n in (1, 31, 33, 4099):
                    call(n)
                self.sync()
                status[name] = "ran"
            except ignis.CudaError:
                raise
            except Exception as exc:
                status[name] = f"not exercised ({type(exc).__name__}: {exc})"
        return status

    def _nn_calls(self) -> dict[str, tuple[tuple[str, ...], Callable[[int], None]]]:
        d, nn = self.device, ignis.nn

        def ints(high: int, shape: tuple[int, ...]) -> ignis.NvArray:
            return ignis.random.randint(0, high, shape, device=d)

        def norms(n: int) -> None:
            for dtype in ("float32", "bfloat16", "float16"):
                x = self.arr((5, n), dtype)
                w, b = self.arr((n,), dtype), self.arr((n,), dtype)
                y, mean, rstd = self.run(nn.layer_norm, x, w, b, 1e-5)
                self.run(nn.layer_norm_backward, self.arr((5, n), dtype), x, mean, rstd, w)
                self.run(nn.layer_norm, x[::-1], None, None, 1e-5)
                y, rstd = self.run(nn.rms_norm, x, w, 1e-6)
                self.run(nn.rms_norm_backward, self.arr((5, n), dtype), x, rstd, w)

        def losses(n: int) -> None:
            for dtype in ("float32", "bfloat16"):
                logits = self.arr((7, n), dtype)
                targets = ints(n, (7,))
                for smoothing, reduction in ((0.0, "mean"), (0.1, "sum"), (0.0, "none")):
                    loss, lse = self.run(
                        nn.cross_entropy,
                        logits,
                        targets,
                        label_smoothing=smoothing,
                        reduction=reduction,
                    )
                    grad = self.arr(loss.shape, "float32")
                    self.run(
                        nn.cross_entropy_backward,
                        grad,
                        logits,
                        targets,
                        lse,
                        label_smoothing=smoothing,
                        reduction=reduction,
                    )
                y = ignis.softmax(logits)
                self.run(nn.softmax_backward, self.arr((7, n), dtype), y)

        def indexing(n: int) -> None:
            table = self.arr((n, 33), "float32")
            ids = ints(n, (2, 9))
            self.run(nn.embedding, ids, table)
            self.run(nn.embedding_backward, self.arr((2, 9, 33), "float32"), ids, n)
            self.run(
                nn.embedding_backward, self.arr((2, 9, 33), "float32"), ids, n, deterministic=True
            )
            if hasattr(ignis, "take"):
                self.run(ignis.take, table, ints(n, (17,)), axis=0)
            if hasattr(ignis, "index_add"):
                dst = ignis.zeros((n, 33), "float32", device=d)
                self.run(ignis.index_add, dst, 0, ints(n, (17,)), self.arr((17, 33), "float32"))

        def dropout_rope(n: int) -> None:
            for dtype in ("float32", "bfloat16"):
                x = self.arr((3, n), dtype)
                y, mask = self.run(nn.dropout, x, 0.25, seed=1, offset=0)
                self.run(nn.dropout_backward, self.arr((3, n), dtype), mask, 0.25)
                seq = max(n // 8, 1)
                q = self.arr((2, 3, seq, 64), dtype)
                self.run(nn.rope, q)
                self.run(
                    nn.rope,
                    q,
                    ignis.arange(seq, dtype="int64", device=d),
                    offset=3,
                    interleaved=True,
                )
                self.run(nn.rope_backward, q, None, 5)

        def attention(n: int) -> None:
            seq = min(n, 257)
            for dtype in ("bfloat16", "float16", "float32"):
                q, k, v = (self.arr((1, 2, seq, 64), dtype) for _ in range(3))
                for causal in (False, True):
                    out, lse = self.run(nn.attention, q, k, v, causal=causal)
                    self.run(
                        nn.attention_backward,
                        self.arr(out.shape, dtype),
                        q,
                        k,
                        v,
                        out,
                        lse,
                        causal=causal,
                    )
                kc, vc = self.arr((1, 2, seq + 5, 64), dtype), self.arr((1, 2, seq + 5, 64), dtype)
                self.run(nn.decode_attention, self.arr((1, 2, 1, 64), dtype), kc, vc, seq)
                if dtype != "float32":  # head dim 128 (the Hopper kernels' other tiles there)
                    q, k, v = (self.arr((1, 2, seq, 128), dtype) for _ in range(3))
                    out, lse = self.run(nn.attention, q, k, v, causal=True)
                    self.run(nn.attention_backward, self.arr(out.shape, dtype), q, k, v, out, lse,
                             causal=True)
                # packed (B, T, 3, H, E) views read and written in place, as packed_attention
                # does; float32 also through the fused one-pass backward, the 16-bit types
                # through the Hopper backward (on compute capability 9.0) and every mma.sync
                # backward tile variant
                heads = self.arr((2, seq, 3, 2, 64), dtype).permute(2, 0, 3, 1, 4)
                merged = ignis.empty((2, seq, 2, 64), dtype=dtype, device=d)
                out, lse = self.run(nn.attention, heads[0], heads[1], heads[2], causal=True,
                                    out=merged.permute(0, 2, 1, 3))
                slots = ignis.empty((2, seq, 3, 2, 64), dtype=dtype, device=d)
                slots = slots.permute(2, 0, 3, 1, 4)
                grad = self.arr((2, seq, 2, 64), dtype).permute(0, 2, 1, 3)
                if dtype == "float32":
                    settings = [dict(simt_fused_dq=fused) for fused in (False, True)]
                else:
                    settings = [dict(bwd_wgmma=True)]
                    # (the mma.sync kernels, also on a Hopper GPU)
                    settings += [dict(bwd_tiles=name, bwd_wgmma=False)
                                 for name in cuda_attention.BWD_TILE_VARIANTS]
                for setting in settings:
                    with ignis.tuning(attention=setting):
                        self.run(nn.attention_backward, grad, heads[0], heads[1], heads[2], out,
                                 lse, causal=True, dq=slots[0], dk=slots[1], dv=slots[2])

        def linear(n: int) -> None:
            rows = min(n, 257)
            for dtype in ("float32", "bfloat16"):
                x, w = self.arr((rows, 64), dtype), self.arr((96, 64), dtype)
                b = self.arr((96,), dtype)
                self.run(nn.linear, x, w, b)
                self.run(nn.linear_backward, self.arr((rows, 96), dtype), x, w)

        def optim(n: int) -> None:
            for dtype in ("float32", "bfloat16", "float64"):
                shapes = [(n,), (31, 7), (1,)]
                ps = [self.arr(s, dtype) for s in shapes]
                gs = [self.arr(s, dtype) for s in shapes]
                state = "float64" if dtype == "float64" else "float32"
                ms = [ignis.zeros(s, state, device=d) for s in shapes]
                vs = [ignis.zeros(s, state, device=d) for s in shapes]
                steps = [ignis.zeros((), "float32", device=d) for _ in shapes]
                lr = ignis.full((), 1e-3, "float32", device=d)
                self.run(
                    nn.multi_tensor_adam_,
                    ps,
                    gs,
                    ms,
                    vs,
                    steps,
                    lr,
                    weight_decay=0.01,
                    decoupled_weight_decay=True,
                )
                self.run(nn.multi_tensor_sgd_, ps, gs, ms, steps, lr, momentum=0.9, nesterov=True)
                norm = self.run(nn.multi_tensor_l2_norm, gs)
                self.run(nn.multi_tensor_clip_, gs, norm.astype("float32"), 1.0)
                found = ignis.zeros((), "float32", device=d)
                scale = ignis.full((), 2.0**16, "float32", device=d)
                self.run(nn.multi_tensor_scale_, gs, scale, inverse=True, found_inf=found)
                tracker = ignis.zeros((), "int32", device=d)
                self.run(nn.amp_update_scale_, scale, tracker, found)
                self.run(nn.multi_tensor_zero_, gs)

        return {
            "norm": (("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"), norms),
            "loss": (("cross_entropy", "cross_entropy_backward", "softmax_backward"), losses),
            "indexing": (("embedding", "embedding_backward"), indexing),
            "dropout/rope": (
                ("dropout", "dropout_backward", "rope", "rope_backward"),
                dropout_rope,
            ),
            "attention": (("attention", "attention_backward", "decode_attention"), attention),
            "linear": (("linear", "linear_backward"), linear),
            "optim": (
                (
                    "multi_tensor_adam_",
                    "multi_tensor_sgd_",
                    "multi_tensor_l2_norm",
                    "multi_tensor_clip_",
                    "multi_tensor_scale_",
                    "amp_update_scale_",
                    "multi_tensor_zero_",
                ),
                optim,
            ),
        }

    # -- driver -----------------------------------------------------------------------------------
    CORE = ("elementwise", "copy_cast_fill", "random", "reductions", "softmax", "matmul")

    def exercise(self, families: tuple[str, ...] | None = None) -> bool:
        """Run the families (default: all); True when every core family passed."""
        ok = True
        for name in families or (*self.CORE, "nn"):
            start, before = time.perf_counter(), self.ops
            entry: dict[str, Any] = {}
            try:
                outcome = getattr(self, name)()
                self.sync()
                entry["status"] = "ok"
                if isinstance(outcome, dict):
                    entry["functions"] = outcome
            except Exception as exc:  # recorded, and the run goes on to the next family
                entry["status"] = f"FAILED: {type(exc).__name__}: {exc}"
                entry["traceback"] = traceback.format_exc()
                ok = False
            entry["ops"] = self.ops - before
            entry["seconds"] = round(time.perf_counter() - start, 3)
            self.results[name] = entry
        return ok


def launched_kernels() -> dict[str, int]:
    """Launch counts of the library kernels this process launched, by name expression."""
    from ignis._array._cuda_backend import _kernels

    counts: dict[str, int] = {}
    for kernel in list(_kernels._kernels.values()):  # keyed by source, name, device and arch
        if kernel.launch_count:
            counts[kernel.name] = counts.get(kernel.name, 0) + kernel.launch_count
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0", help="cuda:N or cpu (default cuda:0)")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--families", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--report", default="", help="write the JSON report here")
    args = parser.parse_args(argv)

    driver = Driver(args.device, args.size)
    families = tuple(f for f in args.families.split(",") if f) or None
    ok = driver.exercise(families)
    kernels = launched_kernels() if args.device != "cpu" else {}
    report = {
        "device": args.device,
        "size": args.size,
        "ok": ok,
        "ops": driver.ops,
        "families": driver.results,
        "kernels": kernels,
        "pid": os.getpid(),
    }
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1, sort_keys=True))
    for name, entry in driver.results.items():
        print(f"{name:16s} {entry['status'][:100]:40s} ops={entry['ops']} {entry['seconds']}s")
        if "functions" in entry:
            for fn, status in entry["functions"].items():
                print(f"    nn.{fn}: {status[:100]}")
    print(f"ops={driver.ops} distinct_kernels={len(kernels)} ok={ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
