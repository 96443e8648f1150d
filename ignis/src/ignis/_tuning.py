"""Tuning: the settings that choose kernels and launch shapes, one immutable object per family.

Every choice the kernel families make that is not dictated by the data (which kernel of two
that give the same results, tile shapes, the thresholds between launch layouts, grid caps) is
a setting here: read, set for a block, set for good, and given at start-up by environment
variables. Each family's settings are a frozen, hashable dataclass; the code that plans a
family's launches reads its current settings once per plan and keys the plan on them, so a
change takes effect on the next call and changing back finds the earlier plans again.

Spelling: a family name, then a mapping of its settings' names to values::

    >>> import ignis
    >>> ignis.tuning().attention.simt_fused_dq             # read: every family, every setting
    False
    >>> with ignis.tuning(attention=dict(simt_fused_dq=True)):   # for a block
    ...     pass
    >>> previous = ignis.tuning.set(reduction=dict(cols_wide=False))   # for good
    >>> ignis.tuning.set(previous)                         # (set returns what it replaced)
    >>> ignis.tuning.reset()                               # the start-up settings again

``print(ignis.tuning())`` lists every setting with its default where it differs;
:meth:`Tuning.knobs` gives each one's family, name, value, default, environment variable and
what it chooses. At start-up ``IGNIS_TUNE_<FAMILY>_<NAME>`` (upper case, e.g.
``IGNIS_TUNE_ATTENTION_SIMT_FUSED_DQ=1``, ``IGNIS_TUNE_NORM_LOSS_WARP_MAX_N=512``) overrides
a default: booleans as 1/0, true/false, yes/no or on/off, integers in Python syntax, ``none``
for an unset optional integer, text as is, and tables as Python literals. A name or value
that is not valid is an error naming the variable, what it held and what was expected.

The families and their settings are declared in :mod:`ignis._tuning_families`; this module
holds the settings in force. They are process-wide (shared by every thread): a block swaps
them under a lock and puts back on exit what was in force when it began, so nested blocks
restore correctly; two threads that enter blocks at the same time see each other's settings.
"""

# ruff: noqa: F405  (the settings classes come from the star import of _tuning_families)
from __future__ import annotations

import ast
import dataclasses
import os
import threading
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from . import _tuning_families
from ._tuning_families import *  # noqa: F403  (the families' settings classes, re-exported)
from ._tuning_families import FAMILIES as _FAMILIES
from ._tuning_families import _check_value, _frozen_value, _kind

__all__ = [
    *(n for n in _tuning_families.__all__ if n not in ("FAMILIES", "knob")),
    "Settings",
    "Knob",
    "Tuning",
    "tuning",
    "current",
    "on_change",
    "from_environ",
    "ENV_PREFIX",
]

ENV_PREFIX = "IGNIS_TUNE_"


# --- every family together -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """The settings of every kernel family: what ``ignis.tuning()`` returns. Immutable and
    hashable; ``with settings:`` puts it in force for a block. ``print`` lists every setting,
    with its default where it differs."""

    attention: AttentionSettings = AttentionSettings()
    reduction: ReductionSettings = ReductionSettings()
    softmax: SoftmaxSettings = SoftmaxSettings()
    norm_loss: NormLossSettings = NormLossSettings()
    elementwise: ElementwiseSettings = ElementwiseSettings()
    indexing: IndexingSettings = IndexingSettings()
    optim: OptimSettings = OptimSettings()
    activation: ActivationSettings = ActivationSettings()
    matmul: MatmulSettings = MatmulSettings()

    def replace(self, **families: Any) -> Settings:
        """These settings with ``families`` changed: family name -> a mapping of setting
        names to values, or that family's settings object."""
        changed = {}
        for name, value in families.items():
            cls = _FAMILIES.get(name)
            if cls is None:
                raise ValueError(
                    f"ignis.tuning: no kernel family {name!r}; expected one of "
                    f"{', '.join(_FAMILIES)}"
                )
            if isinstance(value, cls):
                changed[name] = value
            elif isinstance(value, Mapping):
                changed[name] = getattr(self, name).replace(**value)
            else:
                raise TypeError(
                    f"ignis.tuning: {name}= takes a mapping of setting names to values (e.g. "
                    f"{name}=dict(...)) or a {cls.__name__}, got {type(value).__name__}"
                )
        return dataclasses.replace(self, **changed)

    def __enter__(self) -> Settings:
        with _lock:
            _saved.append(current)
            _install(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _install(_saved.pop())

    def __repr__(self) -> str:
        lines = []
        for family in _FAMILIES:
            settings = getattr(self, family)
            for f in dataclasses.fields(settings):
                value = getattr(settings, f.name)
                default = "" if value == f.default else f"  (default: {f.default!r})"
                lines.append(f"  {family}.{f.name} = {value!r}{default}")
        return "ignis.tuning(\n" + "\n".join(lines) + "\n)"


class Knob(NamedTuple):
    """One setting as :meth:`Tuning.knobs` lists it."""

    family: str
    name: str
    value: Any
    default: Any
    variable: str  # the environment variable that sets it at start-up
    doc: str  # what it chooses


def variable(family: str, name: str) -> str:
    """The environment variable of setting ``name`` of ``family``:
    ``IGNIS_TUNE_<FAMILY>_<NAME>``."""
    return f"{ENV_PREFIX}{family.upper()}_{name.upper()}"


# --- start-up values from the environment --------------------------------------------------------

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse(text: str, f: dataclasses.Field) -> Any:  # type: ignore[type-arg]
    """The value of environment text ``text`` for setting ``f`` (ValueError: not one)."""
    raw = text.strip()
    kind = _kind(f)
    if f.metadata["optional"] and raw.lower() in ("none", ""):
        return None
    if kind is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError("expected a boolean: 1, 0, true, false, yes, no, on or off")
    if kind is int:
        try:
            return int(raw, 0)
        except ValueError:
            raise ValueError(
                "expected an int" + (" or none" if f.metadata["optional"] else "")
            ) from None
    if kind is str:
        return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"expected a Python literal of a table like {dict(f.default)!r}"
        ) from None


