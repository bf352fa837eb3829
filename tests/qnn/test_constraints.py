"""The constraints file: its checker, the documented probes of issue 11, and one probe pair per rank check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qlower.diagnostics import QlowerError
from qlower.qnn.constraints import load_constraints, parse_constraints
from qlower.qnn.datatypes import DataType as D
from qlower.qnn.model import OpConfig, QnnGraph, QnnTensor, ScalarParam, TensorParam, TensorType
from qlower.qnn.opdef import SHIPPED_DIR, OpDefRegistry
from qlower.qnn.validate import validate_op

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = SHIPPED_DIR / "constraints.json"


@pytest.fixture(scope="module")
def registry() -> OpDefRegistry:
    return OpDefRegistry.load()


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(CONSTRAINTS.read_text(encoding="utf-8"))


def one_op(type_: str, ins: list[tuple[D, tuple[int, ...]]], outs: list[tuple[D, tuple[int, ...]]],
           params: list = ()) -> tuple[OpConfig, QnnGraph]:
    g = QnnGraph("g")
    names_in = [g.add_tensor(QnnTensor(f"x{i}", TensorType.NATIVE, dt, dims)).name for i, (dt, dims) in enumerate(ins)]
    names_out = [g.add_tensor(QnnTensor(f"y{i}", TensorType.NATIVE, dt, dims)).name for i, (dt, dims) in enumerate(outs)]
    op = OpConfig("probe", type_, names_in, names_out, list(params))
    g.ops.append(op)
    return op, g


def errors(op: OpConfig, g: QnnGraph, reg: OpDefRegistry, backend: str, code: str) -> list[str]:
    return [d.message for d in validate_op(op, g, reg, backend) if d.code == code and d.severity.name == "ERROR"]


# ---------------------------------------------------------------- the shipped file and its checker


def test_shipped_constraints_pass_the_checker() -> None:
    cs, problems = load_constraints(CONSTRAINTS)
    assert problems == [] and cs is not None and len(cs.ops) > 500


def test_every_item_is_checked_or_explained(data: dict) -> None:
    """Nothing is silently dropped: each documented constraint has checks or a known reason."""
    reasons = data["not_modelled_reasons"]
    seen = 0
    for op, per in data["ops"].items():
        for backend, entry in per.items():
            for item in entry.get("constraints", []):
                seen += 1
                assert ("checks" in item) != ("not_modelled" in item), (op, backend, item)
                assert item.get("not_modelled", next(iter(reasons))) in reasons
                assert len(item["ref"]) == 10
    assert seen > 1500
    table = (SHIPPED_DIR / "NOT_MODELLED.md").read_text(encoding="utf-8")
    not_modelled = sum(1 for per in data["ops"].values() for e in per.values()
                       for i in e.get("constraints", []) if "not_modelled" in i)
    assert sum(1 for line in table.splitlines() if line.count("`") == 2 and line.startswith("| ")) == not_modelled


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema="other/1"), "$.schema"),
    (lambda d: d["ops"]["Tile"]["htp"]["constraints"][0].update(checks=[{"kind": "rnk", "target": "in[0]"}]),
     "unknown check kind 'rnk'"),
    (lambda d: d["ops"]["Tile"]["htp"]["constraints"][0].update(not_modelled="because"), "exactly one of"),
    (lambda d: d["ops"]["Tile"]["htp"]["rows"][0]["datatypes"].update({"in[0]": ["QNN_DATATYPE_FLOAT_99"]}),
     "unknown datatype"),
    (lambda d: d["ops"]["Tile"]["htp"]["constraints"][0]["checks"][0].update(when={"colour": ["red"]}),
     "unknown condition"),
])
def test_checker_names_the_problem(data: dict, mutate, message: str) -> None:
    bad = json.loads(json.dumps(data))
    mutate(bad)
    cs, problems = parse_constraints(bad, "c.json")
    assert cs is None and any(message in d.message for d in problems)
    assert all(d.subject == "c.json" for d in problems)


def test_user_constraints_file_names_unknown_entries(tmp_path: Path) -> None:
    doc = {"schema": "qlower-opdef-constraints/1", "package": "qti.aisw", "not_modelled_reasons": {},
           "ops": {"Tile": {"gpu": {"constraints": [
               {"ref": "0000000000", "config": "All", "checks": [{"kind": "rank", "target": "in[9]", "max": 3}]}]}}}}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    xml = [SHIPPED_DIR / "master.xml", SHIPPED_DIR / "gpu.xml"]  # without the shipped constraints
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([*xml, path])
    assert "unknown entry `in[9]`" in str(exc.value)
    path.write_text(json.dumps(doc).replace("in[9]", "in[0]"), encoding="utf-8")
    reg = OpDefRegistry.from_files([*xml, path])
    op, g = one_op("Tile", [(D.FLOAT_32, (2, 2, 2, 2))], [(D.FLOAT_32, (2, 2, 2, 2))])
    assert any("supports rank" in m for m in errors(op, g, reg, "gpu", "rank"))


# ---------------------------------------------------------------- issue 11's probes


def test_gpu_transpose_rank_6_refused(registry: OpDefRegistry) -> None:
    for rank, bad in ((6, True), (5, False)):
        op, g = one_op("Transpose", [(D.FLOAT_32, (2,) * rank)], [(D.FLOAT_32, (2,) * rank)])
        found = errors(op, g, registry, "gpu", "rank")
        assert bool(found) == bad, found


def test_gpu_unpack_rank_5_refused(registry: OpDefRegistry) -> None:
    for rank, bad in ((5, True), (4, False)):
        op, g = one_op("UnPack", [(D.FLOAT_32, (2,) * rank)], [(D.FLOAT_32, (2,) * (rank - 1))] * 2)
        assert bool(errors(op, g, registry, "gpu", "rank")) == bad


def test_cpu_gather_elements_rank_3_refused(registry: OpDefRegistry) -> None:
    for rank, bad in ((3, True), (4, False)):
        op, g = one_op("GatherElements", [(D.FLOAT_32, (2,) * rank), (D.INT_32, (2,) * rank)],
                       [(D.FLOAT_32, (2,) * rank)])
        assert bool(errors(op, g, registry, "cpu", "rank")) == bad


@pytest.mark.parametrize("dims, bad", [((2, 3, 8), True), ((1, 3, 8), False), ((2, 3, 8, 4), False)])
def test_htp_instance_norm_fp16(registry: OpDefRegistry, dims: tuple[int, ...], bad: bool) -> None:
    c = dims[-1]
    op, g = one_op("InstanceNorm", [(D.FLOAT_16, dims), (D.FLOAT_16, (c,)), (D.FLOAT_16, (c,))], [(D.FLOAT_16, dims)])
    found = errors(op, g, registry, "htp", "rank")
    assert bool(found) == bad, found
    if bad:
        assert "outermost dimension 1" in found[0]


@pytest.mark.parametrize("operation, bad", [("SQRT", True), ("ABS", False), ("RSQRT", False)])
def test_htp_elementwise_unary_rank_5_fp16(registry: OpDefRegistry, operation: str, bad: bool) -> None:
    value = registry.enum_value("ElementWiseUnary", "operation", operation)
    op, g = one_op("ElementWiseUnary", [(D.FLOAT_16, (2,) * 5)], [(D.FLOAT_16, (2,) * 5)],
                   [ScalarParam("operation", D.UINT_32, value)])
    found = errors(op, g, registry, "htp", "rank")
    assert bool(found) == bad, found
    if bad:
        assert "SQRT" in found[0] and "in[0] `x0`" in found[0]


@pytest.mark.parametrize("dt, bad", [(D.UFIXED_POINT_8, False), (D.INT_32, True)])
def test_dsp_concat_rank_5_by_datatype(registry: OpDefRegistry, dt: D, bad: bool) -> None:
    op, g = one_op("Concat", [(dt, (2,) * 5)] * 2, [(dt, (2, 2, 2, 2, 4))], [ScalarParam("axis", D.UINT_32, 4)])
    assert bool(errors(op, g, registry, "dsp", "rank")) == bad


def test_value_ranges_and_operations(registry: OpDefRegistry) -> None:
    op, g = one_op("Softmax", [(D.FLOAT_32, (2, 3))], [(D.FLOAT_32, (2, 3))], [ScalarParam("axis", D.UINT_32, 2)])
    assert any("must be <= N-1 = 1" in m for m in errors(op, g, registry, "cpu", "param-value"))
    op.params[0] = ScalarParam("axis", D.UINT_32, 1)
    assert errors(op, g, registry, "cpu", "param-value") == []
    # GPU's ElementWiseBinary does not do FMOD (documented), but does ADD
    for name, bad in (("FMOD", True), ("ADD", False)):
        value = registry.enum_value("ElementWiseBinary", "operation", name)
        op, g = one_op("ElementWiseBinary", [(D.FLOAT_32, (2, 2))] * 2, [(D.FLOAT_32, (2, 2))],
                       [ScalarParam("operation", D.UINT_32, value)])
        assert bool(errors(op, g, registry, "gpu", "operation")) == bad


def test_htp_transpose_rank_dependent_datatypes(registry: OpDefRegistry) -> None:
    perm = lambda n: [ScalarParam("perm", D.UINT_32, 0)]  # noqa: E731 - datatype checks do not read perm
    op, g = one_op("Transpose", [(D.BOOL_8, (2,) * 5)], [(D.BOOL_8, (2,) * 5)], perm(5))
    assert any("BOOL_8" in m for m in errors(op, g, registry, "htp", "datatype"))
    op, g = one_op("Transpose", [(D.BOOL_8, (2,) * 4)], [(D.BOOL_8, (2,) * 4)], perm(4))
    assert not any("must be" in m for m in errors(op, g, registry, "htp", "datatype"))


# ---------------------------------------------------------------- generated: every rank check


def _rank_probes(data: dict) -> list[tuple]:
    out = []
    for op, per in sorted(data["ops"].items()):
        for backend, entry in per.items():
            if backend == "all":
                continue
            for item in entry.get("constraints", []):
                for check in item.get("checks", []):
                    if check["kind"] == "rank" and set(check.get("when", {})) <= {"operations", "except_operations"}:
                        out.append((op, backend, item["config"], check))
    return out


def _choose_rank(check: dict, fixed: int | None) -> tuple[int, int | None]:
    lo, hi, ranks = check.get("min", 1), check.get("max"), check.get("ranks")
    good = max(ranks) if ranks else (hi if hi is not None else max(lo, 1))
    if fixed is not None and lo <= fixed and (hi is None or fixed <= hi) and (not ranks or fixed in ranks):
        good = fixed  # the master definition fixes the rank
    if hi is not None and hi < 8:
        bad = hi + 1
    elif ranks:
        bad = next(r for r in range(1, 9) if r not in ranks)
    else:
        bad = lo - 1 if lo >= 1 else None
    return good, bad


def _row_datatypes(reg: OpDefRegistry, op: str, backend: str, config: str) -> dict:
    supp = reg.supplement(op, backend)
    rows = [r for r in (supp.rows if supp else ()) if config == "All" or r.config == config]
    chosen: dict = {}
    if rows:
        configs_of = {}
        for r in supp.rows:
            for n, dts in r.entries:
                for dt in dts:
                    configs_of.setdefault((n, dt), set()).add(r.config)
        row = rows[0]
        for n, dts in row.entries:
            pick = sorted(dts, key=lambda dt: (len(configs_of[(n, dt)]), dt.value))[0]
            chosen[n] = pick
    return chosen


def _operation(reg: OpDefRegistry, op: str, check: dict) -> list:
    when = check.get("when", {})
    pd = reg.param(op, "operation")
    if pd is None or pd.enum is None:
        return []
    names = sorted(when["operations"]) if "operations" in when else \
        [n for n in pd.enum if n not in when.get("except_operations", [])]
    return [ScalarParam("operation", D.UINT_32, pd.enum.index(names[0]))] if names else []


PROBES = _rank_probes(json.loads(CONSTRAINTS.read_text(encoding="utf-8")))


def test_rank_probes_cover_the_rank_checks() -> None:
    assert len(PROBES) > 400


@pytest.mark.parametrize("op, backend, config, check", PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[2]}-{p[3]['target']}-{i}" for i, p in enumerate(PROBES)])
def test_rank_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    """A graph breaking the documented rank limit is refused naming the node and tensor; its twin is not."""
    opdef = registry.op(op)
    defs = {io.name: io for io in opdef.inputs + opdef.outputs}
    target = defs.get(check["target"])
    good, bad = _choose_rank(check, target.ndim if target else None)
    assert bad is not None, f"{check} cannot be broken"
    dts = _row_datatypes(registry, op, backend, config)
    params = _operation(registry, op, check)
    found = {}
    for rank in (good, bad):
        g = QnnGraph("g")
        ins, outs, target_names = [], [], []
        for kind, defs, names in (("in", opdef.inputs, ins), ("out", opdef.outputs, outs)):
            last = max([i for i, io in enumerate(defs) if io.mandatory or io.name == check["target"]], default=-1)
            for i, io in enumerate(defs[:last + 1]):
                dt = dts.get(io.name) or (io.datatypes[0] if io.datatypes else D.FLOAT_32)
                r = rank if io.name == check["target"] else (io.ndim if io.ndim is not None else good)
                t = g.add_tensor(QnnTensor(f"{kind}{i}", TensorType.NATIVE, dt, (2,) * r))
                names.append(t.name)
                if io.name == check["target"]:
                    target_names.append(t.name)
        extra = []
        pd = opdef.param(check["target"])
        if pd is not None:  # a tensor param
            t = g.add_tensor(QnnTensor("p", TensorType.STATIC, pd.datatype or D.UINT_32, (2,) * rank,
                                       data=np.ones((2,) * rank, dtype=np.uint32)))
            extra.append(TensorParam(pd.name, t))
            target_names.append(pd.name)
        node = OpConfig("probe_node", op, ins, outs, list(params) + extra)
        g.ops.append(node)
        found[rank] = [d for d in validate_op(node, g, registry, backend)
                       if d.code == "rank" and any(f"`{n}`" in d.message for n in target_names)]
    assert found[bad], f"rank {bad} of {check['target']} was accepted"
    assert found[bad][0].subject.startswith("node probe_node")
    assert not found[good], [d.message for d in found[good]]


# ---------------------------------------------------------------- against the SDK (env-gated)


def _sdk_path(var: str) -> Path:
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"set {var} to check against the QNN SDK (not shipped with qlower)")
    return Path(value)


def test_shipped_xml_is_valid_against_the_sdk_schema() -> None:
    etree = pytest.importorskip("lxml.etree")
    schema = etree.XMLSchema(file=str(_sdk_path("QLOWER_QNN_OPDEF_XSD")))
    for name in ("master.xml", "cpu.xml", "gpu.xml", "htp.xml", "dsp.xml", "lpai.xml"):
        doc = etree.parse(str(SHIPPED_DIR / name))
        assert schema.validate(doc), f"{name}: {schema.error_log.last_error}"


def test_every_documented_constraint_is_in_the_file(data: dict) -> None:
    """Each Constraints/Support bullet of the SDK docs has an item (by fingerprint) for its op and backend."""
    docs = _sdk_path("QLOWER_QNN_SDK_DOCS")
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import qnn_docs
    finally:
        sys.path.pop(0)
    have: dict = {}
    for op, per in data["ops"].items():
        for backend, entry in per.items():
            for item in entry.get("constraints", []):
                key = (op, backend, item["ref"])
                have[key] = have.get(key, 0) + 1
    want: dict = {}
    for c in qnn_docs.all_constraints(docs):
        key = (c.op, "all" if c.backend == "master" else c.backend, c.digest)
        want[key] = want.get(key, 0) + 1
    missing = {k: n for k, n in want.items() if have.get(k, 0) < n}
    assert not missing, sorted(missing)[:10]


# ---------------------------------------------------------------- generated: value, operation, datatype checks


def _checks(data: dict, kinds: set[str]) -> list[tuple]:
    out = []
    for op, per in sorted(data["ops"].items()):
        for backend, entry in per.items():
            for item in entry.get("constraints", []):
                for check in item.get("checks", []):
                    if check["kind"] in kinds:
                        out.append((op, backend, item["config"], check))
    return out


DATA = json.loads(CONSTRAINTS.read_text(encoding="utf-8"))
def _backends(reg: OpDefRegistry, op: str, backend: str) -> list[str]:
    if backend != "all":
        return [backend]
    return [b for b in reg.backends if reg.supported(op, b)][:1] or ["cpu"]


def _num(bound, rank: int):
    return {"N": rank, "N-1": rank - 1}.get(bound, bound) if isinstance(bound, str) else bound


def _satisfies(check: dict, value, rank: int) -> bool:
    """An evaluator written for the test (independent of qlower's): does `value` meet the value check?"""
    f = {k: _num(v, rank) for k, v in check.items() if k not in ("kind", "target", "when")}
    if "equals" in f and value != f["equals"]:
        return False
    return (("min" not in f or value >= f["min"]) and ("max" not in f or value <= f["max"])
            and ("min_exclusive" not in f or value > f["min_exclusive"])
            and ("max_exclusive" not in f or value < f["max_exclusive"])
            and ("one_of" not in f or value in f["one_of"]) and ("not_one_of" not in f or value not in f["not_one_of"]))


def _graph_for(reg: OpDefRegistry, op: str, backend: str, config: str, rank: int, params: list,
               dt_override: dict | None = None) -> tuple[OpConfig, QnnGraph]:
    opdef = reg.op(op)
    dts = {**_row_datatypes(reg, op, backend, config), **(dt_override or {})}
    g = QnnGraph("g")
    names: dict = {"in": [], "out": []}
    for kind, defs in (("in", opdef.inputs), ("out", opdef.outputs)):
        for i, io in enumerate(d for d in defs if d.mandatory or d.name in (dt_override or {})):
            dt = dts.get(io.name) or (io.datatypes[0] if io.datatypes else D.FLOAT_32)
            r = io.ndim if io.ndim is not None else rank
            names[kind].append(g.add_tensor(QnnTensor(f"{kind}{i}", TensorType.NATIVE, dt, (2,) * r)).name)
    node = OpConfig("probe_node", op, names["in"], names["out"], params)
    g.ops.append(node)
    return node, g


VALUE_PROBES = [p for p in _checks(DATA, {"value"}) if not p[3].get("when") and "equal_elements" not in p[3]]


@pytest.mark.parametrize("op, backend, config, check", VALUE_PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[2]}-{p[3]['target']}-{i}" for i, p in enumerate(VALUE_PROBES)])
def test_value_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    """A param value breaking the documented range is refused naming the node and param; a valid one is not."""
    rank = 4
    pd = registry.param(op, check["target"])
    backend = _backends(registry, op, backend)[0]
    same = [c for o, b, _, c in VALUE_PROBES if o == op and b in (backend, "all") and c["target"] == pd.name]
    candidates = [False, True] if isinstance(check.get("equals"), bool) else list(range(-2, 12))
    good = [v for v in candidates if all(_satisfies(c, v, rank) for c in same)]
    bad = [v for v in candidates if not _satisfies(check, v, rank)]
    assert bad, "no value breaks the check"
    dt = pd.datatype or (D.BOOL_8 if isinstance(candidates[0], bool) else D.INT_32)

    def param(v):
        if pd.is_scalar:
            return ScalarParam(pd.name, dt, v)
        shape = (2,) if pd.ndim in (None, 1) else (2,) * pd.ndim
        arr = np.full(shape, v)
        t = QnnTensor("pv", TensorType.STATIC, dt, shape, data=arr)
        return TensorParam(pd.name, t)

    def found(v) -> list:
        node, g = _graph_for(registry, op, backend, config, rank, [param(v)])
        if not pd.is_scalar:
            g.add_tensor(node.params[0].tensor)
        return [d for d in validate_op(node, g, registry, backend)
                if d.code == "param-value" and f"`{pd.name}`" in d.message]

    refused = found(bad[0])
    assert refused and refused[0].subject.startswith("node probe_node")
    if good and config == "All":  # config-bound checks apply only when the op matches that config's rows
        assert found(good[0]) == []


OPERATION_PROBES = _checks(DATA, {"operation"})


@pytest.mark.parametrize("op, backend, config, check", OPERATION_PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[2]}-{i}" for i, p in enumerate(OPERATION_PROBES)])
def test_operation_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    enum = registry.param(op, "operation").enum
    allowed = [n for n in enum if n in check.get("allowed", enum) and n not in check.get("forbidden", [])]
    refused = [n for n in enum if n not in allowed]
    assert allowed and refused
    backend = _backends(registry, op, backend)[0]

    def found(name: str) -> list:
        node, g = _graph_for(registry, op, backend, config, 2,
                             [ScalarParam("operation", D.UINT_32, enum.index(name))])
        return [d for d in validate_op(node, g, registry, backend) if d.code == "operation"]

    got = found(refused[0])
    assert got and refused[0] in got[0].message and got[0].subject.startswith("node probe_node")
    assert found(allowed[0]) == []


DATATYPE_PROBES = [p for p in _checks(DATA, {"datatype"}) if set(p[3].get("when", {})) <= {"operations"}
                   and p[3]["target"].startswith(("in[", "out["))]


@pytest.mark.parametrize("op, backend, config, check", DATATYPE_PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[2]}-{p[3]['target']}-{i}" for i, p in enumerate(DATATYPE_PROBES)])
def test_datatype_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    """A tensor datatype the documentation excludes (per operation) is refused; an allowed one is not."""
    params = _operation(registry, op, check)
    everything = [d for d in D if d.name not in ("UNDEFINED", "STRING")]
    allowed = [d for d in everything if (not check.get("allowed") or d.qnn_name in check.get("allowed"))
               and d.qnn_name not in check.get("forbidden", [])] if check.get("allowed") != [] else []
    bad = [d for d in everything if d not in allowed]
    target = check["target"]
    backend = _backends(registry, op, backend)[0]

    def found(dt: D, specific: bool = True) -> list:
        node, g = _graph_for(registry, op, backend, config, 4, params, {target: dt})
        return [d for d in validate_op(node, g, registry, backend) if d.code == "datatype"
                and (f"is {dt.name};" in d.message or not specific)]

    # a config-bound list may also be enforced by the config's datatype rows (refused either way)
    got = found(bad[0], specific=config == "All")
    assert got and got[0].subject.startswith("node probe_node")
    if allowed:
        assert found(allowed[0]) == []


EQUAL_PROBES = [p for p in _checks(DATA, {"value"}) if "equal_elements" in p[3]]


@pytest.mark.parametrize("op, backend, config, check", EQUAL_PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[2]}-{p[3]['target']}-{i}" for i, p in enumerate(EQUAL_PROBES)])
def test_equal_elements_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    """`block_size[0] and block_size[1] should be equal`: unequal elements are refused, equal ones are not."""
    pd = registry.param(op, check["target"])
    shape = (2, 2) if pd.ndim == 2 else (2,)
    i, j = check["equal_elements"]

    def found(values: list[int]) -> list:
        t = QnnTensor("pv", TensorType.STATIC, pd.datatype or D.UINT_32, shape,
                      data=np.asarray(values, dtype=np.uint32).reshape(shape))
        node, g = _graph_for(registry, op, backend, config, 4, [TensorParam(pd.name, t)])
        g.add_tensor(t)
        return [d for d in validate_op(node, g, registry, backend)
                if d.code == "param-value" and f"`{pd.name}`" in d.message]

    n = int(np.prod(shape))
    same = [2] * n
    other = list(same)
    other[j] = 3
    assert found(other) and not found(same)


COUNT_PROBES = _checks(DATA, {"count"})


@pytest.mark.parametrize("op, backend, config, check", COUNT_PROBES,
                         ids=[f"{p[1]}-{p[0]}-{p[3]['target']}-{i}" for i, p in enumerate(COUNT_PROBES)])
def test_count_probe(registry: OpDefRegistry, op: str, backend: str, config: str, check: dict) -> None:
    """`Number: m >= 1` on in[0..m]: fewer tensors bound to the entry are refused naming the node."""
    opdef = registry.op(op)
    backend = _backends(registry, op, backend)[0]
    kind = "in" if check["target"].startswith("in") else "out"
    defs = opdef.inputs if kind == "in" else opdef.outputs
    position = [io.name for io in defs].index(check["target"])

    def found(n: int) -> list:
        g = QnnGraph("g")
        names: dict = {"in": [], "out": []}
        for k, ds in (("in", opdef.inputs), ("out", opdef.outputs)):
            for i, io in enumerate(ds):
                copies = n if (k == kind and i == position) else (1 if io.mandatory else 0)
                if k == kind and i > position:
                    copies = 0
                for c in range(copies):
                    t = g.add_tensor(QnnTensor(f"{k}{i}_{c}", TensorType.NATIVE, D.FLOAT_32, (2, 2, 2, 2)))
                    names[k].append(t.name)
        node = OpConfig("probe_node", op, names["in"], names["out"], [])
        g.ops.append(node)
        return [d for d in validate_op(node, g, registry, backend)
                if d.code == f"{'input' if kind == 'in' else 'output'}-count"]

    got = found(check["min"] - 1)
    assert got and got[0].subject.startswith("node probe_node")
    assert found(check["min"]) == []
