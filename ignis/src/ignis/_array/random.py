"""Seeded, counter-based random arrays (Philox-4x32-10), identical on every device.

Usage::

    >>> import ignis
    >>> ignis.random.seed(0)
    >>> x = ignis.random.rand(2, 3)            # uniform [0, 1), float32
    >>> g = ignis.random.Generator(1234)
    >>> z = g.randn((4, 4), dtype="float64")  # standard normal
    >>> k = g.randint(0, 10, shape=(5,))       # int64 in [0, 10)

The stream (the contract a CUDA kernel reproduces bit for bit)
-------------------------------------------------------------
Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
Random123 reference constants) maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key
``(k0, k1)`` to four 32-bit words.

* key: ``k0 = seed & 0xFFFFFFFF``, ``k1 = (seed >> 32) & 0xFFFFFFFF`` (seed is 0 .. 2**64-1).
* A generator holds ``(seed, offset)``; ``offset`` counts 128-bit blocks already used.
* A call that needs ``W`` words uses blocks ``b = offset .. offset + ceil(W/4) - 1`` with counter
  ``(b & 0xFFFFFFFF, b >> 32, 0, 0)``; word ``w`` of the call is output lane ``w % 4`` of block
  ``offset + w // 4``. Afterwards ``offset += ceil(W/4)``. Element ``i`` of the (row-major)
  output uses words ``[i*k, i*k + k)`` where ``k`` is the words per element below.
* ``uniform`` (``rand``), in ``[0, 1)``, from the high bits of each word: float32: ``(w >> 8) *
  2**-24`` (k = 1); float16: ``(w >> 21) * 2**-11``; bfloat16: ``(w >> 24) * 2**-8`` (k = 1,
  exact in the type); float64: ``((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53`` (k = 2).
* ``normal`` (``randn``), Box-Muller on pairs of elements ``(2j, 2j+1)`` in float64:
  ``u1 = ((w_a >> 8) + 1) * 2**-24`` in (0, 1], ``u2 = (w_b >> 8) * 2**-24`` from the words of
  elements 2j and 2j+1 (k = 1; for float64 the 53-bit forms ``u1 = (U53(w0, w1) + 1) * 2**-53``
  and ``u2 = U53(w2, w3) * 2**-53``, k = 2); ``r = sqrt(-2 ln u1)``, ``z_2j = r cos(2 pi u2)``,
  ``z_2j+1 = r sin(2 pi u2)``; rounded to float32 and then, for half types, to the half type.
  An odd last element uses ``z_2j`` (its pair's words are still consumed).
  Because ``log``/``cos``/``sin`` are correctly rounded only to about an ulp in float64, a
  kernel agrees with this reference after rounding to float32 except in rare ties; uniform and
  integer streams agree exactly.
* ``integers`` (``randint``) in ``[low, high)`` with ``r = high - low``: for ``r <= 2**32``,
  ``low + ((w * r) >> 32)`` (k = 1; Lemire's multiply-shift, bias below ``r / 2**32``); for
  larger ``r`` (int64 only) ``low + (((w0 << 32) | w1) mod r)`` (k = 2; bias below ``r / 2**64``).

Random numbers in captured CUDA graphs (:class:`GraphDraws`)
------------------------------------------------------------
An eager call passes its stream ``(seed, offset)`` to the kernel as launch values; a CUDA graph
would replay those values, and so the numbers drawn at capture, at every launch. Inside
``GraphDraws.capturing()`` (``ignis_autograd.capture_step`` uses it) a call on the capture's
device instead draws from a small device buffer ``state = (seed, base block)`` (two uint64, one
per generator the graph uses, owned by the capture): its kernel gets a pointer to ``state`` and
its offset counted from the base, ``rel``, the blocks the graph's earlier draws of that
generator took. The capture sums those blocks, ``B``, per generator and does not move the
generator (nothing runs at capture). :meth:`GraphDraws.advance`, called before each launch of
the graph, queues on the current stream, per generator, a one-thread kernel writing the
generator's current ``(seed, offset)`` into ``state``, then advances the host offset by ``B``.
A replay therefore draws blocks ``offset + rel ..`` exactly as the eager step at that point
would, and leaves the generator where that step would have (PyTorch's graph-safe Philox: a
per-graph offset increment recorded at capture, added at each replay). The host keeps the
truth, so eager calls, :meth:`Generator.set_state`, seeding and the CPU backend are unchanged
and eager calls stay as cheap as before (one global read more); the device buffer is a per-graph
snapshot written in stream order, so a replay queued behind an earlier one never changes what
the earlier one reads. Launch every replay of a graph on one stream.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import _dtypes as dt
from .._errors import DTypeError, ShapeError
from . import _layout

__all__ = [
    "Generator",
    "GraphDraws",
    "seed",
    "get_state",
    "set_state",
    "rand",
    "randn",
    "randint",
    "philox4x32",
    "generate_host",
]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF


def philox4x32(counter: Any, key: tuple[int, int], rounds: int = 10) -> np.ndarray:
    """Philox-4x32 on an array of counters.

    ``counter`` is a ``(..., 4)`` array of uint32 words ``(c0, c1, c2, c3)``; ``key`` is
    ``(k0, k1)``. Returns the ``(..., 4)`` uint32 outputs. Example (Random123 known answer):
    ``philox4x32([[0, 0, 0, 0]], (0, 0))`` ->
    ``[[0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]]``.
    """
    c = np.asarray(counter, dtype=np.uint64)
    if c.shape[-1:] != (4,):
        raise ShapeError(
            f"philox4x32: counter must have a last axis of 4 words, got shape {c.shape}"
        )
    c0, c1, c2, c3 = (c[..., i] & _MASK32 for i in range(4))
    k0, k1 = int(key[0]) & _MASK32, int(key[1]) & _MASK32
    m0, m1 = np.uint64(_M0), np.uint64(_M1)
    for r in range(rounds):
        if r:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        p0 = c0 * m0  # exact: both factors are below 2**32
        p1 = c2 * m1
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(_MASK32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(_MASK32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _words(seed: int, offset: int, count: int) -> np.ndarray:
    """``count`` stream words starting at block ``offset`` (uint64 array holding uint32 values)."""
    blocks = -(-count // 4)
    b = np.arange(offset, offset + blocks, dtype=np.uint64)
    counter = np.stack(
        [b & np.uint64(_MASK32), b >> np.uint64(32), np.zeros_like(b), np.zeros_like(b)], axis=-1
    )
    out = philox4x32(counter, (seed & _MASK32, (seed >> 32) & _MASK32))
    return out.reshape(-1)[:count].astype(np.uint64)


def words_per_element(kind: str, dtype: dt.DType, params: dict[str, Any]) -> int:
    """How many 32-bit stream words one element of ``kind``/``dtype`` consumes."""
    if kind in ("uniform", "normal"):
        return 2 if dtype is dt.float64 else 1
    if kind == "integers":
        return 2 if params["high"] - params["low"] > 2**32 else 1
    raise ValueError(f"unknown random kind {kind!r}")


def _u53(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    return ((hi >> np.uint64(5)) << np.uint64(26)) + (lo >> np.uint64(6))


def generate_host(
    kind: str,
    shape: tuple[int, ...],
    dtype: dt.DType,
    seed: int,
    offset: int,
    params: dict[str, Any],
) -> np.ndarray:
    """The reference values of one call (see the module notes) as a NumPy array of ``dtype``."""
    n = _layout.numel(shape)
    k = words_per_element(kind, dtype, params)
    if kind == "normal":
        n_pairs = -(-n // 2)
        w = _words(seed, offset, n_pairs * 2 * k)
    else:
        w = _words(seed, offset, n * k)
    if kind == "uniform":
        if dtype is dt.float64:
            vals = _u53(w[0::2], w[1::2]).astype(np.float64) * 2.0**-53
        else:
            bits = {dt.float32: 24, dt.float16: 11, dt.bfloat16: 8}[dtype]
            vals = (w >> np.uint64(32 - bits)).astype(np.float64) * 2.0**-bits
        return vals.astype(dtype.numpy).reshape(shape)
    if kind == "normal":
        if dtype is dt.float64:
            u1 = (_u53(w[0::4], w[1::4]).astype(np.float64) + 1.0) * 2.0**-53
            u2 = _u53(w[2::4], w[3::4]).astype(np.float64) * 2.0**-53
        else:
            u1 = ((w[0::2] >> np.uint64(8)).astype(np.float64) + 1.0) * 2.0**-24
            u2 = (w[1::2] >> np.uint64(8)).astype(np.float64) * 2.0**-24
        r = np.sqrt(-2.0 * np.log(u1))
        theta = (2.0 * math.pi) * u2
        z = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=-1).reshape(-1)[:n]
        if dtype is not dt.float64:
            z = z.astype(np.float32)
        return z.astype(dtype.numpy).reshape(shape)
    low, high = int(params["low"]), int(params["high"])
    span = high - low
    if k == 1:
        v = (w * np.uint64(span)) >> np.uint64(32)  # span <= 2**32: the product fits 64 bits
    else:
        x = (w[0::2] << np.uint64(32)) | w[1::2]
        v = x if span == 2**64 else x % np.uint64(span)
    # low + v is in range; adding modulo 2**64 and reading as int64 gives it exactly.
    vals = (v + np.uint64(low & 0xFFFFFFFFFFFFFFFF)).view(np.int64)
    return np.asarray(vals).astype(dtype.numpy).reshape(shape)


def _shape_from(args: tuple[Any, ...], op: str) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return _layout.normalize_shape(args[0], op)
    return _layout.normalize_shape(args, op)


class Generator:
    """A Philox-4x32-10 stream: ``(seed, offset)``. Every call advances ``offset``.

    Example: ``g = Generator(7); a = g.rand(3); b = g.rand(3)`` gives different values, and
    ``Generator(7).rand(3)`` gives ``a`` again on any device.
    """

    def __init__(self, seed: int = 0):
        self._lock = threading.Lock()
        self.seed = _check_seed(seed)
        self.offset = 0

    def get_state(self) -> tuple[int, int]:
        """``(seed, offset)``, to restore later with :meth:`set_state`."""
        return self.seed, self.offset

    def set_state(self, state: tuple[int, int]) -> None:
        seed_, offset = state
        self.seed = _check_seed(seed_)
        if int(offset) < 0:
            raise ValueError(f"set_state: offset must be >= 0, got {offset}")
        self.offset = int(offset)

    def _take(self, words: int) -> int:
        with self._lock:
            start = self.offset
            self.offset += -(-words // 4)
            return start

    def _fill(
        self,
        kind: str,
        shape: tuple[int, ...],
        dtype: dt.DType,
        device: Any,
        params: dict[str, Any],
    ) -> Any:
        from ._creation import _new, resolve_device

        out = _new(shape, dtype, resolve_device(device))
        n = out.numel
        k = words_per_element(kind, dtype, params)
        words = (-(-n // 2) * 2 * k) if kind == "normal" else n * k
        cap = _capturing
        if cap is not None and cap._covers(out._device):
            state, rel = cap._take(self, words)
            if n:
                out._backend.kernels.random_from_state(kind, out, state, rel, params)
            return out
        start = self._take(words)
        if n:
            out._backend.kernels.random(kind, out, self.seed, start, params)
        return out

    def rand(self, *shape: Any, dtype: dt.DTypeLike = "float32", device: Any = None) -> Any:
        """Uniform values in ``[0, 1)``. ``rand(2, 3)`` or ``rand((2, 3))``."""
        d = dt.as_dtype(dtype, "rand")
        if d.kind != "f":
            raise DTypeError(f"rand: dtype must be floating, got {d.name}")
        return self._fill("uniform", _shape_from(shape, "rand"), d, device, {})

    def randn(self, *shape: Any, dtype: dt.DTypeLike = "float32", device: Any = None) -> Any:
        """Standard normal values (Box-Muller). ``randn(2, 3)`` or ``randn((2, 3))``."""
        d = dt.as_dtype(dtype, "randn")
        if d.kind != "f":
            raise DTypeError(f"randn: dtype must be floating, got {d.name}")
        return self._fill("normal", _shape_from(shape, "randn"), d, device, {})

    def randint(
        self,
        low: int,
        high: int | None = None,
        shape: Any = (),
        dtype: dt.DTypeLike = "int64",
        device: Any = None,
    ) -> Any:
        """Integers in ``[low, high)`` (``randint(n)`` is ``[0, n)``), NumPy's argument order."""
        if high is None:
            low, high = 0, low
        d = dt.as_dtype(dtype, "randint")
        if d.kind not in "iu":
            raise DTypeError(f"randint: dtype must be an integer type, got {d.name}")
        low, high = int(low), int(high)
        if high <= low:
            raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
        info = np.iinfo(d.numpy)
        if low < info.min or high - 1 > info.max:
            raise ValueError(
                f"randint: [{low}, {high}) does not fit {d.name} (range {info.min}..{info.max})"
            )
        return self._fill(
            "integers",
            _layout.normalize_shape(shape, "randint"),
            d,
            device,
            {"low": low, "high": high},
        )


