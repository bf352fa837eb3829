"""Lowering decides what to do with the ops of one type once (`Engine._lower`): pure retypes and
memoised one-op rules (`qlower.rewrite.memo`) are applied in place, everything else goes the general
way, and the counts are added per type at the end; the cleanup fixpoint turns away, by a quick look
at their operands' producers, the ops no candidate can match (`match.producer_filter`), and queues
nothing until a rule fires. Both must rewrite exactly as the engine did op by op (the loops kept
here as `_reference_run`, on an engine compiled without any short path): the same ops, types,
attributes (values and their types), operands, provenance, coverage (dict order included), rule
statistics and diagnostics, on random graphs over the shipped mllm and qnn packs and over rules
made to hit every memo case, and on the graphs of every shipped pack's test blocks."""

from __future__ import annotations

import collections
import functools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qlower
from qlower import Graph
from qlower.diagnostics import error
from qlower.graph.core import GraphError
from qlower.lang.parser import parse
from qlower.rewrite import driver
from qlower.rewrite.compile import compile_rule
from qlower.rewrite.driver import Coverage, Engine, Outcome, RuleStats
from qlower.rewrite.memo import emit_reads, match_reads

BACKENDS = ["cpu", "gpu", "htp", "dsp", "lpai"]


_GENERAL: dict[tuple[int, str], tuple[qlower.Rules, Engine]] = {}


def _general(rules: qlower.Rules, backend: str) -> Engine:
    """`rules`' engine for `backend` with no short path at all: no retypes or memo, and every rule
    compiled with the general matcher alone (made once per rule set: a pack compiles in seconds)."""
    got = _GENERAL.get((id(rules), backend))
    if got is None or got[0] is not rules:
        fast = rules.engine(backend)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(driver, "compile_rule", functools.partial(compile_rule, fast=False))
            engine = Engine(rules.ruleset.rules, rules.ruleset.ops, registry=fast.registry, backend=backend,
                            functions=rules.functions, target=rules.registry.dialect, fast_retypes=False)
        assert not any(r.straight or r.quick for r in engine.all_rules)
        got = _GENERAL[id(rules), backend] = (rules, engine)
    return got[1]


def _reference_fixpoint(engine: Engine, graph: Graph, index, what: str, out: Outcome, reasons,
                        config: driver.RewriteConfig) -> None:
    """Engine._fixpoint as it was: one queue of every op, every op through `_apply_first`."""
    try:
        work = collections.deque(graph.topo_order())
    except GraphError as exc:
        out.diagnostics.append(error(str(exc), code="cycle"))
        return
    budget = driver.Budget(config, len(work))
    recent: collections.deque[str] = collections.deque(maxlen=32)
    applied = 0
    queued = {id(o) for o in work}
    while work:
        op = work.popleft()
        queued.discard(id(op))
        if op.dead:
            continue
        cands = index.candidates(op.type)
        if not cands:
            continue
        done = engine._apply_first(graph, op, cands, out, reasons, set())
        if done is None:
            continue
        name, new_ops = done
        applied += 1
        recent.append(name)
        if budget.exhausted(applied, len(graph)):
            out.diagnostics.append(budget.error(what, applied, recent, index.rules))
            return
        touched = list(new_ops)
        for n in new_ops:
            touched.extend(u for r in n.results for u, _ in r.users)
        for o in touched:
            if not o.dead and id(o) not in queued:
                work.append(o)
                queued.add(id(o))


def _reference_run(engine: Engine, graph: Graph, config: driver.RewriteConfig = driver.RewriteConfig()) -> Outcome:
    """Engine.run as it was before per-type lowering: coverage from a count of every op's type,
    then each source op through `_apply_first`, then every op through `_legality`."""
    out = Outcome(graph, [], {}, {r.name: RuleStats() for r in engine.all_rules})
    reasons: dict = collections.defaultdict(list)
    if engine.source.rules:
        _reference_fixpoint(engine, graph, engine.source, "source rewrites", out, reasons, config)
    try:
        order = graph.topo_order()
    except GraphError as exc:
        out.diagnostics.append(error(str(exc), code="cycle"))
        return out
    prefix = engine.target + "."
    for op_type, n in collections.Counter(op.type for op in order).items():
        if not op_type.startswith(prefix):
            out.coverage[op_type] = Coverage(count=n)
    failed: set[int] = set()
    for op in reversed(order):
        if op.dead or op.type.startswith(prefix):
            continue
        cands = engine.lowering.by_type.get(op.type)
        if cands:
            engine._apply_first(graph, op, cands, out, reasons, failed)
    engine._legality(graph, out, reasons, failed)
    if engine.cleanup.rules:
        _reference_fixpoint(engine, graph, engine.cleanup, "cleanup rewrites", out, reasons, config)
    out.stats = dict(out.stats)
    return out


