"""Types of .qpat expressions, inferred while rules load so mistakes surface early.

Types are plain strings (`int`, `list[int]`, `value`...) as in the function
table. Inference is lenient where the language is: numbers mix, `any` fits
everything, `none` fits an encoding; a sub-expression that already failed has
type `any` so one mistake yields one diagnostic.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable

from qlower.diagnostics import Diagnostic, Note, Span, did_you_mean, error
from qlower.graph.types import DTYPE_ALIASES, DTYPE_NAMES, canonical_dtype
from qlower.lang import ast
from qlower.lang.backend import unknown_backends
from qlower.lang.functions import FunctionTable
from qlower.qnn.backends import BACKENDS

ANY = "any"
NUMERIC = frozenset({"int", "float", "number"})
# Ordered (aliases first) so did-you-mean hints are the same in every run.
DTYPE_CONSTANTS = tuple(dict.fromkeys(n for n in (*DTYPE_ALIASES, *sorted(DTYPE_NAMES)) if canonical_dtype(n)))
ATTR_TYPES = ("int", "float", "bool", "str", "dtype", "list[int]", "list[float]", "list[str]", "list[bool]")


def elem(t: str) -> str | None:
    """`list[int]` → `int`; None for a non-list type."""
    return t[5:-1] if t.startswith("list[") else None


def list_of(t: str) -> str:
    return f"list[{t}]"


def assignable(actual: str, expected: str) -> bool:
    """Can a value of type `actual` stand where `expected` is needed?"""
    if actual == expected or ANY in (actual, expected):
        return True
    if expected in NUMERIC and actual in NUMERIC:
        return not (expected == "int" and actual == "float")
    if actual == "none":
        return expected in ("encoding", "none")
    if expected == "tensor":
        return actual in NUMERIC or elem(actual) is not None
    if actual == "tensor" and elem(expected) is not None:
        return True  # constant data where a list is wanted (e.g. a QNN tensor param)
    ea, ee = elem(actual), elem(expected)
    if ea is not None and ee is not None:
        return assignable(ea, ee)
    return False


def join(a: str, b: str) -> str | None:
    """The type of `c ? a : b` or of a list holding both; None when they do not mix."""
    if a == b:
        return a
    if a == ANY or b == ANY:
        return ANY
    if a == "none":
        return b
    if b == "none":
        return a
    if a in NUMERIC and b in NUMERIC:
        return "number" if "number" in (a, b) else "float"
    ea, eb = elem(a), elem(b)
    if ea is not None and eb is not None:
        j = join(ea, eb)
        return list_of(j) if j is not None else None
    return None


def comparable(a: str, b: str) -> bool:
    return join(a, b) is not None or "none" in (a, b)


def literal_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "none"


def dtype_literal_ok(expr: ast.Expr) -> bool:
    """A string literal naming a dtype (`"float32"`) may stand for a dtype."""
    return isinstance(expr, ast.Literal) and isinstance(expr.value, str) and canonical_dtype(expr.value) is not None


def suggest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate `did_you_mean` would offer, preferring the earliest among equally
    close ones (declaration order: `transpose_in0` before `transpose_in1`)."""
    pool = list(dict.fromkeys(candidates))
    same = [c for c in pool if c.lower() == name.lower() and c != name]
    if same:  # only the case differs (`mllm.Gelu` for `mllm.GELU`): that is the one meant
        return same[0]
    close = difflib.get_close_matches(name, pool, n=len(pool) or 1, cutoff=0.6)
    if close:
        best = difflib.SequenceMatcher(None, name, close[0]).ratio()
        ties = {c for c in close if difflib.SequenceMatcher(None, name, c).ratio() == best}
        return next(c for c in pool if c in ties)
    hint = did_you_mean(name, pool)  # its case-insensitive second try
    return hint[len("did you mean `"):-2] if hint else None


def unknown_backend(name: str, span: Span | None) -> Diagnostic:
    """The one message for a backend name that is not one of BACKENDS (in `backends(...)`, a
    `compute`, or compared with `backend()`)."""
    return error(f"unknown backend `{name}`", span=span, code="unknown-backend",
                 hint=suggest(name, BACKENDS) or f"backends are {', '.join(BACKENDS)}")


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """A did-you-mean hint (see `suggest_name`), or None."""
    close = suggest_name(name, candidates)
    return f"did you mean `{close}`?" if close else None


Lookup = Callable[[str, Span | None], "str | None"]
Report = Callable[..., None]


