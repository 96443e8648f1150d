"""Kernel parameter types, read from CUDA C++ source.

To pack launch arguments exactly, ignis needs each kernel parameter's type. The driver only
knows byte sizes (``cuFuncGetParamInfo``), so the types come from the source:
:func:`parse_kernel_params` finds the ``__global__`` function a name refers to and classifies each
parameter::

    >>> src = 'extern "C" __global__ void saxpy(float a, const float* x, int n) {}'
    >>> for p in parse_kernel_params(src, "saxpy"):
    ...     print(p)
    Param(name='a', kind='float', ctype='float', size=4)
    Param(name='x', kind='pointer', ctype='const float*', size=8)
    Param(name='n', kind='int', ctype='int', size=4)

The name is either a plain (``extern "C"``) name or a C++ name expression such as
``axpy<float, 128>`` or ``ns::k<__half>``, whose template arguments are substituted into the
parameter types.

What it understands: comments, preprocessor lines (skipped; simple object-like ``#define`` of a
type is followed), namespaces, ``extern "C"`` (single declarations and blocks),
``__launch_bounds__``/``__maxnreg__``/``__cluster_dims__`` and other attributes, templates with
type and integer parameters and defaults, ``const``/``volatile``/``__restrict__``/
``__grid_constant__``, default arguments, array parameters (they are pointers), ``typedef`` and
``using`` aliases, ``struct``/``class``/``union``/``enum`` declared in the source, the fixed-width
integer names (``int32_t``, ``ignis::int64``, ``size_t``, ...), the 16-bit float types
(``__half``, ``half``, ``ignis::float16``, ``ignis::half``, ``__nv_bfloat16``,
``ignis::bfloat16``) and CUDA's vector types (``float4``...). It does not run the preprocessor:
a kernel whose declaration is produced by a macro is not found (the caller can then fall back to
the driver's byte sizes). Integer type sizes follow the host's data model (``long`` is 8 bytes on
Linux, 4 on Windows), as NVRTC does.
"""

from __future__ import annotations

import ctypes
import platform
import re
from dataclasses import dataclass

from ._errors import LaunchError

__all__ = ["Param", "parse_kernel_params", "KINDS"]

KINDS = ("pointer", "float", "int", "uint", "bool", "half", "bfloat16", "struct", "unknown")
"""Every value :attr:`Param.kind` can take."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    Attributes:
        name: the parameter's name in the source (``None`` when unnamed).
        kind: one of :data:`KINDS`: ``"pointer"`` (any pointer or array), ``"float"`` (``float``
            or ``double``: see :attr:`size`), ``"int"``/``"uint"`` (signed/unsigned integers and
            enums, any width), ``"bool"``, ``"half"`` (IEEE binary16), ``"bfloat16"``,
            ``"struct"`` (a class type, passed by value as raw bytes) or ``"unknown"`` (a type
            this parser cannot see through).
        ctype: the type as written, after template substitution (e.g. ``"const float*"``).
        size: the size in bytes, or ``None`` when not known from the source.
    """

    name: str | None
    kind: str
    ctype: str
    size: int | None