def _exact(x):
    """A value with its type, recursively (True and 1, 0.0 and -0.0, a list and an array differ)."""
    if isinstance(x, dict):
        return ("dict", [(k, _exact(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_exact(v) for v in x])
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.shape, x.tolist())
    if isinstance(x, float):
        return ("float", x.hex() if not math.isnan(x) else "nan")
    return (type(x).__name__, repr(x))


def _snapshot(out: Outcome, g: Graph):
    ops = [(o.name, o.type, _exact(o.attrs), [v.name if v is not None else None for v in o.operands],
            [r.name for r in o.results], o.provenance, o.dead) for o in g.ops]
    values = [(v.name, v.shape, str(v.dtype), v.producer.name if v.producer else None) for v in g.values]
    cov = [(t, c.count, list(c.rules.items()), list(c.emitted.items()), c.unlowered)
           for t, c in out.coverage.items()]
    stats = [(k, s.tries, s.matches, s.applied) for k, s in out.stats.items()]
    diags = [(d.code, d.message, d.subject, d.hint, [n.message for n in d.notes]) for d in out.diagnostics]
    return ops, values, [v.name for v in g.outputs], cov, stats, diags


def _same(rules: qlower.Rules, backend: str, build, budget_factor: int = 8) -> None:
    config = driver.RewriteConfig(budget_factor=budget_factor)
    """Lower fresh copies of one graph three ways: the engine, the engine without short paths, and
    the op-by-op reference loops on it; all three must agree."""
    general = _general(rules, backend)
    want_g = build()
    want = _snapshot(_reference_run(general, want_g, config), want_g)
    for engine in (rules.engine(backend), general):
        g = build()
        assert _snapshot(engine.run(g, config=config), g) == want


# ------------------------------------------------------------------ the mllm pack

@functools.cache
def _mllm() -> qlower.Rules:
    return qlower.load_rules(packs=["mllm"])


def test_the_benchmark_ops_take_the_short_paths() -> None:
    e = _mllm().engine("cpu")
    assert "mllm.matmul" in e.templates
    assert {"mllm.sigmoid", "mllm.mul", "mllm.add"} <= set(e.retypes)


_ATTR = st.sampled_from([None, False, True, 0, 1, 1.0, -1, 2, [1], "x"])


@st.composite
def mllm_steps(draw):
    """Ops over a pool of values of mixed ranks and dtypes: (type, operand indices (None: absent),
    attrs, result shape)."""
    steps = []
    n = 3  # x (input), w (const), i (int32 input)
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["mllm.MatMul", "mllm.MatMul", "mllm.Sigmoid", "mllm.Mul", "mllm.Add",
                                     "mllm.Softmax", "mllm.GELU", "mllm.Transpose", "mllm.Nope"]))
        arity = 2 if kind in ("mllm.MatMul", "mllm.Mul", "mllm.Add") else 1
        arity += draw(st.sampled_from([0, 0, 0, 0, 1, -1])) if arity == 2 else 0
        ins = [draw(st.integers(0, n - 1) | st.none()) if draw(st.integers(0, 9)) == 0
               else draw(st.integers(0, n - 1)) for _ in range(arity)]
        attrs = {}
        for name in {"mllm.MatMul": ["transpose_a", "transpose_b"], "mllm.Softmax": ["dim"],
                     "mllm.GELU": ["approximate"], "mllm.Transpose": ["dim0", "dim1"]}.get(kind, []):
            v = draw(_ATTR if kind != "mllm.GELU" else st.sampled_from([None, "none", "tanh"]))
            if kind == "mllm.Transpose":
                v = draw(st.integers(-2, 1))  # (the cleanup pack merges and cancels transposes)
            if v is not None:
                attrs[name] = v
        shape = draw(st.sampled_from([(1, 8), (2, 8, 8), (8, 8), (3,), None]))
        steps.append((kind, ins, attrs, shape))
        n += 1
    return steps