def from_environ(environ: Mapping[str, str] | None = None) -> Settings:
    """The default settings with the ``IGNIS_TUNE_<FAMILY>_<NAME>`` variables of ``environ``
    (default: ``os.environ``) applied; ValueError for a name or value that is not valid.

    Example: ``from_environ({"IGNIS_TUNE_OPTIM_CHUNK": "4096"}).optim.chunk == 4096``.
    """
    env = os.environ if environ is None else environ
    known = {
        variable(family, f.name): (family, f)
        for family, cls in _FAMILIES.items()
        for f in dataclasses.fields(cls)
    }
    changes: dict[str, dict[str, Any]] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX):
            continue
        text = env[var]
        target = known.get(var)
        if target is None:
            raise ValueError(f"{var}: no such tuning setting; {_expected_variables(var, known)}")
        family, f = target
        try:
            value = _parse(text, f)
            changes.setdefault(family, {})[f.name] = value
            _check_value(family, f, _frozen_value(value))
        except (TypeError, ValueError) as e:
            reason = str(e).split("; ", 1)[-1]
            raise ValueError(f"{var}={text!r}: {reason}") from None
    return Settings().replace(**changes)


def _expected_variables(var: str, known: Mapping[str, Any]) -> str:
    """What a mistyped tuning variable could have been: its family's variables where the
    family part names one, else the scheme and the families."""
    for family in sorted(_FAMILIES, key=len, reverse=True):
        prefix = f"{ENV_PREFIX}{family.upper()}_"
        if var.startswith(prefix):
            names = [v for v, (fam, _) in known.items() if fam == family]
            return "expected one of " + ", ".join(names)
    families = ", ".join(f.upper() for f in _FAMILIES)
    return f"expected {ENV_PREFIX}<FAMILY>_<NAME> with FAMILY one of {families}"


# --- the current settings ------------------------------------------------------------------------

_lock = threading.RLock()
_saved: list[Settings] = []  # what each open block replaced, innermost last
_listeners: dict[str, list[Callable[[], None]]] = {family: [] for family in _FAMILIES}
_startup = from_environ()
#: The settings in force (replaced, never changed: read ``current.<family>`` once per plan).
current: Settings = _startup


