"""The fast host path agrees with the general path, for every element-wise op of the op table
and the reductions, on the stand-in driver (fake_gpu).

The first call of an op on new operand dtypes and shapes takes the general path (it plans and
allocates through ``_creation._allocate``); later calls take the CUDA backend's direct function
where it offers one (see ``_cuda_backend/direct.py``). Both must give the same result (shape,
strides, dtype, device, stream, storage) and hand the driver the same calls: the same
allocations and frees, and the same launches (kernel, grid, block, stream and arguments, the
result's address aside). Each case runs with the block cache off (every allocation and free
reaches the driver), with it on, and on a stream other than the legacy one.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections.abc import Callable, Iterable
from typing import Any

import fake_gpu
import pytest
from ignis._array import _creation
from ignis._array import _semantics as sem

import ignis

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)


def _names(table: Iterable[Any]) -> list[str]:
    """The op names of a table: its keys, or the ``name`` of each op it holds."""
    return [getattr(op, "name", op) for op in table]


UNARY = _names(sem.UNARY_OPS)
BINARY = _names(sem.BINARY_OPS)
REDUCTIONS = list(sem.REDUCE_OPS)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "bool")
SETTINGS = ("no cache", "cache", "side stream")
SIDE_STREAM = 0x6100
_FIRST_ADDRESS = 0x7F00_0000_0000  # the fake driver's first (fake_gpu._next_address)


@pytest.fixture(autouse=True)
def _parsed_once(monkeypatch):
    # Every case starts from cleared caches, so the stand-in driver's kernels are made again
    # each time, from their source: their parameters are parsed once here (most of the time
    # these tests would take otherwise).
    import ignis._kernel as kernel_module

    monkeypatch.setattr(
        kernel_module,
        "parse_kernel_params",
        functools.lru_cache(maxsize=None)(kernel_module.parse_kernel_params),
    )


@pytest.fixture(params=SETTINGS)
def setting(request, monkeypatch):
    gpu = fake_gpu.install(monkeypatch, cache_bytes=1 << 24 if request.param == "cache" else 0)
    yield gpu, request.param
    fake_gpu.uninstall()


def _dtypes(which: str) -> tuple[str, ...]:
    # Every dtype with the driver seeing every allocation; the other settings change only how
    # the result is allocated (a float and an integer dtype tell that apart).
    return DTYPES if which == "no cache" else ("float32", "int32")


def _function(op: str) -> Callable[..., Any]:
    """The public function of ``op``, else the front end's entry for its kind."""
    public = getattr(ignis, op, None)
    if public is not None:
        return public
    from ignis._array import _ops

    return functools.partial(_ops._unary if op in UNARY else _ops._binary, op)


def _scalar(dtype: str) -> Any:
    """A Python scalar that keeps an array of ``dtype`` its dtype."""
    return True if dtype == "bool" else 3 if dtype.startswith("int") else 1.5