def _mllm_graph(steps):
    def build() -> Graph:
        g = Graph("g")
        vals = [g.add_value("x", "float32", [2, 8, 8]), g.add_value("w", "float32", [8, 8], data=np.ones((8, 8),
                                                                                                     np.float32)),
                g.add_value("i", "int32", [8, 8])]
        for j, (kind, ins, attrs, shape) in enumerate(steps):
            v = g.add_value(f"v{j}", "float32", shape)
            g.add_op(f"n{j}", kind, [vals[i] if i is not None else None for i in ins], [v], dict(attrs))
            vals.append(v)
        g.set_io([vals[0], vals[2]], [vals[-1]])
        return g
    return build


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mllm_steps(), st.sampled_from(BACKENDS))
def test_mllm_graphs_lower_as_op_by_op(steps, backend) -> None:
    _same(_mllm(), backend, _mllm_graph(steps))


def test_coverage_keeps_the_order_rules_first_applied_in() -> None:
    """The second MatMul (lowered first) takes the memo; the first one's ranks differ, so the general
    path aligns it: coverage lists matmul, then matmul_align, and MatMul before Reshape, as when
    each op was counted as it was lowered."""
    steps = [("mllm.MatMul", [0, 1], {}, (2, 8, 8)), ("mllm.MatMul", [3, 0], {}, (2, 8, 8))]
    build = _mllm_graph(steps)
    _same(_mllm(), "cpu", build)
    g = build()
    cov = _mllm().engine("cpu").run(g).coverage["mllm.MatMul"]
    assert list(cov.rules) == ["mllm.matmul", "mllm.matmul_align"]
    assert list(cov.emitted) == ["qnn.MatMul", "qnn.Reshape"]


# ------------------------------------------------------------------ rules made for the memo's cases

MEMO_RULES = """\
op m.A(x, z) -> y { k: int = 0 }
op m.R(x, z) -> y { k: int = 0 }
op m.C(x, z) -> y commutative
op m.S(x) -> y { d: int = -1, f: float = 1.0 }
op m.E(x) -> y { a: float = 1.0 }
op m.Y(x) -> y
op m.B(x) -> y
op m.D(x) -> y

# a typed constant capture, an attribute literal, a guard on a dtype; the others when it does not match
rule a_const benefit 3 {
  match y = m.A(x, w: const [_, _]) { k: 1 }
  require dtype(x) == "float32"
  emit y = qnn.MatMul(x, w) { transpose_in0: false, transpose_in1: true }
}

rule a_rank {
  match y = m.A(x, z) { k: k }
  require rank(x) == rank(z)
  emit y = qnn.MatMul(x, z) { transpose_in0: k > 1, transpose_in1: k == 3 }
}

rule a_fail {
  match y = m.A(x, z)
  fail "ranks " ++ str(rank(x)) ++ " and " ++ str(rank(z))
}

# an attribute capture through a let into params; a failing guard lets the next rule try
rule r_rank {
  match y = m.R(x, z) { k: k }
  let t = k > 1
  require rank(x) >= 2
  emit y = qnn.MatMul(x, z) { transpose_in0: t, transpose_in1: k == 3 }
}

map m.R(x, z) -> qnn.ElementWiseAdd(x, z)

# commutative: the swapped order emits a new op (not a retype)
rule c_typed {
  match y = m.C(x: int32, z)
  emit y = qnn.ElementWiseAdd(x, z)
}

# params that can fail (normdim), a float param taken from an attribute (0.0 and -0.0)
rule s_axis {
  match y = m.S(x) { d: d, f: f }
  emit y = qnn.Softmax(x) { axis: normdim(d, rank(x)), beta: f }
}

# an op some backends lack (Elu: not on LPAI): the next rule lowers it there
rule e_elu {
  match y = m.E(x) { a: a }
  emit y = qnn.Elu(x) { alpha: a }
}

map m.E(x) -> qnn.Relu(x)

# a guard on the result's shape
rule y_result {
  match y = m.Y(x)
  require rank(y) == rank(x)
  emit y = qnn.Relu(x)
}

map m.B(x) -> qnn.Relu(x)

# a source rewrite: the ops it makes are lowered standing for the op they came from
rule d_twice {
  match y = m.D(x)
  emit {
    t = m.B(x) : shape shape(x)
    y = m.S(t)
  }
}
"""