def on_change(family: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever ``family``'s settings change (internal: caches that keep
    what the settings chose without keying on them, on paths too hot to read them, empty
    themselves)."""
    _listeners[family].append(callback)


def _install(settings: Settings) -> None:
    global current
    if not isinstance(settings, Settings):
        raise TypeError(
            f"ignis.tuning.set: expected the Settings of ignis.tuning(), got "
            f"{type(settings).__name__}"
        )
    with _lock:
        old, current = current, settings
        for family, callbacks in _listeners.items():
            if getattr(old, family) != getattr(settings, family):
                for callback in callbacks:
                    callback()


class Tuning:
    """``ignis.tuning``: the kernel families' settings (see the module notes of
    ``ignis._tuning`` and the README's Tuning table).

    * ``ignis.tuning()`` — the settings in force (every family; ``print`` lists them);
      ``ignis.tuning(attention=dict(simt_fused_dq=True))`` — them with changes, which
      ``with`` puts in force for a block.
    * ``ignis.tuning.set(...)`` — the same changes for good (or ``set(settings)``); returns
      the settings it replaced.
    * ``ignis.tuning.reset()`` / ``defaults()`` / ``knobs()`` — the start-up settings again,
      the built-in defaults, every setting described.

    Example::

        >>> with ignis.tuning(attention=dict(simt_fused_dq=True, bwd_tiles="k64q32w4")):
        ...     dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse)
    """

    def __call__(self, **families: Any) -> Settings:
        """The settings in force with ``families``' changes (family -> mapping of setting
        names to values); nothing changes until ``with`` or :meth:`set` uses them."""
        return current.replace(**families) if families else current

    def set(self, settings: Settings | None = None, /, **families: Any) -> Settings:
        """Put ``settings``, or the settings in force with ``families``' changes, in force
        for good (an enclosing ``with`` block still restores its own on exit). Returns the
        settings replaced. Example: ``ignis.tuning.set(indexing=dict(blocks_per_sm=16))``."""
        with _lock:
            old = current
            if settings is not None:
                if families:
                    raise TypeError("ignis.tuning.set: give settings or changes, not both")
                _install(settings)
            else:
                _install(current.replace(**families))
        return old

    def reset(self) -> Settings:
        """Put the start-up settings (the defaults with the ``IGNIS_TUNE_*`` variables) back
        in force; returns the settings replaced."""
        return self.set(_startup)

    def defaults(self) -> Settings:
        """The built-in defaults (without the environment)."""
        return Settings()

    def knobs(self) -> list[Knob]:
        """Every setting: family, name, value in force, default, environment variable and
        what it chooses (the README's table)."""
        return [
            Knob(family, f.name, getattr(getattr(current, family), f.name), f.default,
                 variable(family, f.name), f.metadata["doc"])
            for family, cls in _FAMILIES.items()
            for f in dataclasses.fields(cls)
        ]

    @property
    def families(self) -> tuple[str, ...]:
        """The kernel families' names."""
        return tuple(_FAMILIES)

    def __repr__(self) -> str:
        return repr(current)


#: The public object, ``ignis.tuning``.
tuning = Tuning()


# --- the module globals the settings replace -----------------------------------------------------


class _AliasedModule(types.ModuleType):
    """A kernel family's module whose former tuning globals still read and set the settings
    (a DeprecationWarning names the setting): ``attention.SIMT_FUSED_DQ = True`` acts as
    ``ignis.tuning.set(attention=dict(simt_fused_dq=True))``."""

    def __setattr__(self, name: str, value: Any) -> None:
        target = self.__dict__.get("_tuning_aliases", {}).get(name)
        if target is None:
            super().__setattr__(name, value)
            return
        family, knob_name = target
        _warn_alias(self.__name__, name, family, knob_name)
        tuning.set(**{family: {knob_name: value}})


def _warn_alias(module: str, name: str, family: str, knob_name: str) -> None:
    warnings.warn(
        f"{module}.{name} is ignis.tuning's {family}.{knob_name}: use "
        f"ignis.tuning({family}=dict({knob_name}=...)) or ignis.tuning.set(...)",
        DeprecationWarning,
        stacklevel=3,
    )


def keep_module_names(
    module: types.ModuleType,
    *families: str,
    prefixes: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
) -> None:
    """Let ``module``'s former tuning globals, ``<PREFIX><NAME>`` for every setting ``name`` of
    each of ``families`` but ``skip`` (``PREFIX``: ``prefixes[family]``, default none), read
    and set the settings they became, with a DeprecationWarning (internal: called by each
    family's module at import). Example: ``keep_module_names(module, "optim")`` makes
    ``module.CHUNK`` the ``optim.chunk`` setting."""
    table = {
        (prefixes or {}).get(family, "") + f.name.upper(): (family, f.name)
        for family in families
        for f in dataclasses.fields(_FAMILIES[family])
        if f.name not in skip
    }

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        _warn_alias(module.__name__, name, *target)
        return getattr(getattr(current, target[0]), target[1])

    module.__dict__["_tuning_aliases"] = table
    module.__dict__["__getattr__"] = __getattr__
    module.__class__ = _AliasedModule
