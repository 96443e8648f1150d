"""Sorting, scans, unique and searchsorted at 2**24 elements: ignis beside PyTorch, in one
process.

Cases (float32 unless named): ``sort`` and ``argsort`` of 2**24 random values (also int32 and
int64 keys, int32 keys of 1000 distinct values, whose two high key bytes are alike in every key
so that their radix passes have no work, and rows of 4096 and of 256 elements),
``cumulative_sum`` (float32, int64 and complex64), ``unique_values``, ``unique_counts``,
``unique_inverse`` and ``unique_all`` (2**24 values drawn from 2**20 distinct ones, and from
1000; PyTorch's ``torch.unique`` with the matching ``return_inverse`` / ``return_counts``, it
has no first indices: ``unique_all`` computes them besides) and ``searchsorted`` of 2**24
random queries in 2**24 sorted values. Both libraries read the same
device memory (shared through DLPack). Each time is the median of several rounds timed with
CUDA events on the library's own stream, each round running the op a few times back to back
after a warm-up. ``speed vs torch`` is PyTorch's time over ignis's (above 1: ignis is faster;
the target is at least 0.8). ``same`` says whether the results agree: sorted values and scans
exactly (scans within float tolerance), argsort through the values it selects (the order of
equal keys may differ: torch.argsort is not stable by default), unique values exactly.

Rows marked ``(lsd)`` run the earlier radix sort (three launches a key byte;
``ignis._array._cuda_backend.sorting.RADIX_PATH = "lsd"``) beside the default Onesweep path, in
the same process, so that one run compares the two. Rows marked ``(look-back)`` do the same for
the scan: the one-pass decoupled look-back (``SCAN_PATH = "look_back"``) beside the default
three-pass scan (tile totals, their prefixes, the scan from them).

unique and the other data-dependent sizes wait once for the device in both libraries; that
wait is inside the timed region. PyTorch's ``torch.sort`` always computes values and indices.

Run on a GPU machine: ``python benchmarks/sorting.py``. Prints a Markdown table. The
environment picks the Onesweep pass kernel and its tuning for a whole run (every row not
marked ``(lsd)``): ``IGNIS_SORT_RADIX=onesweep_v1`` the first pass kernel, for comparison;
``IGNIS_SORT_ITEMS="20,16"`` the keys a thread and ``IGNIS_SORT_BLOCKS="3,3"`` the blocks an
SM it is compiled for (for keys of up to 4 bytes, then for 8-byte keys; see ``ONESWEEP_ITEMS``
in ``ignis._array._cuda_backend.sorting``); ``IGNIS_SORT_RANK=atomic_or`` ranks a warp's
keys through shared atomicOr words instead of ballots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ignis._array._cuda_backend import sorting as cuda_sorting
from reduction import max_rel_diff, time_ignis, time_torch  # shared timing

import ignis

N = 1 << 24


def _with(switch: str, value: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` run with the module switch ``switch`` of the CUDA sorting families at ``value``."""

    def run(x: Any) -> Any:
        saved = getattr(cuda_sorting, switch)
        setattr(cuda_sorting, switch, value)
        try:
            return fn(x)
        finally:
            setattr(cuda_sorting, switch, saved)

    return run