@functools.cache
def _memo_rules() -> qlower.Rules:
    return qlower.rules_from_text(MEMO_RULES)


def test_which_rules_are_decided_by_key() -> None:
    e = _memo_rules().engine("cpu")
    assert set(e.retypes) == {"r", "e", "b"}
    memoised = {"a_const", "a_rank", "r_rank", "c_typed", "s_axis", "e_elu", "y_result"}
    assert set(e.templates) == memoised | set(e.retypes)
    assert set(e.decidable) == set(e.templates) | {"a_fail", "d_twice"}


_MEMO_TYPES = ["m.A", "m.R", "m.C", "m.S", "m.E", "m.Y", "m.B", "m.D"]
_MEMO_ATTRS = {"m.A": ["k"], "m.R": ["k"], "m.S": ["d", "f"], "m.E": ["a"]}
_MEMO_VALUE = st.sampled_from([None, 0, 1, 2, 3, True, False, 1.0, 0.0, -0.0, 0.5, -4, 7, [1], "s"])


@st.composite
def memo_steps(draw):
    steps = []
    n = 4  # x f32[2, 3], c const f32[3, 4], i int32[2, 3], v f32[3]
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(_MEMO_TYPES))
        arity = 2 if kind in ("m.A", "m.R", "m.C") else 1
        if draw(st.integers(0, 7)) == 0:
            arity += draw(st.sampled_from([-1, 1]))
        ins = [None if draw(st.integers(0, 11)) == 0 else draw(st.integers(0, 3) | st.integers(0, n - 1))
               for _ in range(arity)]
        attrs = {}
        for name in _MEMO_ATTRS.get(kind, []):
            v = draw(st.sampled_from([None, 1, 3]) | _MEMO_VALUE)
            if v is not None:
                attrs[name] = v
        shape = draw(st.sampled_from([(2, 3), (3, 4), (3,), (2, 3, 4)]))
        dtype = draw(st.sampled_from(["float32", "int32"]))
        steps.append((kind, ins, attrs, shape, dtype))
        n += 1
    return steps


def _memo_graph(steps):
    def build() -> Graph:
        g = Graph("g")
        vals = [g.add_value("x", "float32", [2, 3]),
                g.add_value("c", "float32", [3, 4], data=np.ones((3, 4), np.float32)),
                g.add_value("i", "int32", [2, 3]), g.add_value("v", "float32", [3])]
        for j, (kind, ins, attrs, shape, dtype) in enumerate(steps):
            r = g.add_value(f"v{j}", dtype, shape)
            g.add_op(f"n{j}", kind, [vals[i] if i is not None else None for i in ins], [r], dict(attrs))
            vals.append(r)
        g.set_io([vals[0], vals[2], vals[3]], [vals[-1]])
        return g
    return build


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memo_steps(), st.sampled_from(["cpu", "htp", "lpai"]))
def test_memoised_rules_lower_as_op_by_op(steps, backend) -> None:
    _same(_memo_rules(), backend, _memo_graph(steps))


