"""ignis._codegen: functions built from lines of source, and from the bodies of real functions
(the inliner and flatten)."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
from ignis._codegen import InlineError, Inliner, build_function, flatten


def test_a_built_function_reads_its_names_as_globals() -> None:
    source, scale = build_function(
        "scale", "x, y=1", ["return (x + y) * factor"], {"factor": 3}, "<test scale>"
    )
    assert scale(2) == 9 and scale(2, y=2) == 12
    assert source == "def scale(x, y=1):\n    return (x + y) * factor\n"
    assert scale.source == source  # kept for the inliner
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


# --- the inliner: real functions of this module, put inline ------------------------------------

TABLE: dict[int, int] = {1: 10}  # module state: read through the module at each call
CALLS: list[str] = []


def clamp(x: int, top: int) -> int:
    """An early return: the rest becomes the else."""
    if x > top:
        return top
    return x


def lookup(key: int, default: int = -1) -> int:
    try:
        value = TABLE[key]
    except KeyError:
        return default  # an early return from a handler: the rest becomes the try's else
    CALLS.append("lookup")
    return value


def scaled(x: int, top: int) -> int:
    y = clamp(x * 2, top)  # the value assigned to one name
    note(y)  # a statement of its own
    return lookup(y)  # the value returned


def note(value: int) -> None:
    CALLS.append(f"note {value}")


def made() -> list[int]:
    out = [1]
    out.append(2)
    return out  # the one local every return returns: it becomes the result


class Box:
    @classmethod
    def of(cls, value: int) -> Box:
        box = object.__new__(cls)
        box.value = value
        return box


def boxed(value: int) -> Box:
    return Box.of(value + 1)  # a bound classmethod: cls is bound to Box


def _run(lines: list[str], signature: str, result: str, names: dict | None = None):
    inliner = Inliner(names)
    _, fn = inliner.build("fn", signature, [*lines, f"return {result}"], "<test>")
    return fn


def test_an_inlined_body_binds_parameters_renames_locals_and_assigns_the_result() -> None:
    inliner = Inliner()
    lines = inliner.inline(clamp, ["v", "9"], result="w")
    assert lines == ["if v > 9:", "    w = 9", "else:", "    w = v"]
    _, fn = inliner.build("fn", "v", [*lines, "return w"], "<test clamp>")
    assert [fn(3), fn(12)] == [3, 9]
    # An argument that is not a name or a constant is evaluated once, first, as a call would.
    inliner = Inliner({"counter": iter(range(10, 20))})
    lines = inliner.inline(clamp, ["next(counter)", "top"], result="w")
    assert lines[0] == "x_1 = next(counter)"
    _, fn = inliner.build("fn", "top", [*lines, "return w"], "<test once>")
    assert [fn(100), fn(100), fn(5)] == [10, 11, 5]


def test_calls_of_listed_functions_run_inline_with_the_originals_results() -> None:
    inliner = Inliner()
    lines = inliner.inline(scaled, ["a", "b"], result="r", expand=[clamp, lookup, note])
    text = "\n".join(lines)
    assert "clamp(" not in text and "lookup(" not in text and "note(" not in text
    assert "test_codegen.TABLE[" in text  # module state, read through the module
    _, fn = inliner.build("fn", "a, b", [*lines, "return r"], "<test scaled>")
    for a, b in [(0, 5), (3, 1), (1, 7), (4, 3)]:
        CALLS.clear()
        expected = scaled(a, b)
        seen = list(CALLS)
        CALLS.clear()
        assert fn(a, b) == expected and CALLS == seen


def test_module_state_is_read_at_each_call_classes_and_functions_when_built(monkeypatch) -> None:
    inliner = Inliner()
    lines = inliner.inline(lookup, ["k"], result="r")
    _, fn = inliner.build("fn", "k", [*lines, "return r"], "<test state>")
    assert fn(1) == 10 and fn(2) == -1
    monkeypatch.setattr(sys.modules[__name__], "TABLE", {2: 20})  # a table replaced later
    assert fn(2) == 20
    assert "CALLS" not in inliner.names  # (a list is state too: read through the module)


def test_the_returned_local_becomes_the_result_and_a_bound_method_binds_its_first() -> None:
    inliner = Inliner()
    lines = inliner.inline(made, [], result="r")
    assert lines == ["r = [1]", "r.append(2)"]
    inliner = Inliner()
    lines = inliner.inline(boxed, ["v"], result="r", expand=[Box.of])
    assert "Box.of" not in "\n".join(lines) and inliner.names["Box"] is Box
    _, fn = inliner.build("fn", "v", [*lines, "return r"], "<test box>")
    box = fn(4)
    assert type(box) is Box and box.value == 5


def test_a_kept_local_is_the_callers_own_and_a_missing_one_is_refused() -> None:
    # lookup's local value, read by the caller after the inlined body (every path assigns it
    # where lookup returns it: the promise a kept local needs).
    inliner = Inliner()
    lines = inliner.inline(lookup, ["k"], result="r", keep={"value": "found"})
    assert "found = test_codegen.TABLE[k]" in lines[1]
    with pytest.raises(InlineError, match=r"inline lookup: no local missing to keep"):
        Inliner().inline(lookup, ["k"], result="r", keep={"missing": "m"})


def test_a_generated_function_is_inlined_from_its_own_source_and_names() -> None:
    _, add = build_function("add", "x", ["return x + k"], {"k": 3}, "<test add>")
    inliner = Inliner()
    lines = inliner.inline(add, ["v"], result="r")
    assert lines == ["r = v + k"] and inliner.names["k"] == 3


def loops(items: list[int]) -> int:
    for item in items:
        if item:
            return item
    return 0


def both_ways(x: int) -> int:
    if x:
        if x > 1:
            return 2
    elif x is None:
        return 0
    return 1  # reached from both branches: the rest would have to be written twice


def comprehension(xs: list[int]) -> list[int]:
    return [x for x in xs]


def nested_call(x: int) -> int:
    return clamp(x, 3) + 1  # inside an expression: cannot run inline


def starred(*args: int) -> int:
    return len(args)


@pytest.mark.parametrize(
    "function,expand,message",
    [
        (loops, [], r"inline loops: a return inside the for at line \d+"),
        (both_ways, [], r"inline both_ways: the if at line \d+ returns on some paths"),
        (comprehension, [], r"inline comprehension: ListComp at line \d+ is not taken"),
        (nested_call, [clamp], r"the call of clamp at line \d+ is inside an expression"),
        (starred, [], r"inline starred: \*args and \*\*kwargs are not taken"),
    ],
)
def test_what_the_inliner_does_not_take_is_refused_by_name_and_line(
    function, expand, message
) -> None:
    with pytest.raises(InlineError, match=message):
        Inliner().inline(function, ["a"], result="r", expand=expand)


def test_build_refuses_a_local_named_like_a_global() -> None:
    inliner = Inliner({"x_1": 5})
    lines = inliner.inline(clamp, ["next(it)", "2"], result="r")  # assigns the local x_1
    with pytest.raises(InlineError, match=r"build fn: x_1 named both a local and a global"):
        inliner.build("fn", "it", [*lines, "return r"], "<test clash>")


# --- flatten -------------------------------------------------------------------------------------


def flat_source(key: int, top: int = 4) -> int:
    """Docstring kept."""
    x = clamp(key, top)
    return lookup(x)


flattened = flatten(clamp, lookup)(flat_source)


def test_a_flattened_function_agrees_with_the_original_and_keeps_its_face(monkeypatch) -> None:
    assert flattened.__name__ == "flat_source" and flattened.__doc__ == "Docstring kept."
    assert flattened.__wrapped__ is flat_source and flattened.__defaults__ == (4,)
    # It runs in this module's namespace: its names read as the original's do.
    assert flattened.__globals__ is globals()
    assert "clamp(" not in flattened.source and "lookup(" not in flattened.source
    for key, top in [(1, 4), (7, 4), (0, 9), (1, 0)]:
        CALLS.clear()
        expected = flat_source(key, top)
        seen = list(CALLS)
        CALLS.clear()
        assert flattened(key, top) == expected and CALLS == seen
    monkeypatch.setattr(sys.modules[__name__], "TABLE", {4: 40})
    assert flattened(9) == flat_source(9) == 40
    # Defined in the module's namespace while it was made, and taken out again.
    assert globals()["flat_source"] is flattened.__wrapped__


def test_a_function_without_source_is_left_as_it_is() -> None:
    # An installation without .py files: flatten cannot read the body, and the function runs
    # unflattened (correct, a few calls slower).
    namespace = globals()
    exec(compile("def sourceless(x):\n    return clamp(x, 2)\n", "<nowhere>", "exec"), namespace)
    sourceless = namespace.pop("sourceless")
    assert flatten(clamp)(sourceless) is sourceless and sourceless(5) == 2
