"""Python functions generated from source: the hot paths that must not pay for calls.

A call of a Python function costs an op on the GPU a few percent of its host time, and more
with the real driver than the numbers of a bare loop suggest: the driver's own work between two
launches evicts the caller's code and frames from the CPU caches. So the paths that every launch
or every array op runs are generated, as one function per use, with the values they need bound
as its globals:

* code written for a signature (a kernel's launcher, its argument packing) is assembled from
  lines and compiled by :func:`build_function`;
* code made of other functions (the allocation of an op's result, the one-call op results) is
  taken from the *real functions* the general path calls: :class:`Inliner` puts their bodies
  inline, and :func:`flatten` makes a function whose listed calls run inline. The text of such
  a piece exists once, in a function that is linted, tested and run like any other; the fast
  code is built from it at run time, so the two cannot drift apart.

What the inliner takes (anything else raises :class:`InlineError`, naming the function, the
construct and its line): a function without ``*args``/``**kwargs``, nested scopes
(``lambda``, comprehensions, ``def``), ``global``/``nonlocal``, ``yield``/``await``, imports or
``super()``, whose ``return`` statements end a path (the last statement, the branches of a
final ``if`` or ``try``) or return early: from an ``if`` whose body ends in a return (the rest
of the function becomes its ``else``) or from an ``except`` clause of a ``try`` whose clauses
all end in one (the rest becomes the ``try``'s ``else``). A call runs inline where it is a
statement of its own, the value assigned to one name, or the value returned. Parameters are
bound to the caller's expressions (a name or a constant is used as it is, anything else is
evaluated once, first, into a local); locals are renamed ``<name>_<n>`` (names of that form
belong to inlined code), except the one local every return returns, which becomes the
caller's result. A global of a module's function that is a class, a function, a builtin, a
module or a thread-local namespace is bound as it is when the code is built; any other global
(tables, counters, settings: what tests and device switches replace) is read through its
module at each call, as the function itself reads it. Globals of a generated function (its
own namespace, which nothing changes) are bound as they are. A flattened function runs in its
module's namespace instead: its own module's globals read as written, another module's through
that module; a call whose value it returns keeps the callee's returns.

Example (``clamp`` defined in a module: the inliner reads its source)::

    >>> _, add = build_function("add", "x", ["return x + k"], {"k": 2}, "<example>")
    >>> add(1)
    3
    >>> def clamp(x, top):
    ...     if x > top:
    ...         return top
    ...     return x
    >>> inliner = Inliner()
    >>> print("\\n".join(inliner.inline(clamp, ["v", "9"], result="w")))
    if v > 9:
        w = 9
    else:
        w = v
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import linecache
import sys
import textwrap
import threading
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from . import _caches

__all__ = ["build_function", "build_api", "Inliner", "InlineError", "NoSource", "flatten"]

F = TypeVar("F", bound=Callable[..., Any])


@functools.lru_cache(maxsize=256)
def _compiled(source: str, filename: str) -> types.CodeType:
    # The same kernel loaded again (another device, another Kernel object) compiles once.
    return compile(source, filename, "exec")


def _register_lru(name: str, cache: Any, description: str) -> None:
    """Register the ``functools.lru_cache`` function ``cache`` with :mod:`ignis._caches`."""
    _caches.register(
        name,
        lambda: cache.cache_info().currsize,
        clear=cache.cache_clear,
        max_entries=cache.cache_parameters()["maxsize"],
        description=description,
        stats=lambda: cache.cache_info()[:2],
    )


_register_lru("codegen.compiled", _compiled, "generated source -> its Python code object")


def build_function(
    name: str, signature: str, body: Sequence[str], names: Mapping[str, Any], filename: str
) -> tuple[str, Callable[..., Any]]:
    """Compile ``def name(signature): body`` with ``names`` as its globals: ``(source, function)``.

    ``filename`` shows in tracebacks; the source is returned for them and for tests, and kept
    as the function's ``source`` attribute (what :class:`Inliner` reads of a generated function).
    """
    source = f"def {name}({signature}):\n" + "".join(f"    {line}\n" for line in body)
    namespace = dict(names)
    exec(_compiled(source, filename), namespace)  # noqa: S102 - generated above
    # Taken out of its own globals: a function there would keep itself (and whatever its
    # globals hold) alive until the cycle collector runs.
    function = namespace.pop(name)
    function.source = source
    return source, function


Source = tuple[str, Sequence[str]]  # a generated function's signature and body


def build_api(
    name: str,
    doc: str,
    function: Source,
    methods: Mapping[str, Source],
    names: Mapping[str, Any],
    filename: str,
    module: str,
    owner: type,
) -> Callable[..., Any]:
    """Compile an op's public function ``module.name`` from ``function`` and its methods of the
    class ``owner`` from ``methods`` (method name -> signature and body), all with ``doc`` and
    the globals ``names``; sets the methods on ``owner`` and returns the function.

    Example: ``build_api("exp", doc, ("x", ["return _unary('exp', x)"]), {}, names,
    "<ignis op exp>", "ignis", NvArray)``.
    """
    fn = build_function(name, function[0], function[1], names, filename)[1]
    fn.__doc__, fn.__module__ = doc, module
    for mname, (signature, body) in methods.items():
        method = build_function(mname, signature, body, names, filename)[1]
        method.__doc__, method.__qualname__ = doc, f"{owner.__name__}.{mname}"
        setattr(owner, mname, method)
    return fn


# --- the inliner --------------------------------------------------------------------------------


class InlineError(ValueError):
    """A function the inliner cannot put inline, or assembled names that would clash."""


class NoSource(InlineError):
    """The source of a function is not at hand (an installation without ``.py`` files): what
    would run it inline runs it as it is (:func:`flatten`) or takes the general path."""


# Globals bound as they are when the code is built (see the module notes); the rest is read
# through its module at each call.
_FIXED = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, threading.local)
# Nested scopes, scope declarations, generators, coroutines and imports: not taken.
_REFUSED = tuple(
    getattr(ast, name)
    for name in "FunctionDef AsyncFunctionDef ClassDef Lambda ListComp SetComp DictComp "
    "GeneratorExp Global Nonlocal Yield YieldFrom Await Import ImportFrom AsyncFor "
    "AsyncWith".split()
)
_SIMPLE = (type(None), bool, int, float, str)  # defaults and bound values written as constants


def _label(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


@functools.lru_cache(maxsize=256)
def _real_source(code: types.CodeType) -> str:
    """The text of the function of ``code``, from its file (decorators included, dedented).

    Read as the lines from its first to its last (``co_lines``), then the lines indented
    deeper than its ``def`` that follow: cheaper than ``inspect.getsource``, which tokenizes,
    and the flattened functions of the runtime are made at import.
    """
    lines = linecache.getlines(code.co_filename)
    last = max((line for _, _, line in code.co_lines() if line is not None), default=0)
    first = code.co_firstlineno
    if not lines or not first <= last <= len(lines):
        raise NoSource(f"inline {code.co_name}: no source in {code.co_filename!r}")
    indent = len(lines[first - 1]) - len(lines[first - 1].lstrip())
    while last < len(lines) and (
        not lines[last].strip() or len(lines[last]) - len(lines[last].lstrip()) > indent
    ):
        last += 1
    return textwrap.dedent("".join(lines[first - 1 : last]))


_register_lru("codegen.sources", _real_source, "function code -> its source text, for the inliner")


def _definition(function: Callable[..., Any]) -> ast.FunctionDef:
    """``function``'s definition to rewrite (a fresh parse, without its docstring): from its
    ``source`` attribute (generated functions, see build_function) or its file."""
    source = function.__dict__.get("source")
    if source is None:
        source = _real_source(function.__code__)
    tree = ast.parse(source)
    definition = tree.body[0] if len(tree.body) == 1 else None
    label = _label(function)
    if not isinstance(definition, ast.FunctionDef):
        raise InlineError(f"inline {label}: its source is not one function definition")
    if definition.args.vararg or definition.args.kwarg:
        raise InlineError(f"inline {label}: *args and **kwargs are not taken")
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        definition.body = body[1:] or [ast.Pass()]  # the docstring
    return definition


def _module_of(function: Callable[..., Any]) -> types.ModuleType | None:
    """The module whose namespace ``function`` runs in; None for a namespace of its own."""
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    return module if module is not None and module.__dict__ is function.__globals__ else None


def _params(definition: ast.FunctionDef) -> list[str]:
    args = definition.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


class _Scan:
    """One walk over a body: the names it assigns (its locals, beside its parameters), every
    name it reads or assigns, its except clauses and its calls. Refuses what the inliner does
    not take (see the module notes)."""

    def __init__(self, statements: list[ast.stmt], label: str):
        self.assigned: set[str] = set()
        self.names: list[ast.Name] = []
        self.handlers: list[ast.ExceptHandler] = []
        self.calls: list[ast.Call] = []
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name):
                    self.names.append(node)
                    if not isinstance(node.ctx, ast.Load):
                        self.assigned.add(node.id)
                    elif node.id in ("super", "__class__"):
                        raise InlineError(
                            f"inline {label}: super() at line {node.lineno} is not taken"
                        )
                elif isinstance(node, ast.Call):
                    self.calls.append(node)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.handlers.append(node)
                    self.assigned.add(node.name)
                elif isinstance(node, _REFUSED):
                    raise InlineError(
                        f"inline {label}: {type(node).__name__} at line {node.lineno} is not taken"
                    )


def _plain(expr: ast.expr) -> bool:
    """Whether a parameter bound to ``expr`` can read it where it is used: a name (or the text
    of one, see _Scan's renaming) or a constant, which evaluate to the same value anywhere."""
    if isinstance(expr, ast.Name):
        return expr.id.isidentifier()
    return isinstance(expr, ast.Constant) and type(expr.value) in _SIMPLE


def _text(expr: ast.expr) -> str:
    """The source of a :func:`_plain` expression."""
    if isinstance(expr, ast.Name):
        return expr.id
    assert isinstance(expr, ast.Constant)
    value = expr.value
    text = repr(value)
    return f"({text})" if type(value) in (int, float) and value < 0 else text


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists inside ``statement`` (a return is a statement: only these hold one)."""
    blocks = [getattr(statement, f, None) for f in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(statement, "handlers", ())]
    return [b for b in blocks if isinstance(b, list)]


def _has_return(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Return):
        return True
    return any(_has_return(s) for block in _blocks(statement) for s in block)


def _returned(statements: list[ast.stmt]) -> str | None:
    """The name every return in ``statements`` returns, if they all return one name."""
    found: set[str | None] = set()

    def visit(block: list[ast.stmt]) -> None:
        for statement in block:
            if isinstance(statement, ast.Return):
                value = statement.value
                found.add(value.id if isinstance(value, ast.Name) else None)
            for inner in _blocks(statement):
                visit(inner)

    visit(statements)
    return found.pop() if len(found) == 1 else None


def _ends(statements: list[ast.stmt]) -> bool:
    """Whether every path through ``statements`` ends in a return or a raise."""
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _ends(last.body) and _ends(last.orelse)
    if isinstance(last, ast.Try):
        return _ends(last.orelse or last.body) and all(_ends(h.body) for h in last.handlers)
    return False


class Inliner:
    """Assembles one generated function from lines of its own and the bodies of functions.

    ``names``: the globals of the caller's own lines; ``locals``: the locals those lines
    assign (the inlined code's globals are named around both). Each :meth:`inline` returns
    lines and adds the globals they use to :attr:`names`; :meth:`build` compiles the function.
    See the module notes for what is taken and how names are bound.

    Example::

        >>> inliner = Inliner({"device": gpu}, locals=("out",))
        >>> body = [*inliner.inline(_result_block, ["4000", "device"], result="buffer"), ...]
        >>> _, fn = inliner.build("direct", "x", body, "<ignis direct>")
    """

    def __init__(self, names: Mapping[str, Any] | None = None, locals: Iterable[str] = ()):
        self.names: dict[str, Any] = dict(names or {})
        self._reserved = set(locals)
        self._builtins: set[str] = set()  # builtins the inlined code reads by name
        self._made: set[str] = set()  # the locals of the inlined code
        self._count = 0
        # flatten: the namespace of the module the generated function runs in (None: its own).
        self._home: dict[str, Any] | None = None

    def inline(
        self,
        function: Callable[..., Any],
        args: Sequence[str],
        result: str | None = None,
        *,
        expand: Iterable[Callable[..., Any]] = (),
        keep: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The lines that run ``function(*args)`` here: ``args`` are expressions of the
        caller's scope, one per parameter (defaults fill the rest); the return value is left
        in the local ``result`` (None: dropped). Calls of the functions in ``expand`` in its
        body run inline too (and theirs). ``keep``: locals of ``function`` the caller reads
        afterwards -> the names it reads them as (a local every path assigns: that is the
        function's documented promise, which the caller relies on)."""
        definition = _definition(function)
        params = _params(definition)
        if len(args) > len(params):
            raise InlineError(
                f"inline {_label(function)}: {len(args)} arguments for {len(params)} parameters"
            )
        given = {p: ast.parse(a, mode="eval").body for p, a in zip(params, args, strict=False)}
        bound = self._bind_params(function, definition, given)
        statements = self._body(
            function, definition, bound, result, _functions(expand), keep=keep or {}
        )
        return _lines(statements)

    def build(
        self, name: str, signature: str, body: Sequence[str], filename: str
    ) -> tuple[str, Callable[..., Any]]:
        """:func:`build_function` of ``body`` with :attr:`names`; refuses a local (of the
        inlined code, or one the caller declared) that a global is named like (one would hide
        the other)."""
        clash = sorted(
            {n for n in self._made | self._reserved if n in self.names}
            | {n for n in self._builtins if n in self.names and self.names[n] is not _builtin(n)}
        )
        if clash:
            raise InlineError(f"build {name}: {', '.join(clash)} named both a local and a global")
        return build_function(name, signature, body, self.names, filename)

    # --- internals

    def _next(self) -> int:
        self._count += 1
        return self._count

    def _bind(self, hint: str, value: Any) -> str:
        """The global name ``value`` is bound under (``hint`` where free)."""
        name, n = hint, 1
        while (
            (name in self.names and self.names[name] is not value)
            or name in self._reserved
            or (hasattr(builtins, name) and _builtin(name) is not value)
        ):
            n += 1
            name = f"{hint}_g{n}"
        self.names[name] = value
        return name

    def _value(self, hint: str, value: Any) -> ast.expr:
        if type(value) in _SIMPLE:
            return ast.Constant(value)
        if self._home is not None:
            return ast.Name(self._home_name(value, f"the value of {hint}"), ast.Load())
        return ast.Name(self._bind(getattr(value, "__name__", hint), value), ast.Load())

    def _home_name(self, value: Any, what: str) -> str:
        """The name the home module binds ``value`` to (flatten adds none to a module)."""
        assert self._home is not None
        for name, bound in self._home.items():
            if bound is value and not name.startswith("__") and name not in self._reserved:
                return name
        raise InlineError(f"flatten: {what} has no name in {self._home.get('__name__')}")

    def _global(self, function: Callable[..., Any], name: str) -> str:
        """The source that reads ``function``'s global ``name`` here (see the module notes)."""
        namespace, module = function.__globals__, _module_of(function)
        if self._home is not None and name in self._reserved:
            raise InlineError(
                f"flatten: {_label(function)} reads the global {name!r}, a local of the "
                "function flattened"
            )
        if namespace is self._home:  # the module the code runs in: as the function reads it
            return name
        if self._home is not None:  # another module's, from the home module's namespace
            value = namespace.get(name, _NONE)
            if value is _NONE and hasattr(builtins, name) and name not in self._home:
                return name
            if module is None:
                raise InlineError(f"flatten: {_label(function)} runs in a namespace of its own")
            if isinstance(value, _FIXED):
                try:
                    return self._home_name(value, name)
                except InlineError:
                    pass
            return f"{self._home_name(module, f'module {module.__name__}')}.{name}"
        if name in namespace:
            value = namespace[name]
            if module is None or isinstance(value, _FIXED):
                return self._bind(name, value)
        elif hasattr(builtins, name):
            self._builtins.add(name)
            return name
        elif module is None:
            raise InlineError(f"inline {_label(function)}: {name!r} is not defined")
        # Read through the module at each call (defined later, or state that is replaced).
        return f"{self._bind(module.__name__.rpartition('.')[2], module)}.{name}"

    def _bind_params(
        self,
        function: Callable[..., Any],
        definition: ast.FunctionDef,
        given: dict[str, ast.expr],
    ) -> dict[str, ast.expr]:
        """Every parameter's expression: ``given``, else the default."""
        args = definition.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        defaults = dict(
            zip(reversed(positional), reversed(function.__defaults__ or ()), strict=False)
        )
        defaults.update(function.__kwdefaults__ or {})
        bound = {}
        for param in _params(definition):
            if param in given:
                bound[param] = given[param]
            elif param in defaults:
                bound[param] = self._value(param, defaults[param])
            else:
                raise InlineError(f"inline {_label(function)}: no value for {param!r}")
        return bound

    def _body(
        self,
        function: Callable[..., Any],
        definition: ast.FunctionDef,
        bound: dict[str, ast.expr] | None,
        result: str | None,
        expand: tuple[Callable[..., Any], ...],
        tail: bool = False,
        keep: Mapping[str, str] = types.MappingProxyType({}),
    ) -> list[ast.stmt]:
        """``function``'s body, rewritten to run here. ``bound``: each parameter's expression
        (None: the body of the generated function itself, :func:`flatten`: parameters, locals
        and returns stay as they are). ``tail``: the call was the value returned by the
        generated function, so the body's returns stay returns. ``keep``: see :meth:`inline`."""
        body, label = definition.body, _label(function)
        scan = _Scan(body, label)
        local = scan.assigned.union(_params(definition))
        marked, callees = self._mark_calls(function, scan.calls, local, expand)
        text: dict[str, str] = {}  # local or parameter -> what it reads as here
        first: list[ast.stmt] = []
        if bound is None:
            text = {name: name for name in local}
            self._reserved.update(local)
        else:
            n = self._next()
            for param, expr in bound.items():
                if param in scan.assigned or not _plain(expr):
                    text[param] = f"{param}_{n}"  # evaluated once, first, as a call would
                    first.append(_assign(text[param], expr))
                    self._made.add(text[param])
                else:
                    text[param] = _text(expr)
            returned = _returned(body) if result is not None and _ends(body) and not tail else None
            missing = set(keep).difference(scan.assigned).union(set(keep).intersection(bound))
            if missing:
                raise InlineError(f"inline {label}: no local {', '.join(sorted(missing))} to keep")
            for name in scan.assigned.difference(bound):
                if name in keep:
                    text[name] = keep[name]  # the caller's own local
                elif name == returned and result not in text.values():
                    text[name] = result  # what every return returns: assigned there directly
                else:
                    text[name] = f"{name}_{n}"
                    self._made.add(text[name])
        # Renamed in place: a name's text is what unparse writes (a global read through its
        # module reads as "module.name", a parameter bound to a constant as the constant).
        for node in scan.names:
            if id(node) not in callees:  # (what an inlined call names is never read)
                new = text.get(node.id)
                node.id = new if new is not None else self._global(function, node.id)
        for handler in scan.handlers:
            handler.name = text[handler.name]
        if bound is not None and (tail or result is not None) and not _ends(body):
            body.append(ast.Return(None))  # falling off the end returns None
        if bound is not None and not tail:
            body = _returns_to(body, result, label)
        body = self._expand(first + body, expand)
        for call in marked:
            if hasattr(call, "_inline"):  # not taken by _expand
                callee, _, line, _ = call._inline
                raise InlineError(
                    f"inline {label}: the call of {_label(callee)} at line {line} is inside an "
                    "expression; only a call that is a statement, the value assigned to one "
                    "name or the value returned runs inline"
                )
        return body

    def _mark_calls(
        self,
        function: Callable[..., Any],
        calls: list[ast.Call],
        local: set[str],
        expand: tuple[Callable[..., Any], ...],
    ) -> tuple[list[ast.Call], set[int]]:
        """Mark the calls of ``expand``'s functions (``call._inline``: the function, the value
        its first parameter is bound to for a bound method, the line), before renaming; the
        marked calls and the ids of the names their callee expressions hold."""
        marked, callees = [], set()
        for node in calls if expand else ():
            target = _resolve(node.func, function.__globals__, local)
            if target is not None:
                callee, first = _unbound(target)
                if any(callee is e for e in expand):
                    node._inline = (callee, first, node.lineno, _label(function))
                    marked.append(node)
                    callees.update(id(name) for name in ast.walk(node.func))
        return marked, callees

    def _expand(
        self, statements: list[ast.stmt], expand: tuple[Callable[..., Any], ...]
    ) -> list[ast.stmt]:
        """``statements`` with the marked calls in statement positions put inline."""
        if not expand:
            return statements
        out: list[ast.stmt] = []
        for statement in statements:
            value = getattr(statement, "value", None)
            marked = getattr(value, "_inline", None) if isinstance(value, ast.Call) else None
            if marked and isinstance(statement, ast.Expr):
                out += self._call(value, None, expand)
            elif (
                marked
                and isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)
            ):
                out += self._call(value, statement.targets[0].id, expand)
            elif marked and isinstance(statement, ast.Return):  # (returns of the function built)
                out += self._call(value, None, expand, tail=True)
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list) and inner:
                        inner = self._expand(inner, expand)
                        if field == "body" and not inner:
                            inner = [ast.Pass()]
                        setattr(statement, field, inner)
                for handler in getattr(statement, "handlers", ()):
                    handler.body = self._expand(handler.body, expand) or [ast.Pass()]
                out.append(statement)
        return out

    def _call(
        self,
        call: ast.Call,
        result: str | None,
        expand: tuple[Callable[..., Any], ...],
        tail: bool = False,
    ) -> list[ast.stmt]:
        callee, first, line, caller = call._inline
        del call._inline  # taken
        definition = _definition(callee)
        params = _params(definition)
        positional = list(call.args)
        if first is not _NONE:
            positional.insert(0, self._value(params[0] if params else "self", first))
        if len(positional) > len(params) or any(isinstance(a, ast.Starred) for a in positional):
            raise InlineError(f"inline {caller}: the call of {_label(callee)} at line {line}")
        given = dict(zip(params, positional, strict=False))
        for keyword in call.keywords:
            if keyword.arg is None or keyword.arg in given or keyword.arg not in params:
                raise InlineError(f"inline {caller}: the call of {_label(callee)} at line {line}")
            given[keyword.arg] = keyword.value
        bound = self._bind_params(callee, definition, given)
        return self._body(callee, definition, bound, result, expand, tail)