def test_one_key_many_ops(monkeypatch) -> None:
    """Many ops of one key share the memo entry, each with its own params dict and provenance; ops of
    another key (a -0.0 attribute) get their own. The rules are matched once per key, and no op takes
    the general path (what the memo is for: equivalence alone would hold without it)."""
    steps = [("m.S", [0], {"f": 0.5}, (2, 3), "float32")] * 5 + [("m.S", [0], {"f": -0.0}, (2, 3), "float32"),
                                                                  ("m.S", [0], {"f": 0.0}, (2, 3), "float32")]
    build = _memo_graph(steps)
    _same(_memo_rules(), "cpu", build)
    g = build()
    calls = {"decide": 0, "general": 0}
    decide, general = Engine._decide, Engine._apply_first

    def counting(name, real):
        def f(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return f

    monkeypatch.setattr(Engine, "_decide", counting("decide", decide))
    monkeypatch.setattr(Engine, "_apply_first", counting("general", general))
    _memo_rules().engine("cpu").run(g)
    assert calls == {"decide": 3, "general": 0}
    ops = list(g.ops)
    assert len({id(o.attrs) for o in ops}) == len(ops)
    assert [math.copysign(1, o.attrs["beta"]) for o in ops[-2:]] == [-1, 1]
    assert [o.provenance.sources for o in ops] == [(f"n{j}",) for j in range(len(ops))]


def test_the_memo_tells_operand_dtypes_apart() -> None:
    """Two ops that differ only in their operands' dtype: `c_typed` matches the int32 one only, in
    either order (a key without dtypes would give the second op the first one's decision)."""
    int_op, float_op = ("m.C", [2, 2], {}, (2, 3), "int32"), ("m.C", [0, 0], {}, (2, 3), "float32")
    for steps in ([int_op, float_op], [float_op, int_op]):
        _same(_memo_rules(), "cpu", _memo_graph(steps))


# ------------------------------------------------------------------ the cleanup fixpoint

@functools.cache
def _qnn() -> qlower.Rules:
    return qlower.load_rules(packs=["qnn"])


def test_the_cleanup_rules_have_quick_checks() -> None:
    e = _qnn().engine("htp")
    assert {"transpose_below_unary", "transpose_below_binary", "transpose_pair"} <= {
        r.name.split(".")[-1] for r in e.cleanup.rules if r.quick is not None}


_QNN_UNARY = ["qnn.Relu", "qnn.Sigmoid", "qnn.Tanh", "qnn.ElementWiseNeg"]
_QNN_BINARY = ["qnn.ElementWiseAdd", "qnn.ElementWiseMultiply"]
_PERMS = {3: [(0, 1, 2), (0, 2, 1), (1, 0, 2), (2, 0, 1), (1, 2, 0)], 2: [(0, 1), (1, 0)],
          5: [(0, 1, 2, 3, 4), (0, 1, 2, 4, 3), (4, 3, 2, 1, 0)], 4: [(0, 1, 2, 3), (0, 2, 1, 3)]}


@st.composite
def qnn_steps(draw):
    """QNN ops over [2, 3, 4]-ish values and a rank-5 one (which HTP's rank rules reshape to rank 4):
    transposes (which the rules sink, merge and cancel), reshapes, elementwise ops; (type, operand
    indices, which perm of the operand's rank or None)."""
    steps = []
    n = 3
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["qnn.Transpose"] * 3 + ["qnn.Reshape"] + _QNN_UNARY + _QNN_BINARY))
        arity = 2 if kind in _QNN_BINARY else 1
        ins = [draw(st.integers(max(0, n - 3), n - 1) | st.integers(0, n - 1)) for _ in range(arity)]
        perm = draw(st.integers(0, 4)) if kind == "qnn.Transpose" else None
        steps.append((kind, ins, perm))
        n += 1
    return steps


def _qnn_graph(steps):
    def build() -> Graph:
        g = Graph("g")
        vals = [g.add_value("x", "float32", [2, 3, 4]), g.add_value("z", "float32", [2, 3, 4]),
                g.add_value("w", "float32", [2, 1, 3, 2, 2])]
        for j, (kind, ins, choice) in enumerate(steps):
            src = vals[ins[0]]
            perms = _PERMS[len(src.shape)]
            perm = perms[choice % len(perms)] if choice is not None else None
            shape = [src.shape[p] for p in perm] if perm is not None else list(src.shape)
            if kind == "qnn.Reshape":
                shape = [shape[0] * shape[1], *shape[2:]] if len(shape) >= 3 else shape
            r = g.add_value(f"v{j}", "float32", shape)
            attrs = {"perm": np.array(perm, np.uint32)} if perm is not None else {}
            g.add_op(f"n{j}", kind, [vals[i] for i in ins], [r], attrs)
            vals.append(r)
        used = {id(v) for op in g.ops for v in op.operands}
        g.set_io(vals[:3], [v for v in vals[3:] if id(v) not in used])
        return g
    return build


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(qnn_steps(), st.sampled_from(["cpu", "htp"]), st.sampled_from([8, 0]))
def test_cleanup_rewrites_as_op_by_op(steps, backend, budget_factor) -> None:
    """(A budget factor of 0 stops long rewrites midway: the budget counts the same.)"""
    _same(_qnn(), backend, _qnn_graph(steps), budget_factor)


FLIPPING = """\
map qnn.Relu(x) -> qnn.Sigmoid(x)
map qnn.Sigmoid(x) -> qnn.Relu(x)

rule add_t {
  match y = qnn.ElementWiseAdd(qnn.Transpose(x) { perm: p }, z)
  emit y = qnn.ElementWiseAdd(x, z)
}
"""


