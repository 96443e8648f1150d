"""Bandwidth of elementwise ops, and the host cost of a small one: ignis beside PyTorch and CuPy.

Cases over 2**28 elements (float32 and bfloat16; CuPy has no bfloat16): add, multiply, a
multiply by a scalar, exp, GELU (tanh form), a bfloat16 -> float32 cast, ``where`` (float32);
the Array API's newer ops in float32: ``floor_divide`` (``x // y``), ``remainder``,
``logaddexp``, ``atan2``, ``sinh`` (one exponential) and ``acosh`` (a log and a square root, on
inputs >= 1), ``sign``, ``isnan`` (bool out) and ``bitwise_and`` on int32; and over a
16384 x 16384 matrix (float32 and bfloat16) the layouts other than "all dense": adding a row
(``x + y[0]``, shape ``(16384,)``) and a column (``(16384, 1)``) broadcast over it, which take
the broadcast kernels, and making a transposed view contiguous. All libraries read the same
device memory (shared through DLPack). Each time is the median of several rounds timed with
CUDA events on the library's own stream, each round running the op a few times back to back
after a warm-up. Bandwidth counts bytes read plus bytes written once (for the broadcasts: the
matrix read and the result written; the broadcast operand is small; a bool array is one byte
an element); ``vs torch`` is ignis's bandwidth over PyTorch's; the last column is the largest
difference from PyTorch's result relative to the result's scale.

The last table is the host time of ``a + b`` on 1,000 float32 elements (microseconds per call,
launches queued back to back, median of rounds), which is what small ops cost.

Run on a GPU machine: ``python benchmarks/elementwise.py``. Prints Markdown tables.
"""

from __future__ import annotations

import operator
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from reduction import ROUNDS, max_rel_diff, time_cupy, time_ignis, time_torch  # shared timing

import ignis

N = 1 << 28
SIDE = 16384

FLOAT_DTYPES = ("float32", "bfloat16")
FLOAT32 = ("float32",)


class Case(NamedTuple):
    """One op timed on two random inputs ``x, y`` (the unary ops ignore ``y``) of ``shape``."""

    name: str
    shape: tuple[int, ...]
    f_ignis: Callable
    f_torch: Callable
    f_cupy: Callable | None
    units: int  # bytes moved per element in units of the input itemsize: reads + writes
    bool_bytes: int = 0  # and bool bytes moved per element (1 per bool array read or written)
    dtypes: tuple[str, ...] = FLOAT_DTYPES  # input dtypes it runs in
    domain: Callable | None = None  # maps the random torch inputs into the op's domain


def cases() -> list[Case]:
    """Every case (see :class:`Case`); inputs are standard normal floats, int32 uniform."""
    import torch

    return [
        Case("add", (N,), lambda x, y: x + y, lambda t, u: t + u, lambda c, d: c + d, 3),
        Case("multiply", (N,), lambda x, y: x * y, lambda t, u: t * u, lambda c, d: c * d, 3),
        Case(
            "multiply by scalar",
            (N,),
            lambda x, y: x * 2.5,
            lambda t, u: t * 2.5,
            lambda c, d: c * 2.5,
            2,
        ),
        Case(
            "exp",
            (N,),
            lambda x, y: ignis.exp(x),
            lambda t, u: torch.exp(t),
            lambda c, d: _cupy().exp(c),
            2,
        ),
        Case(
            "gelu (tanh)",
            (N,),
            lambda x, y: ignis.gelu(x, approximate="tanh"),
            lambda t, u: torch.nn.functional.gelu(t, approximate="tanh"),
            None,
            2,
        ),
        Case(  # x > 0 (x in, bool out), then where (bool, x and y in, one out)
            "where(x > 0, x, y)",
            (N,),
            lambda x, y: ignis.where(x > 0, x, y),
            lambda t, u: torch.where(t > 0, t, u),
            lambda c, d: _cupy().where(c > 0, c, d),
            4,
            bool_bytes=2,
            dtypes=FLOAT32,
        ),
        # the Array API's newer element-wise ops (float32 unless named)
        _binary("floor_divide (x // y)", operator.floordiv, operator.floordiv, "floor_divide"),
        _binary("remainder", ignis.remainder, torch.remainder, "remainder"),
        _binary("logaddexp", ignis.logaddexp, torch.logaddexp, "logaddexp"),
        _binary("atan2", ignis.atan2, torch.atan2, "arctan2"),
        _unary("sinh", ignis.sinh, torch.sinh, "sinh"),
        _unary("acosh (x >= 1)", ignis.acosh, torch.acosh, "arccosh", domain=lambda t: t.abs() + 1),
        _unary("sign", ignis.sign, torch.sign, "sign"),
        _unary("isnan", ignis.isnan, torch.isnan, "isnan", units=1, bool_bytes=1),  # bool out
        _binary("bitwise_and (x & y)", operator.and_, operator.and_, "bitwise_and", ("int32",)),
        Case(
            "add broadcast row",
            (SIDE, SIDE),
            lambda x, y: x + y[0],
            lambda t, u: t + u[0],
            lambda c, d: c + d[0],
            2,
        ),
        Case(
            "add broadcast column",
            (SIDE, SIDE),
            lambda x, y: x + y[0].reshape(SIDE, 1),
            lambda t, u: t + u[0].reshape(SIDE, 1),
            lambda c, d: c + d[0].reshape(SIDE, 1),
            2,
        ),
        Case(
            "transpose copy",
            (SIDE, SIDE),
            lambda x, y: x.T.contiguous(),
            lambda t, u: t.T.contiguous(),
            lambda c, d: _cupy().ascontiguousarray(c.T),
            2,
        ),
    ]


