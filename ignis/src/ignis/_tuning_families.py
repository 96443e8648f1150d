"""What can be tuned: each kernel family's settings, their defaults, and what each one accepts.

One frozen dataclass per family (:class:`AttentionSettings`, :class:`ReductionSettings`, ...),
each setting declared once with :func:`knob`: its default, what it chooses (the README's table
and ``ignis.tuning.knobs()`` read it from here) and the check its values must pass. A settings
object is checked when it is made, hashed once, and compared by identity first: the plans of a
family are keyed on it. :mod:`ignis._tuning` holds the settings in force.

Example::

    >>> s = AttentionSettings().replace(bwd_tiles="k64q32w4")
    >>> s.differences()
    {'bwd_tiles': 'k64q32w4'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "Table",
    "BwdTiles",
    "BWD_TILE_VARIANTS",
    "AttentionSettings",
    "ReductionSettings",
    "SoftmaxSettings",
    "NormLossSettings",
    "ElementwiseSettings",
    "IndexingSettings",
    "OptimSettings",
    "ActivationSettings",
    "MatmulSettings",
    "FAMILIES",
    "knob",
]


# --- read-only tables ----------------------------------------------------------------------------


class Table(dict):  # type: ignore[type-arg]
    """A read-only, hashable mapping: the value of a setting that is a table (head dim ->
    tiles, ...). Built from any mapping (nested mappings become tables, lists tuples); its
    lookups are a dict's. ``dict(table)`` gives a copy to change and pass back.

    Example: ``Table({64: (3, 128)})[64] == (3, 128)``.
    """

    __slots__ = ("_hash",)

    def __init__(self, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (), /):
        pairs = items.items() if isinstance(items, Mapping) else items
        super().__init__((_frozen_value(k), _frozen_value(v)) for k, v in pairs)
        self._hash: int | None = None

    def __hash__(self) -> int:  # type: ignore[override]
        h = self._hash
        if h is None:
            h = self._hash = hash(frozenset(self.items()))
        return h

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a tuning table is read-only: pass a changed copy, e.g. "
            "ignis.tuning(attention=dict(wgmma_tiles={**table, 64: (2, 128)}))"
        )

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Table, (dict(self),))


def _frozen_value(value: Any) -> Any:
    """``value`` with mappings as :class:`Table` and lists and tuples as tuples, recursively."""
    if isinstance(value, Table):
        return value
    if isinstance(value, Mapping):
        return Table(value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen_value(v) for v in value)
    return value


# --- the attention backward's tile variants ------------------------------------------------------


class BwdTiles(NamedTuple):
    """A tile variant of the float16 / bfloat16 dK/dV and fused backward kernels
    (``flash_bwd_dkdv_tc`` / ``flash_bwd_fused_tc`` of ``cuda_src/attention.cu``; its template
    arguments after T, D, CAUSAL).

    Attributes:
        keys: keys per block, 16 per warp (so ``keys // 16`` warps).
        queries: queries per streamed tile (a multiple of 16; its 16-row tiles divide the warps).
        min_blocks: the launch bounds' minimum blocks per SM at head dims <= 64, which caps
            ptxas's registers (0: none asked; always none above 64, where the dK and dV
            accumulators alone take 128 registers).
        kv_regs: at head dims <= 64 each warp keeps its K and V A fragments in registers.
        red_pairs: dQ added in column pairs by one vector reduction each (sm_90).
    """

    keys: int
    queries: int
    min_blocks: int = 0
    kv_regs: bool = False
    red_pairs: bool = False

    @property
    def threads(self) -> int:
        return self.keys // 16 * 32

    def template_args(self, d: int) -> str:
        """The kernels' tile arguments at padded head dim ``d``."""
        minb = self.min_blocks if d <= 64 else 0
        flags = ", ".join("true" if f else "false" for f in (self.kv_regs, self.red_pairs))
        return f"{self.keys}, {self.queries}, {minb}, {flags}"


