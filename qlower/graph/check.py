"""Well-formedness checks of an in-memory graph, reported as diagnostics.

`check_graph` looks for what would make later stages fail confusingly: values
nobody produces, cycles, ops whose operand/result counts disagree with their
declaration, unknown op types, missing shapes. It walks each op and value a
fixed number of times (linear in the graph) and never raises for a bad graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from qlower.diagnostics import Diagnostic, Note, error, typo_of, warning
from qlower.graph.core import Graph, Op


class OperandDeclLike(Protocol):
    name: str
    kind: str  # "one" | "optional" | "variadic"


class ResultDeclLike(Protocol):
    name: str
    variadic: bool


class OpDeclLike(Protocol):
    """What arity checks need of a declaration; `qlower.lang.ast.OpDecl` fits."""

    operands: Sequence[OperandDeclLike]
    results: Sequence[ResultDeclLike]


def check_graph(graph: Graph, *, decls: Mapping[str, OpDeclLike] | None = None,
                need_shapes: bool = False, cycles: bool = True) -> list[Diagnostic]:
    """Diagnostics for `graph`, errors and warnings in a deterministic order (empty when all is well).

    Ops of a dialect that `decls` declares must be declared and match their arity;
    ops of other dialects (e.g. `qnn`, checked by the op definitions) are not judged
    here. `cycles=False` skips the cycle search for callers that order the graph anyway.
    """
    out: list[Diagnostic] = []
    if _all_well(graph, decls, need_shapes):  # the common case, proved in one pass
        return list(_check_cycles(graph, {id(op) for op in graph.ops})) if cycles else out
    live = {id(op) for op in graph.ops}
    out += _check_values(graph, live, need_shapes)
    out += _check_ops(graph, live, decls)
    if cycles:
        out += _check_cycles(graph, live)
    return out


def _all_well(graph: Graph, decls: Mapping[str, OpDeclLike] | None, need_shapes: bool) -> bool:
    """True when `_check_values` and `_check_ops` would find nothing; False when they might (they
    then run and say what). One pass with attribute reads, no per-call tables: a well-formed
    million-op graph, the case that matters for speed, is proved in about a second."""
    fine: set[tuple[str, int, int]] = set()  # (type, #operands, #results) whose arity is right, none absent
    dialects = {t.split(".", 1)[0] for t in decls} if decls is not None else set()
    judge = decls is not None
    for op in graph._ops.values():  # noqa: SLF001
        operands = op.operands
        absent = False
        for v in operands:
            if v is None:
                absent = True
                continue
            if v.owner is not graph:  # (membership: the graph keeps `owner` in step with its tables)
                return False
            p = v.producer
            if p is None:
                if not v.is_input and v.data is None:
                    return False
            elif p.owner is not graph:
                return False
        results = op.results
        for r in results:  # some result is used or is an output
            if r.users or r.is_output:
                break
        else:
            if results:
                return False
        if not judge:
            continue
        key = (op.type, len(operands), len(results))
        if key in fine:
            if absent:
                return False
            continue
        decl = decls.get(op.type)
        if decl is None:
            if op.type.split(".", 1)[0] in dialects:
                return False
            if not absent:
                fine.add(key)  # a dialect no pack declares: not judged here
            continue
        if absent or any(_check_arity(op, decl)):
            return False
        fine.add(key)
    if any(v.producer is None and not v.is_input and v.data is None for v in graph.outputs):
        return False
    if any(v.producer is not None for v in graph.inputs):
        return False
    if need_shapes and any(v.shape is None and (v.users or v.producer is not None or v.is_input or v.is_output)
                           for v in graph.values):
        return False
    return True


def _where(op: Op) -> str:
    return f"node `{op.name}` ({op.type})"


def _check_values(graph: Graph, live: set[int], need_shapes: bool) -> Iterable[Diagnostic]:
    """Dangling operands, unproduced outputs, produced inputs, missing shapes."""
    known = {id(v) for v in graph.values}
    seen: set[int] = set()
    for op in graph.ops:
        for v in op.operands:
            if v is None:
                continue
            p = v.producer
            if id(v) in known and (p is None and (v.is_input or v.data is not None)
                                   or p is not None and id(p) in live):
                continue  # the common case, checked with set lookups only
            i = op.operands.index(v)
            if id(v) not in known:
                yield error(f"{_where(op)} operand {i} is tensor `{v.name}`, which is not in the graph",
                            subject=f"node {op.name}", code="foreign-value")
            elif p is not None:
                yield error(f"tensor `{v.name}` (operand {i} of {_where(op)}) is produced by node "
                            f"`{p.name}`, which was removed from the graph",
                            subject=f"tensor {v.name}", code="dangling-value")
            elif id(v) not in seen:
                seen.add(id(v))
                yield error(f"tensor `{v.name}` is used by {_where(op)} (operand {i}) but has no producer and is "
                            "neither a graph input nor a constant", subject=f"tensor {v.name}",
                            code="dangling-value")
    for v in graph.outputs:
        if v.producer is None and not v.is_input and v.data is None:
            yield error(f"graph output `{v.name}` has no producer and is neither a graph input nor a constant",
                        subject=f"tensor {v.name}", code="output-not-produced")
    for v in graph.inputs:
        if v.producer is not None:
            yield error(f"graph input `{v.name}` is produced by {_where(v.producer)}",
                        subject=f"tensor {v.name}", code="input-produced")
    if need_shapes:
        for v in graph.values:
            if v.shape is None and (v.users or v.producer is not None or v.is_input or v.is_output):
                yield error(f"tensor `{v.name}` has no shape", subject=f"tensor {v.name}", code="missing-shape",
                            hint="run shape inference or declare the shape in the graph file")


def _check_ops(graph: Graph, live: set[int], decls: Mapping[str, OpDeclLike] | None) -> Iterable[Diagnostic]:
    """Unused results, unknown op types and arity against declarations."""
    dialects = {t.split(".", 1)[0] for t in decls} if decls is not None else set()
    fine: set[tuple[str, int, int, tuple[bool, ...]]] = set()  # (type, #operands, #results, absent) known good
    for op in graph.ops:
        if op.results and not any(r.users or r.is_output for r in op.results):
            yield warning(f"the results of {_where(op)} are never used and are not graph outputs",
                          subject=f"node {op.name}", code="unused-result")
        if decls is None:
            continue
        decl = decls.get(op.type)
        if decl is None:
            if op.type.split(".", 1)[0] in dialects:
                typo = typo_of(op.type, decls)
                if typo is not None:
                    yield error(f"{_where(op)} has an undeclared op type `{op.type}`", subject=f"node {op.name}",
                                code="unknown-op", hint=f"did you mean `{typo}`?")
                else:
                    yield error(f"{_where(op)}: `{op.type}` is declared in no loaded rule pack, so no rule lowers "
                                "it", subject=f"node {op.name}", code="unknown-op",
                                hint="the loaded packs do not cover this op: add an `op` declaration and rules for "
                                     "it, or load a pack (plugin) that does")
            continue
        key = (op.type, len(op.operands), len(op.results), tuple(v is None for v in op.operands))
        if key in fine:
            continue
        found = list(_check_arity(op, decl))
        if found:
            yield from found
        else:
            fine.add(key)


def _check_arity(op: Op, decl: OpDeclLike) -> Iterable[Diagnostic]:
    kinds = [d.kind for d in decl.operands]
    lo = kinds.count("one")
    hi = None if "variadic" in kinds else len(kinds)
    n = len(op.operands)
    subject = f"node {op.name}"
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if hi == lo else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        yield error(f"{_where(op)} has {n} operand{'s' * (n != 1)}; its declaration takes {want} "
                    f"({_sig(decl)})", subject=subject, code="arity")
    else:
        fixed = kinds.index("variadic") if hi is None else len(kinds)
        for i, v in enumerate(op.operands[:fixed]):
            if v is None and kinds[i] == "one":
                yield error(f"{_where(op)} is missing its required operand `{decl.operands[i].name}` "
                            f"(operand {i})", subject=subject, code="missing-operand",
                            hint="only optional operands (marked `?`) may be absent")
    fixed_results = sum(1 for r in decl.results if not r.variadic)
    variadic = any(r.variadic for r in decl.results)
    m = len(op.results)
    if m < fixed_results or (not variadic and m != fixed_results):
        want = f"at least {fixed_results}" if variadic else f"{fixed_results}"
        yield error(f"{_where(op)} has {m} result{'s' * (m != 1)}; its declaration gives {want} ({_sig(decl)})",
                    subject=subject, code="arity")


def _sig(decl: OpDeclLike) -> str:
    mark = {"one": "", "optional": "?", "variadic": "..."}
    ins = ", ".join(d.name + mark.get(d.kind, "") for d in decl.operands)
    outs = ", ".join(r.name + ("..." if r.variadic else "") for r in decl.results)
    return f"({ins}) -> ({outs})"


def _check_cycles(graph: Graph, live: set[int]) -> Iterable[Diagnostic]:
    """Kahn's algorithm over operand→producer edges; on leftovers, walk back to one cycle and name it.
    Graphs are usually stored producers-first: one pass that finds every producer already seen
    proves there is no cycle without building Kahn's tables (a million-op graph saves seconds)."""
    seen: set[int] = set()
    add = seen.add
    for op in graph.ops:
        for v in op.operands:
            if v is not None:
                p = v.producer
                if p is not None and id(p) in live and id(p) not in seen:
                    break
        else:
            add(id(op))
            continue
        break
    else:
        return
    indeg: dict[int, int] = {}
    succs: dict[int, list[Op]] = {}
    for op in graph.ops:
        k = 0
        for v in op.operands:
            p = v.producer if v is not None else None
            if p is not None and id(p) in live:
                succs.setdefault(id(p), []).append(op)
                k += 1
        indeg[id(op)] = k
    ready = [op for op in graph.ops if not indeg[id(op)]]
    done = 0
    while ready:
        op = ready.pop()
        done += 1
        for s in succs.get(id(op), ()):
            indeg[id(s)] -= 1
            if not indeg[id(s)]:
                ready.append(s)
    if done == len(indeg):
        return
    stuck = [op for op in graph.ops if indeg[id(op)]]
    # every stuck op has a stuck producer, so walking producers back must revisit an op
    path: list[Op] = []
    index: dict[int, int] = {}
    op = stuck[0]
    while id(op) not in index:
        index[id(op)] = len(path)
        path.append(op)
        op = next(v.producer for v in op.operands
                  if v is not None and v.producer is not None and indeg.get(id(v.producer), 0))
    cycle = path[index[id(op)]:][::-1]  # producer → consumer order
    order = {id(o): i for i, o in enumerate(graph.ops)}
    first = min(range(len(cycle)), key=lambda i: order[id(cycle[i])])
    cycle = cycle[first:] + cycle[:first]  # start at the op that comes first in the graph
    names = " → ".join(f"`{o.name}`" for o in cycle + cycle[:1])
    notes = [] if len(stuck) == len(cycle) else [
        Note(f"{len(stuck)} ops in all cannot be ordered because of cycles")]
    yield error(f"the graph has a cycle: {names}", subject=f"node {cycle[0].name}", code="cycle", notes=notes)