class ExprTyper:
    """Infers expression types, reporting type errors, undefined names and bad calls.

    `lookup(name, span)` returns a name's type (marking it used) or None;
    `candidates()` lists names in scope for did-you-mean hints; `later(name)`
    gives where a not-yet-bound name is bound further down, if anywhere.
    """

    def __init__(self, functions: FunctionTable, report: Report, lookup: Lookup,
                 candidates: Callable[[], list[str]], later: Callable[[str], Span | None] = lambda n: None):
        self.functions = functions
        self.report = report
        self.lookup = lookup
        self.candidates = candidates
        self.later = later
        self.defines: dict[str, int] = {}  # def name → its parameter count (a call left unexpanded is wrong)
        self.recursive: Collection[str] = ()  # defs reported as calling themselves where they are defined

    def expect(self, expr: ast.Expr, expected: str, what: str) -> str:
        """Infer `expr` and report when it is not `expected`; `what` names the slot."""
        t = self.infer(expr)
        if expected == "dtype" and dtype_literal_ok(expr):
            return t
        if not assignable(t, expected):
            self.report(error(f"{what} must be {expected}, not {t}", span=expr.span, code="type-mismatch"))
        return t

    def infer(self, e: ast.Expr) -> str:
        method = getattr(self, "_" + type(e).__name__)
        return method(e)

    def _err(self, msg: str, node, hint: str | None = None) -> str:
        self.report(error(msg, span=node.span, hint=hint, code="type-mismatch"))
        return ANY

    def _Literal(self, e: ast.Literal) -> str:
        return literal_type(e.value)

    def _Name(self, e: ast.Name) -> str:
        t = self.lookup(e.id, e.span)
        if t is not None:
            return t
        if e.id in DTYPE_CONSTANTS:
            return "dtype"
        where = self.later(e.id)
        notes = [Note(f"`{e.id}` is bound here, after its use", where)] if where else []
        hint = None if where else suggest(e.id, [*self.candidates(), *DTYPE_CONSTANTS])
        self.report(error(f"undefined name `{e.id}`", span=e.span, hint=hint, notes=notes, code="undefined-name"))
        return ANY

    def _ListExpr(self, e: ast.ListExpr) -> str:
        t: str | None = None
        for item in e.items:
            it = self.infer(item)
            if t is None:
                t = it
            else:
                j = join(t, it)
                if j is None:
                    return self._err(f"list mixes {t} and {it}", item)
                t = j
        return list_of(t or ANY)

    def _Call(self, e: ast.Call) -> str:
        fn = self.functions.get(e.func)
        args = [self.infer(a) for a in e.args]
        if fn is None and e.func in self.defines:
            n = self.defines[e.func]
            if n != len(args):
                self.report(error(f"`{e.func}` (a def) takes {n} argument{'s' if n != 1 else ''}, got {len(args)}",
                                  span=e.span, code="call-arity"))
            elif e.func not in self.recursive:  # left unexpanded with the right arity: defined elsewhere
                self.report(error(f"`{e.func}` is a def this file cannot see, or one that calls itself",
                                  span=e.span, code="unknown-function",
                                  hint="a def is visible in the files of its pack (or of the folder loaded with it)"))
            return ANY
        if fn is None:
            self.report(error(f"unknown function `{e.func}`", span=e.span,
                              hint=suggest(e.func, self.functions.names()), code="unknown-function"))
            return ANY
        lo, hi = fn.min_args, fn.max_args
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            self.report(error(f"`{e.func}` takes {want} argument{'s' if want != '1' else ''}, got {len(args)}",
                              span=e.span, code="call-arity"))
            return fn.returns
        star = next((p[:-1] for p in fn.params if p.endswith("*")), None)
        if star is not None and len(args) == 1 and elem(args[0]) is not None:
            params = [list_of(star)]  # min([a, b]) as well as min(a, b)
        else:
            params = [p.rstrip("*") for p in fn.params]
            params += [star] * (len(args) - len(params)) if star else []
        for a, t, p in zip(e.args, args, params):
            if p == "dtype" and dtype_literal_ok(a):
                continue
            if not assignable(t, p):
                self.report(error(f"argument of `{e.func}` must be {p}, not {t}", span=a.span, code="type-mismatch"))
        if fn.returns == "number" and args and all(t == "int" or elem(t) == "int" for t in args):
            return "int"
        return fn.returns

    def _Index(self, e: ast.Index) -> str:
        t, i = self.infer(e.target), self.infer(e.index)
        if not assignable(i, "int"):
            return self._err(f"index must be int, not {i}", e.index)
        if t in (ANY, "tensor"):
            return ANY
        if t == "str":
            return "str"
        if elem(t) is None:
            hint = "use shape(...)[i] for a dim" if t == "value" else None
            return self._err(f"cannot index {t}", e.target, hint)
        return elem(t) or ANY

    def _Slice(self, e: ast.Slice) -> str:
        t = self.infer(e.target)
        for b in (e.lo, e.hi):
            if b is not None:
                bt = self.infer(b)
                if not assignable(bt, "int"):
                    self._err(f"slice bound must be int, not {bt}", b)
        if t in (ANY, "tensor", "str") or elem(t) is not None:
            return t
        return self._err(f"cannot slice {t}", e.target)

    def _Unary(self, e: ast.Unary) -> str:
        t = self.infer(e.operand)
        if e.op == "not":
            return "bool" if assignable(t, "bool") else self._err(f"`not` needs bool, not {t}", e.operand)
        if t in NUMERIC or t in (ANY, "tensor"):
            return t
        return self._err(f"cannot negate {t}", e.operand)

    def _Conditional(self, e: ast.Conditional) -> str:
        c = self.infer(e.cond)
        if not assignable(c, "bool"):
            self._err(f"condition must be bool, not {c}", e.cond)
        a, b = self.infer(e.then), self.infer(e.otherwise)
        j = join(a, b)
        return j if j is not None else self._err(f"branches have different types: {a} and {b}", e)

    def _Binary(self, e: ast.Binary) -> str:
        a, b = self.infer(e.left), self.infer(e.right)
        op = e.op
        for lit in unknown_backends(e, BACKENDS):
            self.report(unknown_backend(lit.value, lit.span))
        if op in ("and", "or"):
            for side, t in ((e.left, a), (e.right, b)):
                if not assignable(t, "bool"):
                    self._err(f"`{op}` needs bool operands, not {t}", side)
            return "bool"
        if op == "++":
            if a in ("str", "dtype", ANY) and b in ("str", "dtype", ANY) and "str" in (a, b):
                return "str"
            for side, t in ((e.left, a), (e.right, b)):
                if t != ANY and elem(t) is None:
                    return self._err(f"`++` joins lists; this side is {t}", side, f"wrap it in a list: [{_text(side)}]")
            j = join(a, b)
            return j if j is not None else self._err(f"cannot join {a} and {b}", e)
        if op in ("in", "not in"):
            if b == "str":
                return "bool" if assignable(a, "str") else self._err(f"cannot look for {a} in str", e)
            if b != ANY and elem(b) is None:
                return self._err(f"`{op}` needs a list on the right, not {b}", e.right)
            if b != ANY and not comparable(a, elem(b) or ANY):
                return self._err(f"cannot look for {a} in {b}", e.left)
            return "bool"
        if op in ("==", "!="):
            if not comparable(a, b) and not _dtype_vs_str(a, b, e):
                return self._err(f"cannot compare {a} with {b}", e)
            return "bool"
        if op in ("<", "<=", ">", ">="):
            ok = (assignable(a, "number") and assignable(b, "number")) or (a == b == "str")
            return "bool" if ok or ANY in (a, b) else self._err(f"cannot order {a} and {b}", e)
        return self._arith(e, a, b)

    def _arith(self, e: ast.Binary, a: str, b: str) -> str:
        op = e.op
        if ANY in (a, b):
            return ANY
        if "tensor" in (a, b) and all(t in NUMERIC or t == "tensor" for t in (a, b)):
            return "tensor"
        if a in NUMERIC and b in NUMERIC:
            if op == "/":
                return "float"
            if a == b:
                return a
            return "number" if "number" in (a, b) else "float"
        if op == "*" and (elem(a) and b == "int" or elem(b) and a == "int"):
            return a if elem(a) else b
        if op == "+" and a == b == "str":
            return "str"
        if op == "+" and elem(a) and elem(b):
            return self._err("`+` adds numbers; use `++` to join lists", e)
        return self._err(f"`{op}` needs numbers, not {a} and {b}", e)


def _dtype_vs_str(a: str, b: str, e: ast.Binary) -> bool:
    """`dtype(x) == "float32"` compares a dtype with a dtype-naming literal."""
    return (a == "dtype" and dtype_literal_ok(e.right)) or (b == "dtype" and dtype_literal_ok(e.left))


def _text(e: ast.Expr) -> str:
    if isinstance(e, ast.Literal):
        if isinstance(e.value, bool) or e.value is None:
            return {True: "true", False: "false", None: "none"}[e.value]
        return repr(e.value) if not isinstance(e.value, str) else f'"{e.value}"'
    if isinstance(e, ast.Name):
        return e.id
    return "..."