#: The tile variants of the float16 / bfloat16 dK/dV and fused backward, by name (what the
#: ``attention.bwd_tiles`` setting names): k<keys per block>q<queries per tile>w<warps>, then
#: -b2 (two blocks per SM asked at head dims <= 64), -kv (K and V fragments in registers at
#: head dims <= 64), -red2 (dQ by paired reductions). All give the same results up to the
#: order of dQ's float32 atomics; see attention.cu's tensor-core backward section for their
#: registers and occupancy.
BWD_TILE_VARIANTS: dict[str, BwdTiles] = {
    "k64q32w4": BwdTiles(64, 32),
    "k128q32w8": BwdTiles(128, 32),
    "k128q64w8": BwdTiles(128, 64),
    "k128q32w8-b2-red2": BwdTiles(128, 32, min_blocks=2, red_pairs=True),
    "k128q64w8-kv-red2": BwdTiles(128, 64, kv_regs=True, red_pairs=True),
}


# --- checks: each returns None for a good value, else what was expected --------------------------

Check = Callable[[Any], "str | None"]


def _at_least(low: int) -> Check:
    return lambda v: None if v >= low else f"an int >= {low}"


def _between(low: int, high: int) -> Check:
    return lambda v: None if low <= v <= high else f"an int from {low} to {high}"


def _one_of(*choices: Any) -> Check:
    return lambda v: None if v in choices else "one of " + ", ".join(map(repr, choices))


def _multiple_of(k: int) -> Check:
    return lambda v: None if v >= k and v % k == 0 else f"a positive multiple of {k}"


def _bwd_tiles_name(v: Any) -> str | None:
    if v == "auto" or v in BWD_TILE_VARIANTS:
        return None
    return "'auto' or one of " + ", ".join(BWD_TILE_VARIANTS)


def _wgmma_tiles_pair(v: Any) -> str | None:
    ok = (
        isinstance(v, tuple)
        and len(v) == 2
        and all(type(x) is int for x in v)
        and 1 <= v[0] <= 4
        and 16 <= v[1] <= 256
        and v[1] % 16 == 0
    )
    return None if ok else "(warpgroups 1-4, keys per tile a multiple of 16 up to 256)"


def _table(
    value_check: Check, keys: Iterable[Any] | None = None, some_keys: Iterable[Any] | None = None
) -> Check:
    """A table whose keys are exactly ``keys`` (or any of ``some_keys``), every value passing
    ``value_check``."""
    want = None if keys is None else frozenset(keys)
    allowed = None if some_keys is None else frozenset(some_keys)
    if want is not None:
        shape = f"a table with the keys {_sorted(want)}"
    else:
        shape = f"a table with keys among {_sorted(allowed or ())}"

    def check(v: Any) -> str | None:
        if not isinstance(v, Mapping) or (want is not None and set(v) != want) or (
            allowed is not None and not set(v) <= allowed
        ):
            return shape
        for key, item in v.items():
            bad = value_check(item)
            if bad is not None:
                return f"{shape} whose values are {bad} (at {key!r}: {item!r})"
        return None

    return check


def _sorted(keys: Iterable[Any]) -> list[Any]:
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=repr)


def _short_causal(v: Any) -> str | None:
    ok = isinstance(v, tuple) and len(v) == 2 and type(v[0]) is int and v[0] >= 1
    if ok and _wgmma_tiles_pair(v[1]) is None:
        return None
    return "(most queries >= 1, (warpgroups, keys per tile))"


def _simt_tile(v: Any) -> str | None:
    ok = (
        isinstance(v, tuple)
        and len(v) == 4
        and all(type(x) is int for x in v)
        and v[0] >= 16
        and v[0] % 16 == 0
        and v[1] >= 16
        and v[1] % 16 == 0
        and v[2] in (1, 2)
        and v[3] >= 1
    )
    return None if ok else (
        "(rows per block and per tile multiples of 16, stages 1 or 2, minimum blocks >= 1)"
    )