class _Recorder:
    """What one call did: whether it took the general allocation step, which direct functions
    the backend offered, and the driver calls and launches it made, with device addresses
    written by name (``result+<offset>``, ``operand<i>+<offset>``, and ``block<k>`` for the
    others, in the order they appear): each call has new blocks."""

    def __init__(self, gpu: fake_gpu.FakeGpu, monkeypatch: pytest.MonkeyPatch):
        self.gpu = gpu
        self.general: list[Any] = []
        self.offered: dict[str, bool] = {}
        self.refuse = False  # the backend offers no direct function: the general path
        allocate = _creation._allocate
        monkeypatch.setattr(
            _creation, "_allocate", lambda *args: self.general.append(args[0]) or allocate(*args)
        )
        backend = type(ignis.empty(1, device="cuda:0")._backend)
        for hook in ("unary_direct", "binary_direct", "reduce_direct"):
            monkeypatch.setattr(backend, hook, self._spy(getattr(backend, hook)))

    def _spy(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        def spy(backend: Any, op: str, *args: Any) -> Any:
            if self.refuse:
                return None
            direct = hook(backend, op, *args)
            self.offered[op] = self.offered.get(op, False) or direct is not None
            return direct

        return spy

    def run(self, fn: Callable[[], ignis.NvArray], operands: list[ignis.NvArray]) -> dict:
        """Call ``fn`` and drop its result: what happened, comparable between calls."""
        gpu = self.gpu
        ignis.reset_peak_memory_stats(0)
        base = ignis.memory_stats(0)
        calls = {name: len(args) for name, args in gpu.calls.items()}
        launches = len(gpu.launches)
        self.general.clear()
        out = fn()
        storage = out._storage
        blocks = {storage.ptr: ("result", storage.nbytes)}
        for i, x in enumerate(operands):
            blocks.setdefault(x._storage.ptr, (f"operand{i}", x._storage.nbytes))
        named = functools.partial(_named, blocks=blocks, others={})
        seen: dict[str, Any] = {
            "result": (
                out.shape,
                out.strides,
                out.dtype,
                out.device,
                out.stream,
                out._offset,
                out._backend,
                storage.nbytes,
                storage.stream,
                type(storage._resource),
            ),
            "general": bool(self.general),
            "launches": [
                (name, grid, block, stream, [named(v) for v in args])
                for name, grid, block, stream, args in gpu.launches[launches:]
            ],
        }
        del out, storage  # the free, on the stream the block was allocated on
        made = {name: every[calls.get(name, 0) :] for name, every in gpu.calls.items()}
        seen["driver"] = {
            name: [tuple(named(v) for v in call) for call in args]
            for name, args in made.items()
            if args
        }
        after = ignis.memory_stats(0)
        seen["stats"] = {key: after[key] - base[key] for key in after}
        seen["stats"]["peak_bytes"] = after["peak_bytes"] - base["current_bytes"]
        return seen


def _named(value: Any, blocks: dict[int, tuple[str, int]], others: dict[int, str]) -> Any:
    """An argument; a device address written by name (see _Recorder)."""
    if isinstance(value, bytes) and len(value) == 8:
        address = struct.unpack("<Q", value)[0]
    else:
        try:
            address = int(value)
        except (TypeError, ValueError):
            return value
    for ptr, (name, nbytes) in blocks.items():
        if ptr and ptr <= address < ptr + max(nbytes, 1):
            return f"{name}+{address - ptr}"
    if _FIRST_ADDRESS <= address < fake_gpu._next_address[0]:  # a block the fake handed out
        return others.setdefault(address, f"block{len(others)}")
    return value


def _agree(
    recorder: _Recorder, label: str, fn: Callable, operands: list, warm: bool, calls: int = 3
) -> bool:
    """Run ``fn`` on the general path (the backend offering no direct function), then from
    fresh caches ``calls - 1`` times as it comes (a binary op's first call plans on the
    general path; later ones take the direct function): every later call must agree with the
    first. Returns whether the last took a direct function (no general allocation). ``warm``:
    the block cache holds a block of each size the op allocates first, as it does for a
    repeated op (every call then takes them from the cache and gives them back)."""
    sizes = []
    if warm:  # the sizes: what the driver sees of one call with nothing cached
        ignis.clear_caches()
        allocations = recorder.gpu.calls["cuMemAllocAsync"]
        before = len(allocations)
        fn()
        sizes = [int(args[0]) for args in allocations[before:]]

    def fresh() -> None:
        ignis.clear_caches()  # the op's plan and direct functions, and the block cache
        for block in [ignis.alloc(n) for n in sizes]:
            block.close()

    fresh()
    recorder.refuse = True
    try:
        first = recorder.run(fn, operands)
    finally:
        recorder.refuse = False
    assert first["general"], f"{label}: the general path allocates through _creation._allocate"
    fresh()
    direct = []
    for _ in range(calls - 1):
        again = recorder.run(fn, operands)
        direct.append(not again["general"])
        for key in ("result", "launches", "driver", "stats"):
            assert again[key] == first[key], f"{label}: the {key} differ"
    return direct[-1]


def _operands(shape: tuple[int, ...], dtype: str, misaligned: bool) -> list[ignis.NvArray]:
    if misaligned:  # one element past a 16-byte boundary: the scalar kernel
        return [ignis.empty((shape[0] + 1,), dtype=dtype, device="cuda:0")[1:] for _ in "ab"]
    return [ignis.empty(shape, dtype=dtype, device="cuda:0") for _ in "ab"]


def _on(gpu: fake_gpu.FakeGpu, which: str) -> contextlib.AbstractContextManager:
    if which == "side stream":
        return ignis.Stream.from_handle(SIDE_STREAM, gpu.device)
    return contextlib.nullcontext()


def _rejected(fn: Callable[[], Any]) -> bool:
    """Whether the op's rule refuses these operands (a dtype it does not take)."""
    try:
        fn()
    except ignis.DTypeError:
        return True
    return False


@pytest.mark.parametrize("op", UNARY)
def test_unary_fast_path_agrees_with_the_general_path(op, setting, monkeypatch) -> None:
    gpu, which = setting
    recorder = _Recorder(gpu, monkeypatch)
    function = _function(op)
    cases, took_direct = 0, False
    for dtype in _dtypes(which):
        for misaligned in (False, True):
            (x, _) = _operands((1000,), dtype, misaligned)
            call = functools.partial(function, x)
            with _on(gpu, which):
                if _rejected(call):
                    continue
                label = f"{op}({dtype}{' view' if misaligned else ''}), {which}"
                took_direct |= _agree(recorder, label, call, [x], warm=which == "cache")
                cases += 1
    assert cases, f"{op}: no dtype taken"
    assert took_direct or not recorder.offered.get(op), f"{op}: its direct function never ran"


@pytest.mark.parametrize("op", BINARY)
def test_binary_fast_path_agrees_with_the_general_path(op, setting, monkeypatch) -> None:
    gpu, which = setting
    recorder = _Recorder(gpu, monkeypatch)
    function = _function(op)
    cases, took_direct = 0, False
    for dtype in _dtypes(which):
        scalar = _scalar(dtype)
        for misaligned in (False, True):
            a, b = _operands((2000,), dtype, misaligned)
            forms = {
                "a, b": functools.partial(function, a, b),
                "a, scalar": functools.partial(function, a, scalar),
                "scalar, b": functools.partial(function, scalar, b),
            }
            with _on(gpu, which):
                for form, call in forms.items():
                    if _rejected(call):
                        continue
                    label = f"{op}({form}: {dtype}{' views' if misaligned else ''}), {which}"
                    took_direct |= _agree(recorder, label, call, [a, b], warm=which == "cache")
                    cases += 1
    assert cases, f"{op}: no dtype taken"
    assert took_direct or not recorder.offered.get(op), f"{op}: its direct function never ran"


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_fast_path_agrees_with_the_general_path(op, setting, monkeypatch) -> None:
    # The first direct call of an alignment case plans (the general reduction) and learns its
    # launch; the later ones replay it: all agree with the general path.
    gpu, which = setting
    recorder = _Recorder(gpu, monkeypatch)
    function = _function(op)
    cases, took_direct = 0, False
    for dtype in _dtypes(which):
        for shape, axis, keepdims, misaligned in (
            ((1000,), None, False, False),
            ((1000,), None, False, True),
            ((20, 50), None, True, False),
            ((20, 50), 1, False, False),  # over some axes: no direct function
        ):
            (x, _) = _operands(shape, dtype, misaligned)
            call = functools.partial(function, x, axis=axis, keepdims=keepdims)
            with _on(gpu, which):
                if _rejected(call):
                    continue
                label = f"{op}({dtype} {shape} axis={axis}{' view' if misaligned else ''})"
                took_direct |= _agree(
                    recorder, f"{label}, {which}", call, [x], warm=which == "cache", calls=4
                )
                cases += 1
    assert cases, f"{op}: no dtype taken"
    assert took_direct or not recorder.offered.get(op), f"{op}: its direct function never ran"


def test_the_direct_functions_exist_and_run(monkeypatch) -> None:
    # Not a vacuous agreement: the backend offers direct functions for the element-wise ops
    # and the full reductions, and the later calls run them.
    gpu = fake_gpu.install(monkeypatch)
    try:
        recorder = _Recorder(gpu, monkeypatch)
        ran = {}
        for op in UNARY + BINARY + REDUCTIONS:
            for dtype in ("float32", "int32"):  # the first the op takes (bitwise: integers)
                x, y = _operands((4096,), dtype, False)
                args = (x, y) if op in BINARY else (x,)
                call = functools.partial(_function(op), *args)
                if not _rejected(call):
                    break
            ran[op] = _agree(recorder, op, call, [x, y], warm=False)
        offered = {op for op, yes in recorder.offered.items() if yes}
        assert {op for op, yes in ran.items() if yes} == offered
        assert {"add", "multiply", "exp", "sum"} <= offered  # what the host benchmarks measure
    finally:
        fake_gpu.uninstall()