def _lsd(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` run with the earlier three-launch radix sort."""
    return _with("RADIX_PATH", "lsd", fn)


def _look_back(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` run with the one-pass look-back scan instead of the three-pass one."""
    return _with("SCAN_PATH", "look_back", fn)


def _host(a: Any) -> np.ndarray:
    if isinstance(a, ignis.NvArray):
        return np.asarray(a.to_host(), dtype=np.float64)
    return a.double().cpu().numpy()


def _same_values(ours: Any, theirs: Any) -> bool:
    return bool(np.array_equal(_host(ours), _host(theirs), equal_nan=True))


def _same_scan(ours: Any, theirs: Any) -> bool:
    return max_rel_diff(ours, theirs) < 1e-3


def _same_complex_scan(ours: Any, theirs: Any) -> bool:
    a = ours.to_host().astype(np.complex128)
    b = theirs.cpu().numpy().astype(np.complex128)
    scale = np.maximum(np.abs(b), np.max(np.abs(b)) * 1e-3 + 1e-30)
    return bool(np.max(np.abs(a - b) / scale) < 1e-3)


def _same_unique(fields: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    """Compare ignis's unique result (a namedtuple) with torch.unique's tuple, field by field:
    values, then inverse and counts where asked."""

    def check(ours: Any, theirs: Any) -> bool:
        mine = [ours.values] + [getattr(ours, f) for f in fields]
        return all(_same_values(a, b) for a, b in zip(mine, theirs, strict=True))

    return check


def cases() -> list[tuple[str, str, Callable, Callable, Callable, Callable]]:
    """(name, input description, make torch input, ignis fn, torch fn, results agree?)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int) -> Any:
        return torch.randn(shape, device="cuda", generator=gen)

    def randint(high: int, dtype: Any, *shape: int) -> Any:
        return torch.randint(0, high, shape, device="cuda", dtype=dtype, generator=gen)

    def argsort_agrees(x: Any) -> Callable[[Any, Any], bool]:
        # compare the values the indices select (ties may be ordered differently)
        def check(ours: Any, theirs: Any) -> bool:
            t = torch.from_dlpack(ours)
            return bool(
                torch.equal(torch.take_along_dim(x, t, -1), torch.take_along_dim(x, theirs, -1))
            )

        return check

    def search_inputs() -> tuple[Any, Any]:
        return torch.sort(randn(N)).values, randn(N)

    sorted_, queries = search_inputs()
    sorted_nv = ignis.from_dlpack(sorted_)
    i32, i64 = randint(1 << 30, torch.int32, N), randint(1 << 62, torch.int64, N)
    f = randn(N)
    rows4k, rows256 = randn(N // 4096, 4096), randn(N // 256, 256)
    few = randint(1 << 20, torch.int32, N).float()
    small = randint(1000, torch.int32, N)
    z = torch.complex(randn(N), randn(N))
    unique_rows = [
        (
            f"unique_{kind}",
            what,
            make,
            fn,
            lambda t, kw=kw: torch.unique(t, **kw),
            _same_unique(fields),
        )
        for what, make in (
            ("float32 2^24 of 2^20", lambda: few),
            ("int32 2^24 of 1000", lambda: small),
        )
        for kind, fn, kw, fields in (
            ("counts", ignis.unique_counts, {"return_counts": True}, ("counts",)),
            ("inverse", ignis.unique_inverse, {"return_inverse": True}, ("inverse_indices",)),
            (
                "all",
                ignis.unique_all,
                {"return_inverse": True, "return_counts": True},
                ("inverse_indices", "counts"),
            ),
        )
    ]
    return [
        (
            "sort",
            "float32 2^24",
            lambda: f,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort",
            "int32 2^24",
            lambda: i32,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort",
            "int64 2^24",
            lambda: i64,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort",
            "int32 2^24 of 1000",
            lambda: small,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort rows",
            "float32 4096 x 4096",
            lambda: rows4k,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort (lsd)",
            "float32 2^24",
            lambda: f,
            _lsd(lambda x: ignis.sort(x)),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort rows (lsd)",
            "float32 4096 x 4096",
            lambda: rows4k,
            _lsd(lambda x: ignis.sort(x)),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort rows",
            "int64 2048 x 8192",
            lambda: i64.reshape(2048, 8192),
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "sort rows",
            "float32 65536 x 256",
            lambda: rows256,
            lambda x: ignis.sort(x),
            lambda t: torch.sort(t).values,
            _same_values,
        ),
        (
            "argsort",
            "float32 2^24",
            lambda: f,
            lambda x: ignis.argsort(x),
            lambda t: torch.argsort(t),
            argsort_agrees(f),
        ),
        (
            "argsort",
            "int64 2^24",
            lambda: i64,
            lambda x: ignis.argsort(x),
            lambda t: torch.argsort(t),
            argsort_agrees(i64),
        ),
        (
            "argsort (lsd)",
            "float32 2^24",
            lambda: f,
            _lsd(lambda x: ignis.argsort(x)),
            lambda t: torch.argsort(t),
            argsort_agrees(f),
        ),
        (
            "argsort rows",
            "float32 4096 x 4096",
            lambda: rows4k,
            lambda x: ignis.argsort(x),
            lambda t: torch.argsort(t),
            argsort_agrees(rows4k),
        ),
        (
            "argsort stable",
            "float32 2^24",
            lambda: f,
            lambda x: ignis.argsort(x),
            lambda t: torch.argsort(t, stable=True),
            argsort_agrees(f),
        ),
        (
            "cumulative_sum",
            "float32 2^24",
            lambda: f,
            lambda x: ignis.cumulative_sum(x),
            lambda t: torch.cumsum(t, 0),
            _same_scan,
        ),
        (
            "cumulative_sum",
            "int64 2^24",
            lambda: small.long(),
            lambda x: ignis.cumulative_sum(x),
            lambda t: torch.cumsum(t, 0),
            _same_values,
        ),
        (
            "cumulative_sum",
            "complex64 2^24",
            lambda: z,
            lambda x: ignis.cumulative_sum(x),
            lambda t: torch.cumsum(t, 0),
            _same_complex_scan,
        ),
        (
            "cumulative_sum (look-back)",
            "float32 2^24",
            lambda: f,
            _look_back(lambda x: ignis.cumulative_sum(x)),
            lambda t: torch.cumsum(t, 0),
            _same_scan,
        ),
        (
            "cumulative_sum (look-back)",
            "int64 2^24",
            lambda: small.long(),
            _look_back(lambda x: ignis.cumulative_sum(x)),
            lambda t: torch.cumsum(t, 0),
            _same_values,
        ),
        (
            "cumulative_sum rows",
            "float32 4096 x 4096",
            lambda: rows4k,
            lambda x: ignis.cumulative_sum(x, axis=1),
            lambda t: torch.cumsum(t, 1),
            _same_scan,
        ),
        (
            "unique_values",
            "float32 2^24 of 2^20",
            lambda: few,
            lambda x: ignis.unique_values(x),
            lambda t: torch.unique(t),
            _same_values,
        ),
        (
            "unique_values",
            "int32 2^24 of 1000",
            lambda: small,
            lambda x: ignis.unique_values(x),
            lambda t: torch.unique(t),
            _same_values,
        ),
        *unique_rows,
        (
            "searchsorted",
            "float32 2^24 in 2^24",
            lambda: queries,
            lambda x: ignis.searchsorted(sorted_nv, x),
            lambda t: torch.searchsorted(sorted_, t),
            _same_values,
        ),
    ]


def bench_row(case: tuple) -> str:
    import torch

    name, what, make, f_ignis, f_torch, agree = case
    t = make()
    x = ignis.from_dlpack(t)
    torch.cuda.synchronize()
    ms_ignis = time_ignis(lambda: f_ignis(x))
    ms_torch = time_torch(lambda: f_torch(t))
    same = "yes" if agree(f_ignis(x), f_torch(t)) else "NO"
    return (
        f"| {name} | {what} | {ms_ignis:.3f} | {ms_torch:.3f} | {ms_torch / ms_ignis:.2f}x | "
        f"{same} |"
    )


def main() -> None:
    import torch

    if not ignis.is_available():
        raise SystemExit("sorting benchmark: needs a CUDA GPU")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print()
    print("| op | input | ignis ms | torch ms | speed vs torch | same |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for case in cases():
        print(bench_row(case), flush=True)


if __name__ == "__main__":
    main()