# The GraphDraws whose capture is in progress (None: every draw is eager). One at a time; only
# draws from the capturing thread, on the capture's device, go to it.
_capturing: GraphDraws | None = None
_capturing_lock = threading.Lock()


class _Slot:
    """One generator's draws in a captured graph: its device ``state`` and the ``blocks`` taken."""

    __slots__ = ("state", "blocks")

    def __init__(self, state: Any):
        self.state = state
        self.blocks = 0


class GraphDraws:
    """The random draws of one captured CUDA graph, made new at each replay.

    Draws on ``device`` inside :meth:`capturing` (from any :class:`Generator`) read their seed
    and offset from device memory; call :meth:`advance` before each launch of the graph, on the
    stream it is launched on. See the module notes. Example::

        >>> draws = ignis.random.GraphDraws("cuda:0")
        >>> with ignis.Graph.capture(s) as g, draws.capturing():
        ...     y, mask = ignis.nn.dropout(x, 0.1)
        >>> with s:
        ...     for _ in range(3):
        ...         draws.advance()       # writes (seed, offset); offset += ceil(x.numel / 4)
        ...         g.launch(s)           # a new mask each launch
    """

    def __init__(self, device: Any):
        from ._creation import resolve_device

        self.device = resolve_device(device)
        self._slots: dict[Generator, _Slot] = {}
        self._thread: int | None = None

    @contextmanager
    def capturing(self) -> Iterator[GraphDraws]:
        """Route this thread's draws on the device to device-resident state until the block ends."""
        global _capturing
        with _capturing_lock:
            if _capturing is not None:
                raise RuntimeError(
                    "GraphDraws.capturing: another capture's draws are being recorded; "
                    "capture one graph at a time"
                )
            self._thread = threading.get_ident()
            _capturing = self
        try:
            yield self
        finally:
            with _capturing_lock:
                _capturing = None
                self._thread = None

    def _covers(self, device: Any) -> bool:
        return device == self.device and threading.get_ident() == self._thread

    def _take(self, gen: Generator, words: int) -> tuple[Any, int]:
        """``(state, rel)`` for a draw of ``words`` words from ``gen`` during the capture."""
        slot = self._slots.get(gen)
        if slot is None:
            from ._creation import _new

            # Allocated during the capture (from the capture's pool where one is active); not
            # written here: a write now would be recorded into the graph. advance() writes it.
            slot = self._slots[gen] = _Slot(_new((2,), dt.uint64, self.device))
        with gen._lock:
            rel = slot.blocks
            slot.blocks += -(-words // 4)
        return slot.state, rel

    @property
    def blocks(self) -> dict[Generator, int]:
        """Philox blocks each generator gives one replay (what :meth:`advance` adds)."""
        return {gen: slot.blocks for gen, slot in self._slots.items()}

    def advance(self) -> None:
        """Before a replay: write each generator's ``(seed, offset)`` into the graph's state (on
        the current stream of the device) and advance its offset by the blocks one replay uses."""
        for gen, slot in self._slots.items():
            with gen._lock:
                seed_, offset = gen.seed, gen.offset
                gen.offset = offset + slot.blocks
            slot.state._backend.kernels.random_store_state(slot.state, seed_, offset)

    def __repr__(self) -> str:
        return f"<ignis.random.GraphDraws on {self.device}: {len(self._slots)} generator(s)>"


def _check_seed(value: Any) -> int:
    s = int(value)
    if not 0 <= s < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {value!r}")
    return s


_default = Generator(0)


def seed(value: int) -> None:
    """Reset the default generator to ``(value, offset 0)``."""
    _default.set_state((value, 0))


def get_state() -> tuple[int, int]:
    """``(seed, offset)`` of the default generator."""
    return _default.get_state()


def set_state(state: tuple[int, int]) -> None:
    """Restore the default generator from :func:`get_state`."""
    _default.set_state(state)


def rand(*shape: Any, dtype: dt.DTypeLike = "float32", device: Any = None) -> Any:
    """Uniform ``[0, 1)`` values from the default generator: ``ignis.random.rand(3, 4)``."""
    return _default.rand(*shape, dtype=dtype, device=device)


def randn(*shape: Any, dtype: dt.DTypeLike = "float32", device: Any = None) -> Any:
    """Standard normal values from the default generator."""
    return _default.randn(*shape, dtype=dtype, device=device)


def randint(
    low: int,
    high: int | None = None,
    shape: Any = (),
    dtype: dt.DTypeLike = "int64",
    device: Any = None,
) -> Any:
    """Integers in ``[low, high)`` from the default generator."""
    return _default.randint(low, high, shape=shape, dtype=dtype, device=device)