_SIMT_KINDS = ("fwd", "dq", "dkdv", "fused")
_SIMT_CASES = (("float32", 64), ("float32", 128), ("float64", 64), ("float64", 128))
_WGMMA_DIMS = (64, 128)  # padded head dims of the Hopper kernels (static_asserts of their D)
_HEAD_DIMS = (32, 64, 96, 128)  # padded head dims of the attention kernels


def knob(default: Any, doc: str, check: Check | None = None, optional: bool = False) -> Any:
    """A setting of a family's dataclass: its default, what it chooses (``doc``, for the README
    table and :meth:`Tuning.knobs`), a value check beyond its type, and whether None is
    allowed (an optional int)."""
    if isinstance(default, Mapping):
        default = Table(default)
    return dataclasses.field(
        default=default, metadata={"doc": doc, "check": check, "optional": optional}
    )


def _kind(f: dataclasses.Field) -> type:  # type: ignore[type-arg]
    """The type a setting's values have: its default's (an optional one's: int)."""
    if f.metadata["optional"]:
        return int
    return Table if isinstance(f.default, Table) else type(f.default)


_KIND_NAMES = {bool: "True or False", int: "an int", str: "a str", Table: "a table (a mapping)"}


#: The families by name, in the order ``ignis.tuning()`` lists them (their declaration order).
FAMILIES: dict[str, type] = {}


