"""ignis._codegen: functions built from lines of source, and the globals of assembled lines."""

from __future__ import annotations

import gc
import weakref

import pytest
from ignis._codegen import build_function, merged_names


def test_a_built_function_reads_its_names_as_globals() -> None:
    source, scale = build_function(
        "scale", "x, y=1", ["return (x + y) * factor"], {"factor": 3}, "<test scale>"
    )
    assert scale(2) == 9 and scale(2, y=2) == 12
    assert source == "def scale(x, y=1):\n    return (x + y) * factor\n"
    assert scale.__code__.co_filename == "<test scale>"
    # Its globals are a copy: a later change to the dict handed in is not seen.
    names = {"factor": 2}
    _, double = build_function("double", "x", ["return x * factor"], names, "<test double>")
    names["factor"] = 5
    assert double(4) == 8


def test_a_built_function_is_freed_with_its_last_reference() -> None:
    # Not kept alive by its own globals (a cycle only the collector would break).
    class Payload:
        pass

    payload = Payload()
    _, fn = build_function("get", "", ["return payload"], {"payload": payload}, "<test get>")
    assert fn() is payload
    ref = weakref.ref(payload)
    gc.disable()
    try:
        del fn, payload
        assert ref() is None
    finally:
        gc.enable()


def test_merged_names_take_every_part_and_refuse_two_values_for_one_name() -> None:
    shared = object()
    assert merged_names({"a": 1, "s": shared}, {"b": 2, "s": shared}) == {
        "a": 1,
        "s": shared,
        "b": 2,
    }
    with pytest.raises(ValueError, match=r"merged_names: 'device' is bound to two different"):
        merged_names({"device": object()}, {"device": object()})
