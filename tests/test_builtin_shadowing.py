"""The modules that hold the op tables' functions as globals (``abs``, ``all``, ``any``,
``max``, ``min``, ``pow``, ``round``, ``sum``) never call such a name meaning the builtin: each
bare call of a shadowed builtin's name there must be the table's function on purpose, so none
is allowed (code calls ``builtins.<name>``)."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect

import pytest

MODULES = ["ignis._array._ops", "ignis_autograd.functional", "ignis", "ignis_autograd"]


@pytest.mark.parametrize("name", MODULES)
def test_no_bare_call_of_a_shadowed_builtin(name: str) -> None:
    module = importlib.import_module(name)
    shadowed = {
        n for n, v in vars(module).items()
        if hasattr(builtins, n) and v is not getattr(builtins, n) and not n.startswith("__")
    }
    tree = ast.parse(inspect.getsource(module))
    calls = [
        (node.func.id, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in shadowed
    ]
    assert not calls, f"{name} calls shadowed builtins {calls}; write builtins.<name>"


def test_the_check_sees_the_shadowing() -> None:
    # not vacuous: these modules do hold table functions under builtin names
    import ignis_autograd.functional as functional

    assert functional.any is not builtins.any and functional.round is not builtins.round