class _FamilySettings:
    """What every family's settings share: checked on creation, hashed once, compared by
    identity first (plan keys hold them: a lookup must stay cheap). A family's class is
    declared as ``class XSettings(_FamilySettings, family="x")``: that makes it a frozen
    dataclass and adds it to :data:`FAMILIES`."""

    family: str = ""

    def __init_subclass__(cls, family: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.family = family
        # eq=False: __eq__ and the cached __hash__ of _FamilySettings stay
        dataclasses.dataclass(frozen=True, eq=False)(cls)
        FAMILIES[family] = cls

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, (Mapping, list)) and not isinstance(value, Table):
                value = _frozen_value(value)
                object.__setattr__(self, f.name, value)
            _check_value(self.family, f, value)
        values = tuple(getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_hash", hash((type(self).__name__, values)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values == other._values  # type: ignore[attr-defined, no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        # made again from the values: the hash (of strings) differs between processes
        return (type(self), self._values)  # type: ignore[attr-defined]

    def replace(self, **changes: Any) -> Any:
        """These settings with ``changes`` (setting name -> value), checked."""
        names = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        for name in changes:
            if name not in names:
                raise ValueError(
                    f"ignis.tuning: {self.family} has no setting {name!r}; expected one of "
                    f"{', '.join(names)}"
                )
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def differences(self) -> dict[str, Any]:
        """The settings that differ from their defaults: name -> value."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != f.default
        }


def _check_value(family: str, f: dataclasses.Field, value: Any) -> None:  # type: ignore[type-arg]
    where = f"ignis.tuning: {family}.{f.name} is {value!r}"
    if value is None and f.metadata["optional"]:
        return
    kind = _kind(f)
    if type(value) is not kind and not (kind is Table and isinstance(value, Table)):
        expected = _KIND_NAMES.get(kind, kind.__name__)
        if f.metadata["optional"]:
            expected += " or None"
        raise TypeError(f"{where}; expected {expected}")
    check = f.metadata["check"]
    bad = None if check is None else check(value)
    if bad is not None:
        raise ValueError(f"{where}; expected {bad}")


# --- the families --------------------------------------------------------------------------------


class AttentionSettings(_FamilySettings, family="attention"):
    """Fused attention (``cuda_src/attention.cu``, ``attention_sm90.cu``). Every choice gives
    the same results up to float32 summation order (and the fused backwards' order of dQ's
    atomic adds)."""

    fwd_rows_per_warp: int = knob(
        32,
        "float16/bfloat16 forward (mma.sync): queries per warp; 32 runs flash_fwd_tc_m32 "
        "(128 queries per block), 16 flash_fwd_tc (64)",
        _one_of(16, 32),
    )
    fwd_wgmma: bool = knob(
        True,
        "float16/bfloat16 forward on compute capability 9.0 at padded head dims 64 and 128: "
        "flash_fwd_wgmma (warpgroup MMA, TMA copies) instead of the mma.sync kernels",
    )
    wgmma_tiles: Table = knob(
        {64: (3, 128), 128: (2, 128)},
        "flash_fwd_wgmma's tiles by padded head dim: (warpgroups per block, 64 queries each; "
        "keys per tile)",
        _table(_wgmma_tiles_pair, keys=_WGMMA_DIMS),
    )
    wgmma_short_causal_tiles: Table = knob(
        {64: (2048, (2, 128))},
        "causal flash_fwd_wgmma forwards of few queries: padded head dim -> (most queries, "
        "tiles replacing wgmma_tiles')",
        _table(_short_causal, some_keys=_WGMMA_DIMS),
    )
    bwd_wgmma: bool = knob(
        True,
        "float16/bfloat16 fused backward on compute capability 9.0 at padded head dims 64 and "
        "128: flash_bwd_fused_wgmma instead of the mma.sync kernel of bwd_tiles",
    )
    bwd_fused_dq: bool = knob(
        True,
        "float16/bfloat16 backward: one pass adding dQ by float32 atomics (True), or the "
        "deterministic dK/dV and dQ passes (False)",
    )
    bwd_tiles: str = knob(
        "auto",
        "tiles of the float16/bfloat16 mma.sync dK/dV and fused backward: a variant name "
        "(k64q32w4, k128q32w8, k128q64w8, k128q32w8-b2-red2, k128q64w8-kv-red2) or 'auto' "
        "(bwd_tiles_auto)",
        _bwd_tiles_name,
    )
    bwd_tiles_auto: Table = knob(
        {
            32: "k128q32w8-b2-red2",
            64: "k128q32w8-b2-red2",
            96: "k128q64w8-kv-red2",
            128: "k128q64w8-kv-red2",
        },
        "what bwd_tiles='auto' runs at each padded head dim (the fastest on an H200)",
        _table(lambda v: None if v in BWD_TILE_VARIANTS else "tile variant names", _HEAD_DIMS),
    )
    simt_tiled: bool = knob(
        True,
        "float32/float64: the register-tiled scalar kernels (True) or the first ones (32 x 32 "
        "tiles, a row per warp)",
    )
    simt_fused_dq: bool = knob(
        False,
        "float32/float64 backward with the register-tiled kernels: one pass adding dQ by "
        "atomics (not bit-for-bit reproducible) instead of the deterministic two passes",
    )
    simt_tiles: Table = knob(
        {
            ("float32", 64): {
                "fwd": (64, 64, 2, 2),
                "dq": (64, 32, 2, 2),
                "dkdv": (64, 32, 2, 2),
                "fused": (64, 32, 2, 2),
            },
            ("float32", 128): {
                "fwd": (64, 32, 2, 2),
                "dq": (64, 32, 1, 2),
                "dkdv": (64, 32, 1, 1),
                "fused": (64, 32, 1, 1),
            },
            ("float64", 64): dict.fromkeys(_SIMT_KINDS, (64, 32, 1, 1)),
            ("float64", 128): dict.fromkeys(_SIMT_KINDS, (32, 32, 1, 1)),
        },
        "register-tiled scalar kernels' tiles per (dtype, padded head dim 64 or 128): kernel "
        "(fwd, dq, dkdv, fused) -> (rows per block, rows per streamed tile, stages, "
        "launch-bounds minimum blocks per SM)",
        _table(_table(_simt_tile, _SIMT_KINDS), _SIMT_CASES),
    )


class ReductionSettings(_FamilySettings, family="reduction"):
    """Reductions and arg-reductions (``cuda_src/reduction.cu``). Launch layouts differ in
    speed only: the same call on the same settings and device gives the same bits."""

    group_max_n: int = knob(
        1024, "rows up to this long: a group of 1-32 lanes per row (reduce_group); longer: a "
        "block per row (reduce_block)", _at_least(1)
    )
    group_wide_max_n: int = knob(
        8192, "... except rows up to this long when there are at least group_wide_min_rows of "
        "them: a warp each", _at_least(1)
    )
    group_wide_min_rows: int = knob(8192, "see group_wide_max_n", _at_least(1))
    group_pack_min: int = knob(
        4, "16-byte packs per lane at least, for a lane group to read 16-byte packs",
        _at_least(1)
    )
    target_blocks: int = knob(
        1024, "split reductions over several blocks until about this many blocks run",
        _at_least(1)
    )
    min_chunk: int = knob(
        8192, "fewest elements one block of a split row reduction takes", _at_least(16)
    )
    max_splits: int = knob(1024, "most blocks one output is split over", _at_least(1))
    strided_max: int = knob(
        1 << 20, "up to this many elements a strided layout is read in place; larger ones are "
        "copied to a contiguous temporary first", _at_least(0)
    )
    cols_wide: bool = knob(
        True, "column reductions (sum, mean, max, min, var) of a contiguous kept axis of at "
        "least cols_wide_min_bytes: reduce_cols_wide (True) or reduce_cols"
    )
    cols_wide_min_bytes: int = knob(512, "see cols_wide", _at_least(1))
    cols_wide_min_rows: int = knob(
        128, "fewest reduced rows one block of a reduce_cols_wide split takes", _at_least(1)
    )
    cols_wide_unit_cost: int = knob(
        16384, "reduce_cols_wide's split model: a block's fixed cost, in bytes it could have "
        "read", _at_least(0)
    )
    cols_wide_resident: int | None = knob(
        None, "reduce_cols_wide's split model: blocks resident at once (None: asked of the "
        "device; 396 where there is none)", _at_least(1), optional=True
    )


class SoftmaxSettings(_FamilySettings, family="softmax"):
    """Softmax and log-softmax (``cuda_src/softmax.cu``)."""

    warp_max_n: int = knob(
        1024, "rows up to this long: a warp per row, kept in registers (softmax_warp)",
        _at_least(1)
    )
    max_values: int = knob(
        32, "values one thread of softmax_block keeps in registers with float math and "
        "16-byte packs (32: the most that compile without spilling)", _at_least(1)
    )
    max_values_narrow: int = knob(
        8, "the same for wider math or single-element loads", _at_least(1)
    )
    packed: bool = knob(
        True, "float16/bfloat16 rows longer than packed_min_n: softmax_packed (the row kept "
        "in registers in its 16-bit form, two rows per SM) instead of softmax_block"
    )
    packed_min_n: int = knob(8192, "see packed", _at_least(1))
    packed_items: int = knob(
        8, "16-byte packs per thread of softmax_packed (8: the most that compile without "
        "spilling)", _at_least(1)
    )


class NormLossSettings(_FamilySettings, family="norm_loss"):
    """Layer norm, RMS norm, softmax backward and cross-entropy (``cuda_src/norm.cu``,
    ``cuda_src/cross_entropy.cu``)."""

    warp_max_n: int = knob(
        1024, "rows up to this long may go to a warp each (norms, softmax backward)",
        _at_least(1)
    )
    warp_bytes: int = knob(
        128, "warp rows: bytes of cached values (in the compute type) per lane", _at_least(1)
    )
    block_bytes: int = knob(64, "block rows: bytes of row data cached per thread", _at_least(1))
    block_bytes_of_data: bool = knob(
        True, "block_bytes count the data type's bytes (False: the compute type's, half the "
        "packs per thread for 16-bit rows)"
    )
    block_min_threads: int = knob(
        128, "block rows take fewer packs per thread rather than fewer threads than this",
        _at_least(1)
    )
    warp_rows_per_block: int = knob(4, "warp rows: warps (rows) per block", _between(1, 32))
    param_target_blocks: int = knob(
        1024, "weight/bias gradients: split the rows until about this many blocks run",
        _at_least(1)
    )
    param_min_rows: int = knob(
        64, "weight/bias gradients: fewest rows one split takes", _at_least(1)
    )
    param_vector_loads: bool = knob(
        True, "weight/bias gradients: 16-byte loads per lane (False: one element)"
    )
    param_block_y: int = knob(
        8, "weight/bias gradients: row lanes of a 32-lane block (at most 8: the kernel's "
        "shared tiles)", _between(1, 8)
    )
    ce_values: int = knob(
        16, "cross-entropy: about this many classes per thread of a row's block", _at_least(1)
    )


class ElementwiseSettings(_FamilySettings, family="elementwise"):
    """Element-wise ops, copies and fills (``cuda_src/elementwise.cu``)."""

    blocks_per_sm: int = knob(
        32, "grid cap per multiprocessor (threads loop over further elements)", _at_least(1)
    )
    transpose_min: int = knob(
        16, "copies that transpose: both transposed dims at least this long go through 32 x "
        "32 shared-memory tiles, else the strided copy", _at_least(1)
    )


class IndexingSettings(_FamilySettings, family="indexing"):
    """take, index_add, dropout and rope (``cuda_src/indexing.cu``, ``dropout.cu``,
    ``rope.cu``)."""

    take_rows_in_flight: int = knob(
        4, "rows a take thread loads at once (at most; halved while the grid is short)",
        _at_least(1)
    )
    take_min_blocks_per_sm: int = knob(
        24, "take: fewer rows per thread until the grid has this many blocks per "
        "multiprocessor (about 3 waves) or would pass blocks_per_sm", _at_least(0)
    )
    blocks_per_sm: int = knob(
        32, "grid cap per multiprocessor (kernels loop over further rows)", _at_least(1)
    )


class OptimSettings(_FamilySettings, family="optim"):
    """Multi-tensor optimizer kernels (``cuda_src/optim.cu``)."""

    chunk: int = knob(1 << 16, "elements per block of the multi-tensor kernels", _multiple_of(4))


class ActivationSettings(_FamilySettings, family="activation"):
    """Activation backward passes (``cuda_src/activation.cu``)."""

    blocks_per_sm: int = knob(
        16, "grid cap per multiprocessor (threads loop over further vectors)", _at_least(1)
    )


class MatmulSettings(_FamilySettings, family="matmul"):
    """The library's own matrix-product kernels (``cuda_src/matmul.cu``, ``gemm_sm90.cu``),
    which run where cuBLAS is absent or disabled. Every choice gives the same results up to
    float32 summation order."""

    wgmma: bool = knob(
        True,
        "float16/bfloat16 on compute capability 9.0 with operands TMA can read: gemm_wgmma "
        "(warpgroup MMA, TMA copies) instead of the mma.sync kernel gemm_tc",
    )
    wgmma_tile_n: int = knob(
        256,
        "gemm_wgmma's output tile: 128 x 128 (six ring buffers) or 128 x 256 (four)",
        _one_of(128, 256),
    )
    wgmma_persistent: bool = knob(
        True,
        "gemm_wgmma launches one block a multiprocessor, each looping over output tiles (the "
        "next tile's copies start while this one's are stored); off: one block a tile",
    )
    wgmma_tf32: bool = knob(
        True,
        "float32 products with TF32 allowed, on compute capability 9.0: gemm_wgmma on TF32 "
        "(an operand not K-major is copied so first) instead of the mma.sync TF32 kernel",
    )
