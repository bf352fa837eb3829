"""Multiply-accumulates per QNN op, from the formula table `opdefs/macs.txt`.

The formulas are data (one line per op type, a product of factors over the
op's input/output dims and params); this module only parses and evaluates
them. Ops the table does not list count 0.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from qlower.qnn.model import PACKAGE, OpConfig, QnnGraph, QnnTensor, ScalarParam, TensorParam
from qlower.qnn.table import QnnTable, table_of

TABLE = Path(__file__).parent / "opdefs" / "macs.txt"
Tensors = Mapping[str, QnnTensor]  # the graph's tensors by name: where formulas read dims
Formula = Callable[[OpConfig, Tensors], int]

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_]\w*)|(?P<punct>[\[\]():,*-]))")


class FormulaError(ValueError):
    """A malformed line in the MAC table (a bug in shipped data, reported with file:line)."""


class _Parser:
    """Recursive descent over one formula; compiles it to one Python function."""

    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.tokens: list[str] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise FormulaError(f"{where}: cannot read {text[pos:]!r}")
            self.tokens.append(m.group(m.lastgroup or "punct"))
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise FormulaError(f"{self.where}: expected {want or 'more'}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Formula:
        src = self.product()
        if self.peek() is not None:
            raise FormulaError(f"{self.where}: unexpected {self.peek()!r}")
        # One Python function per formula: it runs once per op of every written graph, and a closure
        # per factor cost a million-op graph 2.4 s. The source is built from the tokens the
        # grammar admits (integers, in/out factors, param names as string literals) only.
        code = compile(f"lambda op, ts: {src}", self.where, "eval")
        return eval(code, {"__builtins__": {"int": int}, "prod": math.prod,  # noqa: S307 - see above
                           "_param_product": _param_product, "_flag": _flag})

    def product(self) -> str:
        factors = [self.factor()]
        while self.peek() == "*":
            self.take("*")
            factors.append(self.factor())
        return factors[0] if len(factors) == 1 else f"({' * '.join(factors)})"

    def integer(self) -> int:
        neg = self.peek() == "-"
        if neg:
            self.take("-")
        tok = self.take()
        if not tok.isdigit():
            raise FormulaError(f"{self.where}: expected an integer, got {tok!r}")
        return -int(tok) if neg else int(tok)

    def factor(self) -> str:
        tok = self.take()
        if tok.isdigit():
            return str(int(tok))
        if tok == "(":
            f = self.product()
            self.take(")")
            return f
        if tok == "param":
            self.take("(")
            name = self.take()
            self.take(")")
            return f"_param_product(op, {name!r})"
        if tok == "if":
            self.take("(")
            name = self.take()
            self.take(",")
            yes = self.product()
            self.take(",")
            no = self.product()
            self.take(")")
            return f"({yes} if _flag(op, {name!r}) else {no})"
        m = re.fullmatch(r"(out|in)(\d*)", tok)
        if m is None or (m.group(1) == "in" and not m.group(2)):
            raise FormulaError(f"{self.where}: unknown factor {tok!r}")
        names = "op.outputs" if m.group(1) == "out" else "op.inputs"
        dims = f"ts[{names}[{int(m.group(2) or 0)}]].dims"  # IndexError/KeyError: absent, counts 0
        if self.peek() != "[":
            return f"prod({dims})"
        self.take("[")
        start = None if self.peek() == ":" else self.integer()
        if self.peek() == ":":
            self.take(":")
            stop = None if self.peek() == "]" else self.integer()
            self.take("]")
            return f"prod({dims}[{'' if start is None else start}:{'' if stop is None else stop}])"
        self.take("]")
        return f"int({dims}[{start}])"


def _param(op: OpConfig, name: str):
    p = op.param(name)
    if isinstance(p, TensorParam):
        return p.tensor.data
    if isinstance(p, ScalarParam):
        return p.value
    return None


def _param_product(op: OpConfig, name: str) -> int:
    v = _param(op, name)
    if v is None:
        raise LookupError
    return int(np.prod(np.asarray(v, dtype=np.int64)))


def _flag(op: OpConfig, name: str) -> bool:
    p = op.param(name)
    if isinstance(p, ScalarParam):
        return bool(p.value)
    if isinstance(p, TensorParam) and p.tensor.data is not None and p.tensor.data.size == 1:
        return bool(p.tensor.data.reshape(-1)[0])
    return False


def parse_table(text: str, file: str = "macs.txt") -> dict[str, Formula]:
    """Op type -> formula, from the table's text."""
    table: dict[str, Formula] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        names, sep, formula = line.partition("=")
        if not sep:
            raise FormulaError(f"{file}:{n}: expected `OpType[, OpType...] = formula`")
        f = _Parser(formula, f"{file}:{n}").parse()
        for name in (x.strip() for x in names.split(",")):
            if not name or name in table:
                raise FormulaError(f"{file}:{n}: op type {name!r} is empty or listed twice")
            table[name] = f
    return table


@functools.cache
def shipped_table() -> Mapping[str, Formula]:
    """The shipped table, parsed once (it is immutable data)."""
    return parse_table(TABLE.read_text(encoding="utf-8"), TABLE.name)


def op_macs(op: OpConfig, tensors: Tensors, table: Mapping[str, Formula] | None = None) -> int:
    """MACs of one op; 0 when the table has no formula or a tensor/param it needs is absent.

    The table describes the `qti.aisw` op package; ops of custom packages count 0.
    """
    if op.package != PACKAGE:
        return 0
    f = (shipped_table() if table is None else table).get(op.type)
    if f is None:
        return 0
    try:
        return max(0, int(f(op, tensors)))
    except (LookupError, TypeError, ValueError):
        return 0


def graph_macs(graph: QnnGraph | QnnTable, table: Mapping[str, Formula] | None = None) -> list[int]:
    """MACs of every op, in op order."""
    t = graph if isinstance(graph, QnnTable) else table_of(graph)
    per_kind, own = op_kind_macs(t, table)
    out = [per_kind[k] for k in t.op_kind]
    for i, m in own.items():
        out[i] = m
    return out  # type: ignore[return-value]


def op_kind_macs(t: QnnTable, table: Mapping[str, Formula] | None = None
                 ) -> tuple[list[int | None], dict[int, int]]:
    """MACs per op kind (None for kinds with tensor params, whose data a formula may read) and per op
    of those kinds (by op index): a million-op graph evaluates its formulas once per kind."""
    formulas = shipped_table() if table is None else table
    per_kind: list[int | None] = []
    for kind in t.op_kinds:
        if kind.tensor_params:
            per_kind.append(None)
            continue
        ins = [f"\x00in{i}\x00" for i in range(len(kind.inputs))]
        outs = [f"\x00out{i}\x00" for i in range(len(kind.outputs))]
        tensors = {n: t.tensor_kinds[k].tensor(n) for n, k in (*zip(ins, kind.inputs), *zip(outs, kind.outputs))
                   if k >= 0}
        op = OpConfig("", kind.type, ins, outs, list(kind.params), kind.package)
        per_kind.append(op_macs(op, tensors, formulas))
    own: dict[int, int] = {}
    if t.op_params:
        index = {n: j for j, n in enumerate(t.tensor_names)}
        at = (t.input_at(), t.output_at())
        for i in t.op_params:
            if per_kind[t.op_kind[i]] is None:
                op = t.op(i, *at)
                tensors = {n: t.tensor(index[n]) for n in (*op.inputs, *op.outputs) if n in index}
                own[i] = op_macs(op, tensors, formulas)
    return per_kind, own