# --- tokenizer --------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?(?:\*/|\Z))
  | (?P<string>"(?:\\.|[^"\\\n])*")
  | (?P<char>'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[\w.']|[eEpP][+-])*)
  | (?P<punct>\.\.\.|::|->|&&|\|\||\[\[|\]\]|[^\s])
    """,
    re.VERBOSE | re.DOTALL,
)
_DIRECTIVE_RE = re.compile(r"#[ \t]*(?P<word>\w*)(?P<rest>(?:[^\n\\]|\\.)*)", re.DOTALL)
_DEFINE_RE = re.compile(r"[ \t]*(?P<name>[A-Za-z_]\w*)(?P<paren>\()?(?P<body>.*)", re.DOTALL)


class _Source:
    """Tokens (text, line) of a translation unit, comments and directives removed."""

    def __init__(self, text: str):
        self.tokens: list[str] = []
        self.lines: list[int] = []
        self.defines: dict[str, list[str]] = {}
        self._scan(text)

    def _scan(self, text: str) -> None:
        pos, line, at_line_start = 0, 1, True
        end = len(text)
        while pos < end:
            if at_line_start and text.startswith("#", pos):
                m = _DIRECTIVE_RE.match(text, pos)
                assert m is not None
                if m.group("word") == "define":
                    self._define(m.group("rest").replace("\\\n", " "))
                line += m.group(0).count("\n")
                pos = m.end()
                continue
            m = _TOKEN_RE.match(text, pos)
            if m is None:  # pragma: no cover - the last alternative matches any character
                break
            kind = m.lastgroup
            token = m.group(0)
            pos = m.end()
            if kind == "nl":
                line += 1
                at_line_start = True
                continue
            if kind == "ws" or kind == "lcomment":
                continue
            if kind == "bcomment":
                line += token.count("\n")
                continue
            at_line_start = False
            self.tokens.append(token)
            self.lines.append(line)

    def _define(self, rest: str) -> None:
        m = _DEFINE_RE.match(rest)
        if m is None or m.group("paren"):  # function-like macros are not followed
            return
        body = _Source(m.group("body")).tokens
        if body:
            self.defines[m.group("name")] = body


def _tokenize(text: str) -> list[str]:
    return _Source(text).tokens


def _match_close(tokens: list[str], i: int, open_: str, close: str) -> int:
    """Index of the token closing the bracket at ``tokens[i]`` (``len(tokens)`` if unclosed)."""
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens)


def _match_angle(tokens: list[str], i: int) -> int:
    """Index of the ``>`` closing the ``<`` at ``tokens[i]``; brackets inside are skipped."""
    depth = 0
    j = i
    while j < len(tokens):
        t = tokens[j]
        if t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
            if depth == 0:
                return j
        elif t in "([{":
            j = _match_close(tokens, j, t, {"(": ")", "[": "]", "{": "}"}[t])
        elif t in (";", "{", "}"):
            break
        j += 1
    return len(tokens)


def _split_commas(tokens: list[str]) -> list[list[str]]:
    """Split at commas outside any (), [], {} or <> (angle brackets count until a default
    argument starts, where ``<`` may be a comparison)."""
    parts: list[list[str]] = [[]]
    depth = 0
    angle = 0
    in_default = False
    for t in tokens:
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == "=" and depth == 0 and angle == 0:
            in_default = True
        elif t == "<" and not in_default:
            angle += 1
        elif t == ">" and not in_default and angle > 0:
            angle -= 1
        elif t == "," and depth == 0 and angle == 0:
            parts.append([])
            in_default = False
            continue
        parts[-1].append(t)
    if parts == [[]]:
        return []
    return parts


def _join(tokens: list[str]) -> str:
    """C++ spelling of a token list: ``const float *`` -> ``const float*``."""
    text = " ".join(tokens)
    text = re.sub(r"\s*::\s*", "::", text)
    text = re.sub(r"\s*([<>,*&\[\]()])\s*", r"\1", text)
    text = text.replace(",", ", ")
    # A word after a closing bracket or a pointer needs its space back: "float* const".
    text = re.sub(r"([>*&\])])(?=[A-Za-z_])", r"\1 ", text)
    return text


# --- declarations -----------------------------------------------------------------------------

_IDENT_RE = re.compile(r"[A-Za-z_]\w*\Z")

# Specifiers that may sit between __global__ and the kernel name, each with a (...) argument.
_PAREN_ATTRIBUTES = frozenset(
    {
        "__launch_bounds__",
        "__maxnreg__",
        "__cluster_dims__",
        "__attribute__",
        "__declspec",
        "alignas",
        "__align__",
        "__block_size__",
    }
)
_QUALIFIERS = frozenset(
    {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "register"}
)
_BUILTIN_WORDS = frozenset(
    {
        "void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
        "__int128", "wchar_t", "char8_t", "char16_t", "char32_t", "auto",
    }
)  # fmt: skip


@dataclass
class _TemplateParam:
    name: str
    is_type: bool
    default: list[str] | None
    variadic: bool


@dataclass
class _Kernel:
    name: str
    scope: tuple[str, ...]
    extern_c: bool
    template: list[_TemplateParam] | None
    params: list[list[str]]
    line: int

    @property
    def qualified(self) -> str:
        return "::".join((*self.scope, self.name))


class _Declarations:
    """The ``__global__`` functions, aliases and class names of one translation unit."""

    def __init__(self, source: _Source):
        self.kernels: list[_Kernel] = []
        self.aliases: dict[str, list[str] | None] = {}
        self.records: set[str] = set()
        self.enums: dict[str, list[str] | None] = {}
        self.defines = source.defines
        self._tokens = source.tokens
        self._lines = source.lines
        self._scan()

    def _alias(self, name: str, tokens: list[str]) -> None:
        # The same name aliased to two different types (in two namespaces, say) is ambiguous
        # for a parser without scopes: forget it rather than guess.
        if name in self.aliases and self.aliases[name] != tokens:
            self.aliases[name] = None
        else:
            self.aliases[name] = tokens

    def _scan(self) -> None:
        toks = self._tokens
        n = len(toks)
        scopes: list[tuple[str, tuple[str, ...]]] = []  # (kind, namespace names) per open brace
        next_brace: tuple[str, tuple[str, ...]] | None = None
        template: list[_TemplateParam] | None = None
        extern_c = False
        i = 0
        while i < n:
            t = toks[i]
            if t == "{":
                scopes.append(next_brace or ("other", ()))
                next_brace = None
                template = None
                extern_c = False
            elif t == "}":
                if scopes:
                    scopes.pop()
                template = None
                extern_c = False
            elif t == ";":
                template = None
                extern_c = False
                next_brace = None
            elif t == "namespace":
                j = i + 1
                names: list[str] = []
                while j < n and (_IDENT_RE.match(toks[j]) or toks[j] == "::"):
                    if toks[j] not in ("::", "inline"):
                        names.append(toks[j])
                    j += 1
                if j < n and toks[j] == "{":
                    next_brace = ("namespace", tuple(names))
                i = j
                continue
            elif t == "extern" and i + 1 < n and toks[i + 1] == '"C"':
                if i + 2 < n and toks[i + 2] == "{":
                    next_brace = ("extern_c", ())
                else:
                    extern_c = True
                i += 2
                continue
            elif t == "template" and i + 1 < n and toks[i + 1] == "<":
                close = _match_angle(toks, i + 1)
                template = _template_params(toks[i + 2 : close])
                i = close + 1
                continue
            elif t == "template":  # explicit instantiation: not a declaration of a template
                template = None
            elif t in ("typedef", "using"):
                self._record_alias(i)
            elif t in ("struct", "class", "union", "enum"):
                self._record_type(i)
            elif t == "__global__":
                in_extern_c = extern_c or any(kind == "extern_c" for kind, _ in scopes)
                scope = tuple(
                    name for kind, names in scopes if kind == "namespace" for name in names
                )
                i = self._kernel(i, scope, in_extern_c, template)
                template = None
                continue
            i += 1

    def _kernel(
        self, i: int, scope: tuple[str, ...], extern_c: bool, template: list[_TemplateParam] | None
    ) -> int:
        """Record the kernel declared at ``__global__`` (index ``i``); return where to go on."""
        toks = self._tokens
        n = len(toks)
        line = self._lines[i]
        j = i + 1
        while j < n:
            t = toks[j]
            if t in (";", "{", "}"):
                return j  # not a function declaration after all
            if t in _PAREN_ATTRIBUTES and j + 1 < n and toks[j + 1] == "(":
                j = _match_close(toks, j + 1, "(", ")") + 1
                continue
            if t == "[[":
                while j < n and toks[j] != "]]":
                    j += 1
                j += 1
                continue
            if _IDENT_RE.match(t) and j + 1 < n and toks[j + 1] in ("(", "<"):
                break
            j += 1
        else:
            return n
        name = toks[j]
        qualifiers: list[str] = []
        k = j
        while k >= 2 and toks[k - 1] == "::" and _IDENT_RE.match(toks[k - 2]):
            qualifiers.insert(0, toks[k - 2])
            k -= 2
        j += 1
        explicit = False
        if toks[j] == "<":  # k<float>(...): an explicit instantiation or specialization
            explicit = True
            j = _match_angle(toks, j) + 1
            if j >= n or toks[j] != "(":
                return j
        close = _match_close(toks, j, "(", ")")
        if not explicit:
            self.kernels.append(
                _Kernel(
                    name=name,
                    scope=scope + tuple(qualifiers),
                    extern_c=extern_c,
                    template=template,
                    params=_split_commas(toks[j + 1 : close]),
                    line=line,
                )
            )
        return close + 1

    def _record_alias(self, i: int) -> None:
        toks = self._tokens
        end = i
        depth = 0
        while end < len(toks):
            t = toks[end]
            if t in "({[":
                depth += 1
            elif t in ")}]":
                depth -= 1
            elif t == ";" and depth == 0:
                break
            end += 1
        body = toks[i + 1 : end]
        if toks[i] == "using":
            # using Name = type;   (using namespace / using-declarations are not aliases)
            if len(body) >= 3 and _IDENT_RE.match(body[0]) and body[1] == "=":
                self._alias(body[0], body[2:])
            return
        if not body or not _IDENT_RE.match(body[-1]):
            return
        name = body[-1]
        if "{" in body:  # typedef struct {...} Name;
            self.records.add(name)
        elif "(" not in body:  # function pointer typedefs are skipped
            self._alias(name, body[:-1])

    def _record_type(self, i: int) -> None:
        toks = self._tokens
        keyword = toks[i]
        j = i + 1
        if keyword == "enum" and j < len(toks) and toks[j] in ("class", "struct"):
            j += 1
        while j < len(toks) and toks[j] in _PAREN_ATTRIBUTES and toks[j + 1 : j + 2] == ["("]:
            j = _match_close(toks, j + 1, "(", ")") + 1
        if j >= len(toks) or not _IDENT_RE.match(toks[j]):
            return
        name = toks[j]
        after = toks[j + 1] if j + 1 < len(toks) else ""
        if keyword == "enum":
            if after == ":":
                k = j + 2
                while k < len(toks) and toks[k] not in ("{", ";"):
                    k += 1
                self.enums[name] = toks[j + 2 : k]
            elif after in ("{", ";"):
                self.enums.setdefault(name, None)
        elif after in ("{", ";", ":", "final"):
            self.records.add(name)


def _template_params(tokens: list[str]) -> list[_TemplateParam]:
    params = []
    for part in _split_commas(tokens):
        default = None
        if "=" in part:
            eq = part.index("=")
            part, default = part[:eq], part[eq + 1 :]
        variadic = "..." in part
        words = [t for t in part if t != "..."]
        is_type = bool(words) and words[0] in ("typename", "class")
        if words and words[0] == "template":  # template template parameter
            is_type = True
        name = words[-1] if words and _IDENT_RE.match(words[-1]) else ""
        if is_type and name in ("typename", "class"):
            name = ""
        params.append(_TemplateParam(name, is_type, default, variadic))
    return params


# --- types ------------------------------------------------------------------------------------

_LONG = ctypes.sizeof(ctypes.c_long)
_WCHAR = ctypes.sizeof(ctypes.c_wchar)
# Plain char is unsigned on Arm and POWER Linux, signed on x86; device code follows the host.
_CHAR_SIGNED = (
    not platform.machine().lower().startswith(("arm", "aarch64", "ppc", "powerpc", "s390"))
)

_NAMED: dict[str, tuple[str, int]] = {
    "size_t": ("uint", 8),
    "ptrdiff_t": ("int", 8),
    "ssize_t": ("int", 8),
    "intptr_t": ("int", 8),
    "uintptr_t": ("uint", 8),
    "CUdeviceptr": ("pointer", 8),
    "cudaTextureObject_t": ("uint", 8),
    "cudaSurfaceObject_t": ("uint", 8),
    "CUtexObject": ("uint", 8),
    "CUsurfObject": ("uint", 8),
    # 16-bit floats: CUDA's, and the storage types of ignis_types.cuh
    "__half": ("half", 2),
    "half": ("half", 2),
    "__half_raw": ("half", 2),
    "float16": ("half", 2),
    "__nv_bfloat16": ("bfloat16", 2),
    "nv_bfloat16": ("bfloat16", 2),
    "__nv_bfloat16_raw": ("bfloat16", 2),
    "bfloat16": ("bfloat16", 2),
}
for _bits in (8, 16, 32, 64):
    for _t in (f"int{_bits}_t", f"int{_bits}", f"int_fast{_bits}_t", f"int_least{_bits}_t"):
        _NAMED[_t] = ("int", _bits // 8)
        _NAMED["u" + _t] = ("uint", _bits // 8)
# The fast types are wider than their name on glibc (int_fast16_t is a long there): leave them
# to the driver's sizes rather than guess.
for _t in [k for k in _NAMED if "fast" in k and not k.endswith(("8_t", "64_t"))]:
    del _NAMED[_t]

# CUDA vector types (float4, int2, ...): their size is lanes x lane size (alignment adds none).
_VECTOR_LANES = {
    "char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": _LONG,
    "ulong": _LONG, "longlong": 8, "ulonglong": 8, "float": 4, "double": 8,
}  # fmt: skip
_VECTOR_SIZES: dict[str, int] = {}
for _base, _lane in _VECTOR_LANES.items():
    for _count in (1, 2, 3, 4):
        _VECTOR_SIZES[f"{_base}{_count}"] = _lane * _count
_VECTOR_SIZES.update({"dim3": 12, "__half2": 4, "half2": 4, "__nv_bfloat162": 4, "nv_bfloat162": 4})

_MAX_ALIAS_DEPTH = 16


def _builtin(words: list[str]) -> tuple[str, int] | None:
    """Kind and size of a fundamental type spelled with keywords (``unsigned long long``)."""
    if not words or any(w not in _BUILTIN_WORDS for w in words):
        return None
    unsigned = "unsigned" in words
    signed = "signed" in words
    rest = [w for w in words if w not in ("signed", "unsigned")]
    longs = rest.count("long")
    if rest == ["float"]:
        return ("float", 4)
    if rest == ["double"]:
        return ("float", 8)
    if rest == ["long", "double"]:
        return None  # no device equivalent
    if rest == ["bool"]:
        return ("bool", 1)
    if rest == ["void"]:
        return None
    if rest == ["char"]:
        return ("uint" if unsigned or not (signed or _CHAR_SIGNED) else "int", 1)
    kind = "uint" if unsigned else "int"
    if rest in (["char8_t"],):
        return ("uint", 1)
    if rest in (["char16_t"],):
        return ("uint", 2)
    if rest in (["char32_t"],):
        return ("uint", 4)
    if rest == ["wchar_t"]:
        return ("uint" if _WCHAR == 2 else "int", _WCHAR)  # Windows: unsigned 16-bit
    if rest == ["__int128"]:
        return (kind, 16)
    others = [w for w in rest if w != "int"]
    if others == ["short"] or others == ["short", "int"]:
        return (kind, 2)
    if not others:  # int, signed, unsigned
        return (kind, 4)
    if others == ["long"] * longs and longs == 1:
        return (kind, _LONG)
    if others == ["long"] * longs and longs == 2:
        return (kind, 8)
    return None


class _TypeResolver:
    def __init__(self, decls: _Declarations):
        self._decls = decls

    def classify(self, tokens: list[str], depth: int = 0) -> tuple[str, int | None]:
        """Kind and size of a type given as tokens (qualifiers and name already removed)."""
        if depth > _MAX_ALIAS_DEPTH:
            return ("unknown", None)
        if "*" in tokens or "[" in tokens or "(" in tokens:
            return ("pointer", 8)
        words = [t for t in tokens if t not in _QUALIFIERS]
        elaborated = bool(words) and words[0] in ("struct", "class", "union", "enum")
        if elaborated:
            keyword, words = words[0], words[1:]
        builtin = _builtin(words)
        if builtin is not None:
            return builtin
        if not words:
            return ("unknown", None)
        # A (possibly qualified) name, maybe a template-id.
        if "<" in words:
            base = words[: words.index("<")]
            template_id = True
        else:
            base = words
            template_id = False
        if not base or any(not (_IDENT_RE.match(w) or w == "::") for w in base):
            return ("unknown", None)
        parts = [w for w in base if w != "::"]
        last = parts[-1]
        qualified = "::".join(parts)
        if template_id:
            return ("struct", None) if last in self._decls.records else ("unknown", None)
        if elaborated and keyword != "enum":
            return ("struct", _VECTOR_SIZES.get(last))
        for key in (qualified, last):
            if key in _NAMED:
                return _NAMED[key]
        for key in (qualified, last):
            alias = self._decls.aliases.get(key, False)
            if alias:
                return self.classify(_strip_qualifiers(alias), depth + 1)
        if last in self._decls.enums:
            underlying = self._decls.enums[last]
            if underlying is None:
                return ("int", 4)  # the underlying type of a plain enum with small values
            return self.classify(_strip_qualifiers(underlying), depth + 1)
        if last in _VECTOR_SIZES:
            return ("struct", _VECTOR_SIZES[last])
        if last in self._decls.records:
            return ("struct", None)
        if len(parts) == 1 and last in self._decls.defines:
            return self.classify(_strip_qualifiers(self._decls.defines[last]), depth + 1)
        return ("unknown", None)


def _strip_attributes(tokens: list[str]) -> list[str]:
    """``tokens`` without ``[[...]]``, ``__attribute__((...))`` and similar specifiers."""
    out = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in _PAREN_ATTRIBUTES and tokens[i + 1 : i + 2] == ["("]:
            i = _match_close(tokens, i + 1, "(", ")") + 1
            continue
        if t == "[[":
            while i < len(tokens) and tokens[i] != "]]":
                i += 1
            i += 1
            continue
        out.append(t)
        i += 1
    return out


def _strip_qualifiers(tokens: list[str]) -> list[str]:
    return [t for t in _strip_attributes(tokens) if t not in _QUALIFIERS]


# --- name expressions -------------------------------------------------------------------------


def _parse_name(expression: str) -> tuple[list[str], list[list[str]] | None]:
    """``ns::k<float, 4>`` -> (["ns", "k"], [["float"], ["4"]]); no ``<>`` -> args None."""
    tokens = _tokenize(expression)
    if tokens[:1] == ["&"]:  # "&k<float>", the form NVRTC's name expressions also accept
        tokens = tokens[1:]
    if tokens[:1] == ["::"]:
        tokens = tokens[1:]
    parts: list[str] = []
    i = 0
    while i < len(tokens) and _IDENT_RE.match(tokens[i]):
        parts.append(tokens[i])
        i += 1
        if i < len(tokens) and tokens[i] == "::":
            i += 1
            continue
        break
    args = None
    if i < len(tokens) and tokens[i] == "<":
        close = _match_angle(tokens, i)
        if close == len(tokens):
            raise LaunchError(
                f"kernel name {expression!r}: unbalanced '<' in the template arguments"
            )
        args = _split_commas_angle(tokens[i + 1 : close])
        i = close + 1
    if not parts or i != len(tokens):
        raise LaunchError(
            f"kernel name {expression!r} is not a kernel name or a name expression like "
            "'saxpy' or 'axpy<float, 128>'"
        )
    return parts, args


def _split_commas_angle(tokens: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for t in tokens:
        if t in "([{<":
            depth += 1
        elif t in ")]}>":
            depth -= 1
        elif t == "," and depth == 0:
            parts.append([])
            continue
        parts[-1].append(t)
    return [] if parts == [[]] else parts


# --- parameters -------------------------------------------------------------------------------


def _declarator(tokens: list[str]) -> tuple[str | None, list[str], bool]:
    """Split one parameter into (name, type tokens as written, is_array)."""
    if "=" in tokens:
        tokens = tokens[: tokens.index("=")]
    tokens = _strip_attributes(tokens)
    is_array = False
    while tokens and tokens[-1] == "]":  # T x[] / T x[N]: an array parameter is a pointer
        open_ = len(tokens) - 1 - tokens[::-1].index("[")
        tokens = tokens[:open_]
        is_array = True
    if "(" in tokens:  # function pointer: R (*name)(args)
        i = tokens.index("(")
        inner = tokens[i + 1 : _match_close(tokens, i, "(", ")")]
        names = [t for t in inner if _IDENT_RE.match(t) and t not in _QUALIFIERS]
        name = names[-1] if names else None
        return name, [t for t in tokens if t != name], False
    core = [j for j, t in enumerate(tokens) if t not in _QUALIFIERS]
    if len(core) >= 2:
        j = core[-1]
        t = tokens[j]
        prev = tokens[core[-2]]
        if _IDENT_RE.match(t) and t not in _BUILTIN_WORDS and prev != "::" and prev not in (
            "struct", "class", "union", "enum",
        ):  # fmt: skip
            return t, tokens[:j] + tokens[j + 1 :], is_array
    return None, tokens, is_array


def _substitute(tokens: list[str], mapping: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for t in tokens:
        out.extend(mapping.get(t, [t]))
    return out


def _bind_template(kernel: _Kernel, args: list[list[str]], expression: str) -> dict[str, list[str]]:
    params = kernel.template or []
    mapping: dict[str, list[str]] = {}
    variadic = any(p.variadic for p in params)
    if len(args) > len(params) and not variadic:
        raise LaunchError(
            f"kernel {expression!r}: {kernel.qualified} (line {kernel.line}) takes "
            f"{len(params)} template argument(s) ({_template_names(params)}), "
            f"the name gives {len(args)}"
        )
    for k, p in enumerate(params):
        if p.variadic:
            raise LaunchError(
                f"kernel {expression!r}: {kernel.qualified} (line {kernel.line}) is a variadic "
                "template; its parameter types cannot be read from the source"
            )
        if k < len(args):
            value = args[k]
        elif p.default is not None:
            value = _substitute(p.default, mapping)
        else:
            raise LaunchError(
                f"kernel {expression!r}: {kernel.qualified} (line {kernel.line}) needs a value "
                f"for template parameter {p.name or k!r} ({_template_names(params)}); "
                f"the name gives {len(args)} argument(s)"
            )
        if p.name:
            mapping[p.name] = value
    return mapping


def _template_names(params: list[_TemplateParam]) -> str:
    return ", ".join(p.name or "?" for p in params)


def _kernel_params(
    kernel: _Kernel, mapping: dict[str, list[str]], resolver: _TypeResolver, expression: str
) -> list[Param]:
    raw = kernel.params
    if len(raw) == 1 and _strip_qualifiers(raw[0]) == ["void"]:
        return []
    params: list[Param] = []
    for index, tokens in enumerate(raw):
        if "..." in tokens:
            raise LaunchError(
                f"kernel {expression!r}: parameter {index} of {kernel.qualified} (line "
                f"{kernel.line}) is variadic; kernels cannot take C variadic arguments"
            )
        name, type_tokens, is_array = _declarator(tokens)
        type_tokens = _substitute(type_tokens, mapping)
        label = f"parameter {index}" + (f" {name!r}" if name else "")
        if "&" in type_tokens or "&&" in type_tokens:
            raise LaunchError(
                f"kernel {expression!r}: {label} of {kernel.qualified} (line {kernel.line}) is "
                f"a reference ({_join(type_tokens)}); kernel parameters cannot be references, "
                "pass a pointer or a value"
            )
        ctype = _join(type_tokens) + ("*" if is_array else "")
        kind, size = resolver.classify(_strip_qualifiers(type_tokens) + (["*"] if is_array else []))
        params.append(Param(name, kind, ctype, size))
    return params


def parse_kernel_params(source: str, name: str) -> list[Param]:
    """The parameters of the kernel ``name`` declared in ``source``.

    Args:
        source: CUDA C++ text of the translation unit (headers it includes are not read).
        name: the kernel's name (``"saxpy"``; an ``extern "C"`` kernel is found by its plain
            name in any namespace), or a name expression for a template instance
            (``"axpy<float, 128>"``, ``"ns::k<__half>"``) whose arguments are substituted into
            the parameter types; omitted template arguments take their defaults.

    Returns:
        One :class:`Param` per parameter, in order.

    Raises:
        LaunchError: no ``__global__`` function of that name, several with different
            parameter lists (overloads), a template named without its arguments, a reference
            parameter, or a variadic kernel.

    Example::

        >>> src = "template <typename T, int N> __global__ void fill(T* out, T v, int n) {}"
        >>> [(p.name, p.kind, p.size) for p in parse_kernel_params(src, "fill<double, 4>")]
        [('out', 'pointer', 8), ('v', 'float', 8), ('n', 'int', 4)]
    """
    if not isinstance(source, str):
        raise TypeError(f"parse_kernel_params: source must be str, got {type(source).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"parse_kernel_params: name must be str, got {type(name).__name__}")
    parts, args = _parse_name(name)
    decls = _Declarations(_Source(source))
    wanted = "::".join(parts)

    def matches(k: _Kernel) -> bool:
        if k.qualified == wanted:
            return True
        return k.extern_c and len(parts) == 1 and k.name == parts[0]

    found = [k for k in decls.kernels if matches(k)]
    if not found:
        # Tolerate a name given relative to an enclosing namespace (k for ns::k) when unique.
        found = [k for k in decls.kernels if k.qualified.endswith("::" + wanted)]
        if len({k.qualified for k in found}) > 1:
            raise LaunchError(
                f"kernel {name!r} is ambiguous: it could be "
                + ", ".join(sorted({k.qualified for k in found}))
                + "; qualify the name"
            )
    if not found:
        known = sorted({k.qualified for k in decls.kernels})
        raise LaunchError(
            f"kernel {name!r}: no __global__ function of that name in the source"
            + (f" (kernels found: {', '.join(known)})" if known else " (it declares no kernels)")
            + "; a kernel declared through a macro cannot be read from the source"
        )
    if args is None:
        plain = [k for k in found if k.template is None]
        if not plain:
            k = found[0]
            raise LaunchError(
                f"kernel {name!r} is a template (line {k.line}: template parameters "
                f"{_template_names(k.template or [])}); name an instance, e.g. "
                f"{name}<{', '.join('float' if p.is_type else '128' for p in k.template or [])}>"
            )
        found = plain
    else:
        templates = [k for k in found if k.template is not None]
        if not templates:
            raise LaunchError(
                f"kernel {name!r}: {found[0].qualified} (line {found[0].line}) is not a "
                "template; name it without template arguments"
            )
        found = templates

    resolver = _TypeResolver(decls)
    results: list[tuple[_Kernel, list[Param]]] = []
    errors: list[LaunchError] = []
    for k in found:
        try:
            mapping = _bind_template(k, args, name) if args is not None else {}
            results.append((k, _kernel_params(k, mapping, resolver, name)))
        except LaunchError as exc:
            errors.append(exc)
    if not results:
        raise errors[0]

    # A declaration and its definition are the same kernel: group by parameter types.
    distinct: dict[tuple, tuple[_Kernel, list[Param]]] = {}
    for k, params in results:
        key = tuple((p.kind, p.size, _type_key(p.ctype)) for p in params)
        previous = distinct.get(key)
        # Prefer the declaration that names its parameters (usually the definition).
        if previous is None or sum(p.name is not None for p in params) > sum(
            p.name is not None for p in previous[1]
        ):
            distinct[key] = (k, params)
    if len(distinct) > 1:
        listing = "; ".join(
            f"line {k.line}: {k.name}({', '.join(p.ctype for p in params)})"
            for k, params in distinct.values()
        )
        raise LaunchError(
            f"kernel {name!r} is overloaded ({len(distinct)} declarations with different "
            f'parameters: {listing}); give each kernel its own name (extern "C" kernels '
            "cannot be overloaded anyway)"
        )
    return next(iter(distinct.values()))[1]


def _type_key(ctype: str) -> str:
    """A spelling-insensitive key for a type: ``T const*`` and ``const T *`` compare equal."""
    words = [w for w in re.findall(r"[A-Za-z_]\w*|\S", ctype) if w not in _QUALIFIERS]
    return " ".join(words)