_NONE: Any = object()  # no first parameter bound: a plain function


def _functions(expand: Iterable[Callable[..., Any]]) -> tuple[Callable[..., Any], ...]:
    return tuple(_unbound(f)[0] for f in expand)


def _unbound(target: Any) -> tuple[Any, Any]:
    """A bound method's function and the value of its first parameter; else ``(target, _NONE)``."""
    if isinstance(target, types.MethodType):
        return target.__func__, target.__self__
    return target, _NONE


def _resolve(func: ast.expr, namespace: dict[str, Any], local: set[str]) -> Any:
    """What a call's ``name`` or ``name.attr...`` is in ``namespace``; None for a local's."""
    path = []
    while isinstance(func, ast.Attribute):
        path.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id in local:
        return None
    try:
        value = namespace[func.id] if func.id in namespace else getattr(builtins, func.id)
        for attr in reversed(path):
            value = getattr(value, attr)
    except AttributeError:
        return None
    return value


def _builtin(name: str) -> Any:
    return getattr(builtins, name, _NONE)


def _returns_to(statements: list[ast.stmt], result: str | None, label: str) -> list[ast.stmt]:
    """``statements`` with each return turned into ``result = value`` (see the module notes for
    where a return may be)."""
    out: list[ast.stmt] = []
    for i, statement in enumerate(statements):
        if isinstance(statement, ast.Return):
            out += _assignment(result, statement.value)
            return out  # anything after it never runs
        if not _has_return(statement):
            out.append(statement)
            continue
        rest = statements[i + 1 :]
        if isinstance(statement, ast.If):
            if rest:  # the early return: the rest runs where the if does not return
                if _ends(statement.body):
                    statement.orelse = statement.orelse + rest
                elif statement.orelse and _ends(statement.orelse):
                    statement.body = statement.body + rest
                else:
                    raise InlineError(
                        f"inline {label}: the if at line {statement.lineno} returns on some "
                        "paths and goes on to the code after it on others"
                    )
            statement.body = _returns_to(statement.body, result, label) or [ast.Pass()]
            statement.orelse = _returns_to(statement.orelse, result, label)
        elif isinstance(statement, ast.Try):
            if any(_has_return(s) for s in statement.finalbody) or (
                (statement.orelse or rest) and any(_has_return(s) for s in statement.body)
            ):
                raise InlineError(
                    f"inline {label}: a return in the try at line {statement.lineno} that would "
                    "skip its else or the code after it, or return from its finally"
                )
            if rest:  # a handler's early return: the rest runs where the body ran through
                if statement.finalbody or not all(_ends(h.body) for h in statement.handlers):
                    raise InlineError(
                        f"inline {label}: the try at line {statement.lineno} returns on some "
                        "paths and goes on to the code after it on others"
                    )
                statement.orelse = statement.orelse + rest
            statement.body = _returns_to(statement.body, result, label) or [ast.Pass()]
            statement.orelse = _returns_to(statement.orelse, result, label)
            for handler in statement.handlers:
                handler.body = _returns_to(handler.body, result, label) or [ast.Pass()]
        else:
            raise InlineError(
                f"inline {label}: a return inside the {type(statement).__name__.lower()} at line "
                f"{statement.lineno} that is not at the end of the function"
            )
        out.append(statement)
        return out
    return out