def _binary(name: str, f_ignis: Callable, f_torch: Callable, cupy_name: str,
            dtypes: tuple[str, ...] = FLOAT32) -> Case:
    """A case of a binary op over 2**28 elements: two inputs read, one result written."""
    return Case(name, (N,), f_ignis, f_torch, lambda c, d: getattr(_cupy(), cupy_name)(c, d), 3,
                dtypes=dtypes)


def _unary(name: str, f_ignis: Callable, f_torch: Callable, cupy_name: str, units: int = 2,
           bool_bytes: int = 0, domain: Callable | None = None) -> Case:
    """A case of a unary float32 op over 2**28 elements (``y`` unused): by default one input
    read and one result of its dtype written."""
    return Case(name, (N,), lambda x, y: f_ignis(x), lambda t, u: f_torch(t),
                lambda c, d: getattr(_cupy(), cupy_name)(c), units, bool_bytes, FLOAT32, domain)


def _cupy() -> Any:
    import cupy

    return cupy


def measure(
    name: str,
    dtype: str,
    shape: tuple[int, ...],
    nbytes: int,
    f_ignis: Callable[[], Any],
    f_torch: Callable[[], Any],
    f_cupy: Callable[[], Any] | None,
) -> None:
    """Time one case on each library and print its table row."""
    ms_ignis = time_ignis(f_ignis)
    ms_torch = time_torch(f_torch)
    cupy_cell = "n/a"
    if f_cupy is not None:
        try:
            cupy_cell = f"{nbytes / time_cupy(f_cupy) / 1e6:.0f}"
        except Exception as exc:  # noqa: BLE001 - a missing CuPy feature is a table cell
            cupy_cell = f"n/a ({type(exc).__name__})"
    diff = max_rel_diff(f_ignis(), f_torch())
    gbs_ignis, gbs_torch = nbytes / ms_ignis / 1e6, nbytes / ms_torch / 1e6
    print(
        f"| {name} | {dtype} | {'x'.join(map(str, shape))} | {gbs_ignis:.0f} | {gbs_torch:.0f} | "
        f"{cupy_cell} | {gbs_ignis / gbs_torch:.2f}x | {diff:.1e} |",
        flush=True,
    )


def random_input(torch: Any, gen: Any, case: Case, dtype: str) -> Any:
    """One input of ``case`` in ``dtype``: standard normal floats, or int32 uniform over its
    whole range, then mapped by ``case.domain``."""
    if dtype == "int32":
        info = torch.iinfo(torch.int32)
        t = torch.randint(info.min, info.max, case.shape, device="cuda", dtype=torch.int32,
                          generator=gen)
    else:
        t = torch.randn(case.shape, device="cuda", dtype=getattr(torch, dtype), generator=gen)
    return t if case.domain is None else case.domain(t)


def run_case(torch: Any, cupy: Any, gen: Any, case: Case, dtype: str) -> None:
    t, u = random_input(torch, gen, case, dtype), random_input(torch, gen, case, dtype)
    x, y = ignis.from_dlpack(t), ignis.from_dlpack(u)
    torch.cuda.synchronize()
    nbytes = t.numel() * (t.element_size() * case.units + case.bool_bytes)
    cupy_fn = None
    if cupy is not None and case.f_cupy is not None and dtype != "bfloat16":  # CuPy has none
        c, d = cupy.from_dlpack(t), cupy.from_dlpack(u)
        cupy_fn = lambda: case.f_cupy(c, d)  # noqa: E731
    measure(case.name, dtype, case.shape, nbytes, lambda: case.f_ignis(x, y),
            lambda: case.f_torch(t, u), cupy_fn)


def bandwidth_table(torch: Any, cupy: Any) -> None:
    gpu = ignis.Device(0)
    print(f"# Elementwise ops on {gpu.name}\n")
    print("| op | dtype | shape | ignis GB/s | torch GB/s | cupy GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for case in cases():
        for dtype in case.dtypes:
            run_case(torch, cupy, gen, case, dtype)
            torch.cuda.empty_cache()
    # the cast: bfloat16 in, float32 out
    t = torch.randn((N,), device="cuda", dtype=torch.bfloat16, generator=gen)
    x = ignis.from_dlpack(t)
    measure(
        "astype float32",
        "bfloat16",
        (N,),
        N * (2 + 4),
        lambda: x.astype("float32"),
        lambda: t.float(),
        None,
    )


def host_us(fn: Callable[[], Any], sync: Callable[[], None], calls: int = 5000) -> float:
    """Median over rounds of host microseconds per call (queued back to back, then drained)."""
    for _ in range(500):
        fn()
    sync()
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        samples.append((t1 - t0) / calls * 1e6)
    return statistics.median(samples)


def overhead_table(torch: Any, cupy: Any) -> None:
    t = torch.randn(1000, device="cuda")
    u = torch.randn(1000, device="cuda")
    x, y = ignis.from_dlpack(t), ignis.from_dlpack(u)
    stream = ignis.current_stream()
    ours = host_us(lambda: x + y, stream.synchronize)
    theirs = host_us(lambda: t + u, torch.cuda.synchronize)
    rows = [("ignis", ours), ("torch", theirs)]
    if cupy is not None:
        c, d = cupy.from_dlpack(t), cupy.from_dlpack(u)
        rows.append(("cupy", host_us(lambda: c + d, cupy.cuda.get_current_stream().synchronize)))
    print("\n| a + b, 1000 float32 | host us / call | vs torch |")
    print("|---|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {us / theirs:.2f}x |")


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/elementwise.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    try:
        import cupy
    except ImportError:
        cupy = None
    bandwidth_table(torch, cupy)
    overhead_table(torch, cupy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