@pytest.mark.parametrize("budget_factor", [0, 8])
def test_a_cleanup_that_does_not_converge_stops_as_op_by_op(budget_factor) -> None:
    """The budget runs out (two rules undo each other) while the quick checks turn the adds away:
    the same diagnostic, and the same tries counted for the turned-away ops."""
    def build() -> Graph:
        g = Graph("g")
        x = g.add_value("x", "float32", [2, 3])
        prev = x
        for j in range(6):
            r = g.add_value(f"r{j}", "float32", [2, 3])
            g.add_op(f"relu{j}", "qnn.Relu", [prev], [r])
            a = g.add_value(f"a{j}", "float32", [2, 3])
            g.add_op(f"add{j}", "qnn.ElementWiseAdd", [r, x], [a])
            prev = a
        g.set_io([x], [prev])
        return g

    rules = qlower.rules_from_text(FLIPPING)
    _same(rules, "cpu", build, budget_factor)
    g = build()
    out = rules.engine("cpu").run(g, config=driver.RewriteConfig(budget_factor=budget_factor))
    assert [d.code for d in out.diagnostics] == ["no-fixpoint"] and out.stats["add_t"].tries > 0


# ------------------------------------------------------------------ what the memo may key

def _rule(text: str):
    (item,) = [i for i in parse(text, "t.qpat").items if i.__class__.__name__ == "Rule"]
    return item


def test_what_a_memo_may_key() -> None:
    functions = _mllm().functions
    keyed = [
        "rule r { match y = m.A(x, z) { k: k }\n require rank(x) == rank(z)\n emit y = qnn.B(x, z) { p: k } }",
        "rule r { match y = m.A(x: const f32[_, n])\n let s = shape(x)\n emit y = qnn.B(x) { p: s[0] * n } }",
        "rule r { match y = m.A(x)\n require dtype(y) == \"float32\"\n emit y = qnn.B(x) { p: numel(x) } }",
    ]
    for text in keyed:
        assert emit_reads(_rule(text), functions) is not None, text
    not_keyed = [
        "rule r { match y = m.A(x)\n require is_const(x)\n emit y = qnn.B(x) }",  # reads more than a key holds
        "rule r { match y = m.A(x, z)\n require x == z\n emit y = qnn.B(x, z) }",  # a value as itself
        "rule r { match y = m.A(x)\n require optype(x) == \"m.C\"\n emit y = qnn.B(x) }",  # its producer
        "rule r { match y = m.A(x)\n emit y = qnn.B(x) { p: uses(x) } }",  # the graph around it
        "rule r { match y = m.A(x)\n emit y = qnn.B(x) { p: encoding(x) } }",
        "rule r { match y = m.A(x)\n emit y = qnn.B(x) { p: no_such_function(x) } }",
    ]
    for text in not_keyed:
        assert emit_reads(_rule(text), functions) is None, text


# ------------------------------------------------------------------ the shipped packs' test graphs

def _test_graph(case):
    from qlower.verify.testcase import _int_range, _ranges, _shape
    from qlower.lang import ast

    dims = {r: r[0] for r in _ranges(case.test)}
    feeds = {}
    for s in case.test.body:
        if isinstance(s, ast.TestInput):
            dtype, quant = case._type(s.type, s.props)
            shape = _shape(s.type, dims)
            lo = _int_range(dtype, quant)[0] if quant is not None else 0
            feeds[s.name] = np.full(shape, lo, dtype)
    try:
        case.build(dims, feeds)
    except Exception:  # noqa: BLE001  (a graph its kernels refuse at the smallest dims: nothing to lower)
        return None
    return lambda: case.build(dims, feeds)[0]


@pytest.mark.parametrize("pack", ["mllm", "onnx", "aten", "qnn"])
def test_pack_test_graphs_lower_as_op_by_op(pack) -> None:
    from qlower.verify.testcase import RuleTest

    rules = qlower.load_rules(packs=[pack])
    built = 0
    for test in rules.ruleset.tests:
        case = RuleTest(test, rules, pack)
        build = _test_graph(case)
        if build is None:
            continue
        built += 1
        for backend in case.backends:
            _same(rules, backend, build)
    assert built > len(rules.ruleset.tests) // 2