def _assignment(result: str | None, value: ast.expr | None) -> list[ast.stmt]:
    if isinstance(value, ast.Name) and value.id == result:
        return []  # the returned local is the result itself (see Inliner._body)
    if result is not None:
        return [_assign(result, value or ast.Constant(None))]
    if value is None or isinstance(value, (ast.Name, ast.Constant)):
        return []
    return [ast.Expr(value)]


def _assign(name: str, value: ast.expr) -> ast.Assign:
    # (A line for it: unparse reads an assignment's line, for its type comment.)
    return ast.Assign([ast.Name(name, ast.Store())], value, lineno=0)


def _lines(statements: list[ast.stmt]) -> list[str]:
    """Source lines of ``statements`` (unindented)."""
    return ast.unparse(ast.Module(statements or [ast.Pass()], [])).splitlines()


def _signature(definition: ast.FunctionDef) -> str:
    """The parameter list without annotations; defaults are written as None (the generated
    function takes the original's ``__defaults__``)."""
    args = copy.deepcopy(definition.args)
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        arg.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    return ast.unparse(args)


def flatten(*callees: Callable[..., Any]) -> Callable[[F], F]:
    """Decorator: the function, generated again with its calls of ``callees`` (and theirs)
    inline; the same parameters, defaults, name and docstring, the original as ``__wrapped__``.

    For the functions of a hot path: the body reads as calls of the real functions, which the
    rest of the code calls too, and runs without them. How it reads globals: see the module
    notes (a callee of another module reads that module's globals through the name the home
    module gives that module, or the same class or function, which it must import).

    Example::

        >>> @flatten(current_stream)
        ... def stream_of(device):
        ...     stream = current_stream(device)
        ...     return stream.handle
    """
    expand = _functions(callees)

    def decorate(function: F) -> F:
        home = function.__globals__
        if _module_of(function) is None:
            raise InlineError(f"flatten {_label(function)}: not a function of a module")
        try:
            definition = _definition(function)
        except NoSource:
            return function  # it runs as it is: correct, a few calls slower
        inliner = Inliner()
        inliner._home = home
        body = _lines(inliner._body(function, definition, None, None, expand))
        clash = sorted(inliner._made.intersection(home))
        if clash:
            raise InlineError(f"flatten {_label(function)}: {', '.join(clash)} named globally")
        name = function.__name__
        source = f"def {name}({_signature(definition)}):\n" + "".join(
            f"    {line}\n" for line in body
        )
        # Defined in the module's namespace (its globals), then taken out of it again.
        before = home.get(name, _NONE)
        exec(_compiled(source, f"<ignis flattened {_label(function)}>"), home)  # noqa: S102
        flat = home.pop(name)
        if before is not _NONE:
            home[name] = before
        flat.__defaults__ = function.__defaults__
        flat.__kwdefaults__ = function.__kwdefaults__
        functools.update_wrapper(flat, function)
        flat.source = source
        return flat  # type: ignore[return-value]

    return decorate
