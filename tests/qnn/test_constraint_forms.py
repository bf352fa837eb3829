"""Issue 30's constraint forms: expressions (conditional, value and shape relations, static data) and
quantization encodings. Each probe breaks one documented constraint and is refused naming the node;
its valid twin passes. Also the expression grammar, the file checker's messages and the recorded
contradictions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.qnn import cexpr
from qlower.qnn.constraints import parse_constraints
from qlower.qnn.datatypes import DataType as D
from qlower.qnn.model import (
    EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam, TensorType,
)
from qlower.qnn.opdef import SHIPPED_DIR, OpDefRegistry
from qlower.qnn.validate import validate_graph, validate_op
from tests.qnn.op_draws import op_case

CONSTRAINTS = SHIPPED_DIR / "constraints.json"


@pytest.fixture(scope="module")
def registry() -> OpDefRegistry:
    return OpDefRegistry.load()


def enc(scale: float | list[float], offset: int | list[int], axis: int | None = None) -> QuantEncoding:
    kind = EncodingKind.SCALE_OFFSET if axis is None else EncodingKind.AXIS_SCALE_OFFSET
    return QuantEncoding(kind, scale, offset, axis=axis)


def T(dt: D, dims: tuple[int, ...], e: QuantEncoding | None = None, data: np.ndarray | None = None) -> dict:
    return {"dt": dt, "dims": dims, "enc": e, "data": data}


def build(type_: str, ins: list[dict | None], outs: list[dict], params: list = ()) -> tuple[OpConfig, QnnGraph]:
    g = QnnGraph("g")
    names_in = []
    for i, t in enumerate(ins):
        if t is None:
            names_in.append("")
            continue
        kind = TensorType.STATIC if t["data"] is not None else TensorType.NATIVE
        names_in.append(g.add_tensor(QnnTensor(f"x{i}", kind, t["dt"], t["dims"], t["enc"], t["data"])).name)
    names_out = [g.add_tensor(QnnTensor(f"y{i}", TensorType.NATIVE, t["dt"], t["dims"], t["enc"])).name
                 for i, t in enumerate(outs)]
    op = OpConfig("probe_node", type_, names_in, names_out, list(params))
    g.ops.append(op)
    return op, g


def refusals(op: OpConfig, g: QnnGraph, reg: OpDefRegistry, backend: str, warnings: bool = False) -> list:
    """The constraint and encoding findings: errors (and with `warnings`, the bullets worded as expectations)."""
    keep = ("ERROR", "WARNING") if warnings else ("ERROR",)
    return [d for d in validate_op(op, g, reg, backend) if d.severity.name in keep
            and d.code in ("constraint", "encoding")]


def u32(name: str, values: list[int]) -> ScalarParam:
    return ScalarParam(name, D.UINT_32, values)


def tparam(name: str, values: list, dt: D = D.UINT_32) -> TensorParam:
    arr = np.asarray(values, dtype=np.uint32 if dt == D.UINT_32 else np.int32)
    return TensorParam(name, QnnTensor(name, TensorType.STATIC, dt, arr.shape, None, arr))


F32, F16 = D.FLOAT_32, D.FLOAT_16
U8, S8, U16, S16, S32 = D.UFIXED_POINT_8, D.SFIXED_POINT_8, D.UFIXED_POINT_16, D.SFIXED_POINT_16, D.SFIXED_POINT_32


def layernorm(axes: list[int]) -> tuple:
    x = T(F16, (1, 4, 6, 8))
    return ("LayerNorm", [x, T(F16, tuple((1, 4, 6, 8)[a] for a in axes)), None], [x], [tparam("axes", axes)])


def softmax(axis: int) -> tuple:
    x = T(F32, (2, 2, 3, 4, 5))
    return ("Softmax", [x], [x], [ScalarParam("axis", D.UINT_32, axis)])


def pad(scheme: int, rank: int) -> tuple:
    dims = (1, 4, 4, 3, 2)[:rank]
    out = tuple(d + (2 if 0 < i < 3 else 0) for i, d in enumerate(dims))
    amounts = [[1, 1] if 0 < i < 3 else [0, 0] for i in range(rank)]
    return ("Pad", [T(F32, dims)], [T(F32, out)], [ScalarParam("scheme", D.UINT_32, scheme), tparam("pad_amount", amounts)])


def dwconv(dilation: list[int], stride: list[int]) -> tuple:
    q = enc(0.1, -128)
    w = T(U8, (3, 3, 1, 8), q, np.zeros((3, 3, 1, 8), np.uint8))
    return ("DepthWiseConv2d", [T(U8, (1, 16, 16, 8), q), w, None], [T(U8, (1, 12, 12, 8), q)],
            [tparam("stride", stride), tparam("pad_amount", [[0, 0], [0, 0]]), tparam("dilation", dilation)])


def conv_bias(offset: int, per_axis_weight: bool = False, bias_scale: float = 0.001) -> tuple:
    q = enc(0.1, -128)
    wq = enc([0.01] * 8, [0] * 8, axis=3) if per_axis_weight else enc(0.01, 0)
    w = T(S8 if per_axis_weight else U8, (3, 3, 4, 8), wq, np.zeros((3, 3, 4, 8), np.int8 if per_axis_weight else np.uint8))
    b = T(S32, (8,), enc(bias_scale, offset), np.zeros(8, np.int32))
    return ("Conv2d", [T(U8, (1, 8, 8, 4), q), w, b], [T(U8, (1, 6, 6, 8), q)],
            [tparam("stride", [1, 1]), tparam("pad_amount", [[0, 0], [0, 0]])])


def conv_weight_axis(axis: int, offset: int = 0) -> tuple:
    q = enc(0.1, -128)
    w = T(S8, (3, 3, 4, 8), enc([0.01] * 8, [offset] * 8, axis=axis), np.zeros((3, 3, 4, 8), np.int8))
    return ("Conv2d", [T(U8, (1, 8, 8, 4), q), w, None], [T(U8, (1, 6, 6, 8), q)],
            [tparam("stride", [1, 1]), tparam("pad_amount", [[0, 0], [0, 0]])])


def sigmoid16(scale: float) -> tuple:
    return ("Sigmoid", [T(S16, (1, 8), enc(0.001, 0))], [T(S16, (1, 8), enc(scale, 0))])


def tanh16(offset: int) -> tuple:
    return ("Tanh", [T(U16, (1, 8), enc(0.001, -32768))], [T(U16, (1, 8), enc(1 / 32768, offset))])


def gather_quant(out_scale: float) -> tuple:
    idx = T(D.INT_32, (2,), None, np.array([0, 1], np.int32))
    return ("Gather", [T(U8, (4, 8), enc(0.1, -128)), idx], [T(U8, (2, 8), enc(out_scale, -128))],
            [ScalarParam("axis", D.INT_32, 0)])


def gather_index(last: int) -> tuple:
    idx = T(D.INT_32, (2,), None, np.array([0, last], np.int32))
    return ("Gather", [T(F16, (4, 8)), idx], [T(F16, (2, 8))], [ScalarParam("axis", D.INT_32, 0)])


def resize_bilinear(align: bool, half: bool) -> tuple:
    return ("ResizeBilinear", [T(F32, (1, 4, 4, 3))], [T(F32, (1, 8, 8, 3))],
            [ScalarParam("align_corners", D.BOOL_8, align), ScalarParam("half_pixel_centers", D.BOOL_8, half)])


def neuron_clip(lo: float, hi: float) -> tuple:
    return ("ElementWiseNeuron", [T(F32, (2, 3))], [T(F32, (2, 3))],
            [ScalarParam("operation", D.UINT_32, 5), ScalarParam("min_value", F32, lo), ScalarParam("max_value", F32, hi)])


def transpose_conv_padding(padding: list[int]) -> tuple:
    w = T(F32, (3, 3, 4, 4), None, np.zeros((3, 3, 4, 4), np.float32))
    return ("TransposeConv2d", [T(F32, (1, 4, 4, 4)), w, None], [T(F32, (1, 9 + padding[0], 9 + padding[1], 4))],
            [tparam("stride", [2, 2]), tparam("pad_amount", [[0, 0], [0, 0]]), tparam("output_padding", padding)])


def quantize_out(kind: EncodingKind) -> tuple:
    return ("Quantize", [T(F32, (2, 3))], [T(U8, (2, 3), QuantEncoding(kind, 0.1, -128, bitwidth=8))])


def space_to_depth(height: int) -> tuple:
    return ("SpaceToDepth", [T(F32, (1, height, 4, 2))], [T(F32, (1, height // 2, 2, 8))], [tparam("block_size", [2, 2])])


def reshape_spec(spec: list[int]) -> tuple:
    s = T(D.INT_32, (len(spec),), None, np.asarray(spec, np.int32))
    return ("Reshape", [T(F32, (2, 3, 4)), s], [T(F32, (6, 4))])


def ewb(operation: int, dt: D) -> tuple:
    return ("ElementWiseBinary", [T(dt, (2, 3)), T(dt, (2, 3))], [T(dt, (2, 3))],
            [ScalarParam("operation", D.UINT_32, operation)])


def resize(mode: int) -> tuple:
    return ("Resize", [T(F32, (1, 4, 4, 3))], [T(F32, (1, 8, 8, 3))],
            [ScalarParam("interpolation_mode", D.UINT_32, mode), ScalarParam("cubic_coeff", F32, -0.5)])


def cast_u32(value: int) -> tuple:
    return ("Cast", [T(D.UINT_32, (2,), None, np.array([1, value], np.uint32))], [T(D.INT_32, (2,))])


def matmul16(static: bool, offset: int) -> tuple:
    a = T(U16, (1, 4, 8), enc(0.001, -30000))
    b = T(U16, (8, 6), enc(0.001, offset), np.zeros((8, 6), np.uint16) if static else None)
    return ("MatMul", [a, b], [T(U16, (1, 4, 6), enc(0.01, -30000))])


# (probe id, backend, bad probe, valid twin, a phrase of the refusal)
PROBES = [
    ("layernorm-middle-axis", "htp", layernorm([1]), layernorm([3]), "last axis"),
    ("softmax-rank5-middle-axis", "cpu", softmax(2), softmax(4), "N-1"),
    ("pad-mirror-reflect-rank3", "gpu", pad(2, 3), pad(2, 4), "MIRROR_REFLECT"),
    ("pad-mirror-symmetric-rank5", "gpu", pad(1, 5), pad(1, 4), "MIRROR_SYMMETRIC"),
    ("pad-edge-rank5", "gpu", pad(3, 5), pad(3, 4), "EDGE"),
    ("dwconv-dilation-stride", "htp", dwconv([2, 2], [2, 1]), dwconv([2, 2], [2, 2]), "dilation"),
    ("conv-bias-asymmetric", "htp", conv_bias(-5), conv_bias(0), "symmetric"),
    ("conv-bias-asymmetric-per-channel", "htp", conv_bias(3, True, 0.001), conv_bias(0, True, 0.001), "symmetric"),
    ("conv-weight-axis", "htp", conv_weight_axis(2), conv_weight_axis(3), "axis 3"),
    ("conv-weight-asymmetric", "htp", conv_weight_axis(3, 3), conv_weight_axis(3, 0), "symmetric"),
    ("sigmoid-s16-scale", "htp", sigmoid16(1 / 65536), sigmoid16(1 / 32768), "scale 3.05175781e-05"),
    ("tanh-u16-offset", "htp", tanh16(0), tanh16(-32768), "32768"),
    ("gather-quant-differs", "htp", gather_quant(0.2), gather_quant(0.1), "same quantization"),
    ("gather-index-range", "htp", gather_index(4), gather_index(3), "indices in [0"),
    ("gather-negative-index", "htp", gather_index(-1), gather_index(3), "indices in [0"),
    ("resize-align-and-half", "cpu", resize_bilinear(True, True), resize_bilinear(True, False), "half_pixel_centers"),
    ("neuron-min-above-max", "cpu", neuron_clip(6.0, 0.0), neuron_clip(0.0, 6.0), "min_value <= max_value"),
    ("transpose-conv-output-padding", "cpu", transpose_conv_padding([2, 0]), transpose_conv_padding([1, 0]),
     "output_padding"),
    ("quantize-bw-encoding", "cpu", quantize_out(EncodingKind.BW_SCALE_OFFSET), quantize_out(EncodingKind.SCALE_OFFSET),
     "BW_SCALE_OFFSET"),
    ("space-to-depth-height", "cpu", space_to_depth(5), space_to_depth(4), "height divisible"),
    ("reshape-spec-below-minus-one", "cpu", reshape_spec([6, -2]), reshape_spec([6, -1]), ">= -1"),
    ("reshape-spec-count", "cpu", reshape_spec([5, -1]), reshape_spec([3, -1]), "element count"),
    ("ewb-logical-on-float", "gpu", ewb(1, F32), ewb(1, D.BOOL_8), "logical operation"),
    ("ewb-numerical-on-bool", "gpu", ewb(0, D.BOOL_8), ewb(0, F16), "numerical operation"),
    ("matmul-16bit-static-weight-asymmetric", "htp", matmul16(True, -30000), matmul16(True, -32768), "symmetric"),
    ("matmul-16bit-activation-asymmetric-is-fine", "htp", matmul16(True, -1), matmul16(False, -30000), "symmetric"),
    ("cast-u32-above-int32-max", "htp", cast_u32(2 ** 31), cast_u32(2 ** 31 - 1), "INT32_MAX"),
]


@pytest.mark.parametrize("probe_id, backend, bad, good, phrase", PROBES, ids=[p[0] for p in PROBES])
def test_probe_pair(registry: OpDefRegistry, probe_id: str, backend: str, bad: tuple, good: tuple,
                    phrase: str) -> None:
    op, g = build(*bad)
    expectation = probe_id.startswith(("sigmoid-", "tanh-"))  # "scale is expected to be": warned, not refused
    found = refusals(op, g, registry, backend, warnings=expectation)
    assert found, f"{probe_id}: the breaking probe passed"
    assert all(d.severity.name == ("WARNING" if expectation else "ERROR") for d in found)
    assert all(d.subject.startswith("node probe_node") for d in found)
    assert any(phrase in d.message for d in found), [d.message for d in found]
    op, g = build(*good)
    assert refusals(op, g, registry, backend, warnings=True) == [], f"{probe_id}: the valid twin was refused"


def test_encoding_message_names_node_tensor_and_requirement(registry: OpDefRegistry) -> None:
    op, g = build(*conv_bias(-5))
    (d,) = [d for d in refusals(op, g, registry, "htp") if "symmetric" in d.message]
    assert d.subject.startswith("node probe_node (qnn.Conv2d")
    assert "in[2] `x2` (SFIXED_POINT_32)" in d.message and "offsets -5" in d.message and "HTP" in d.message


def test_static_data_checks_do_not_share_findings_between_ops(registry: OpDefRegistry) -> None:
    """Two Gathers of one kind whose static indices differ: only the out-of-range one is refused."""
    g = QnnGraph("g")
    g.add_tensor(QnnTensor("x", TensorType.APP_WRITE, F16, (4, 8)))
    for name, last in (("ok", 3), ("bad", 7)):
        g.add_tensor(QnnTensor(f"i_{name}", TensorType.STATIC, D.INT_32, (2,), None, np.array([0, last], np.int32)))
        g.add_tensor(QnnTensor(f"y_{name}", TensorType.NATIVE, F16, (2, 8)))
        g.ops.append(OpConfig(f"gather_{name}", "Gather", ["x", f"i_{name}"], [f"y_{name}"],
                              [ScalarParam("axis", D.INT_32, 0)]))
    found = [d for d in validate_graph(g, registry, "htp") if d.code == "constraint"]
    assert {d.subject.split()[1] for d in found} == {"gather_bad"}  # (the QNN range and the HTP one)


def test_dynamic_indices_are_not_guessed(registry: OpDefRegistry) -> None:
    op, g = build("Gather", [T(F16, (4, 8)), T(D.INT_32, (2,))], [T(F16, (2, 8))], [ScalarParam("axis", D.INT_32, 0)])
    assert refusals(op, g, registry, "htp") == []


def test_transpose_float32_4d_on_htp_is_accepted(registry: OpDefRegistry) -> None:
    """The prose leaves FLOAT_32 out at 4-D; the HTP converter outputs of resnet18 and YOLOv8m carry it."""
    op, g = build("Transpose", [T(F32, (1, 3, 8, 8))], [T(F32, (1, 8, 8, 3))], [tparam("perm", [0, 2, 3, 1])])
    assert [d for d in validate_op(op, g, registry, "htp") if d.severity.name == "ERROR"] == []
    op, g = build("Transpose", [T(D.FLOAT_64 if hasattr(D, "FLOAT_64") else D.INT_64, (1, 3, 8, 8))],
                  [T(D.FLOAT_64 if hasattr(D, "FLOAT_64") else D.INT_64, (1, 8, 8, 3))], [tparam("perm", [0, 2, 3, 1])])
    assert [d for d in validate_op(op, g, registry, "htp") if d.severity.name == "ERROR"]


def test_contradictions_name_shipped_items() -> None:
    data = json.loads((SHIPPED_DIR / "contradictions.json").read_text(encoding="utf-8"))
    cons = json.loads(CONSTRAINTS.read_text(encoding="utf-8"))
    assert data["schema"] == "qlower-opdef-contradictions/1" and data["contradictions"]
    for x in data["contradictions"]:
        for op in x["op"].split():
            refs = {it["ref"] for it in cons["ops"][op][x["backend"]]["constraints"]}
            assert set(x["refs"]) <= refs, op
        assert x["evidence"] and x["verdict"] and x["prose"]


def test_no_bullet_left_under_the_checkable_reasons() -> None:
    cons = json.loads(CONSTRAINTS.read_text(encoding="utf-8"))
    left = [(op, be, it["ref"]) for op, per in cons["ops"].items() for be, e in per.items()
            for it in e.get("constraints", []) if it.get("not_modelled") in
            ("quantization", "conditional", "value-relation", "shape-relation", "other", "tensor-data")]
    assert left == []


# ---------------------------------------------------------------- the file checker


def _file(check: dict, op: str = "Pad", backend: str = "gpu") -> dict:
    return {"schema": "qlower-opdef-constraints/1", "package": "qti.aisw", "not_modelled_reasons": {},
            "ops": {op: {backend: {"constraints": [{"ref": "0123456789", "checks": [check]}]}}}}


@pytest.mark.parametrize("check, message", [
    ({"kind": "expr", "says": "x", "require": "N <"}, "$.ops.Pad.gpu.constraints[0].checks[0].require: not an expression"),
    ({"kind": "expr", "says": "x", "require": "open('f')"}, "unknown function `open`"),
    ({"kind": "expr", "says": "x", "require": "N.real"}, "not in the expression grammar"),
    ({"kind": "expr", "require": "N == 4"}, "needs `says`"),
    ({"kind": "encoding", "target": "in[0]", "kinds": ["SCALE"]}, "unknown encoding kind 'SCALE'"),
    ({"kind": "encoding", "target": "in[0]", "symmetric": "yes"}, "expected true or false"),
    ({"kind": "encoding", "target": "in[0]", "axis": "last"}, "expected an integer or \"N-1\""),
    ({"kind": "encoding", "kinds": ["SCALE_OFFSET"]}, "needs a `target`"),
])
def test_file_checker_reports_bad_checks(check: dict, message: str) -> None:
    cs, problems = parse_constraints(_file(check), "x.json")
    assert cs is None and any(message in d.message for d in problems), [d.message for d in problems]


def test_registry_refuses_unknown_names_in_expressions(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_file({"kind": "expr", "says": "x", "require": "multiple == 1"}, "Tile", "lpai")), encoding="utf-8")
    with pytest.raises(Exception) as exc:
        OpDefRegistry.load(extra_paths=[path])
    assert "unknown entry `multiple`" in str(exc.value)


# ---------------------------------------------------------------- the expression grammar


def _env(**params) -> cexpr.Env:
    t = QnnTensor("a", TensorType.NATIVE, F32, (2, 3, 4))
    return cexpr.Env([t], [t], params)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=6), st.integers(-50, 50))
def test_ordering_is_over_every_element_and_equality_over_the_whole(values: list[int], bound: int) -> None:
    env = _env(v=np.asarray(values), b=bound)
    assert cexpr.parse("v <= b")(env) == all(x <= bound for x in values)
    assert cexpr.parse("v == b")(env) == all(x == bound for x in values)
    assert cexpr.parse("not (v != b)")(env) == cexpr.parse("v == b")(env)


def test_unknown_values_make_a_check_not_apply() -> None:
    env = _env()
    for text in ("missing == 1", "data(in[0]) >= 0", "dim(in[0], 7) == 1", "in[3] == 1"):
        with pytest.raises(cexpr.Unknown):
            cexpr.parse(text)(env)


def test_shapes_concatenate_and_slice() -> None:
    env = _env()
    assert cexpr.parse("shape(in[0])[:-1] + [9] == [2, 3, 9]")(env)
    assert cexpr.parse("N == 3 and dim(in[0], -1) == 4")(env)


# ---------------------------------------------------------------- every shipped expression, on drawn instances


_NP_TO_QNN = {"float32": D.FLOAT_32, "float16": D.FLOAT_16, "int32": D.INT_32, "int64": D.INT_64, "uint32": D.UINT_32,
              "uint8": D.UINT_8, "int8": D.INT_8, "bool": D.BOOL_8, "int16": D.INT_16, "uint16": D.UINT_16}


def _ops_with_forms() -> dict[str, list[str]]:
    """Op -> the backends whose checks of it include expressions or encodings ("all": every backend)."""
    cons = json.loads(CONSTRAINTS.read_text(encoding="utf-8"))
    found: dict[str, list[str]] = {}
    for op, per in sorted(cons["ops"].items()):
        for backend, e in per.items():
            if any(ch["kind"] in ("expr", "encoding") for it in e.get("constraints", []) for ch in it.get("checks", [])):
                found.setdefault(op, []).append(backend)
    return found


_FORMS = _ops_with_forms()


def _param(name: str, value) -> ScalarParam | TensorParam:
    if isinstance(value, np.ndarray):
        dt = _NP_TO_QNN.get(value.dtype.name, D.INT_32)
        return TensorParam(name, QnnTensor(name, TensorType.STATIC, dt, value.shape, None, value))
    if isinstance(value, (bool, np.bool_)):
        return ScalarParam(name, D.BOOL_8, bool(value))
    if isinstance(value, (float, np.floating)):
        return ScalarParam(name, D.FLOAT_32, float(value))
    return ScalarParam(name, D.INT_32 if int(value) < 0 else D.UINT_32, int(value))


@pytest.mark.parametrize("op_type", sorted(_FORMS))
def test_shipped_expressions_evaluate_on_drawn_instances(registry: OpDefRegistry, op_type: str) -> None:
    """No shipped expression fails inside (a `constraint-internal` warning) on any backend, whatever the op's values."""
    opdef = registry.op(op_type)

    @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(op_case(opdef))
    def check(case) -> None:
        inputs, params = case
        ins = [None if a is None else T(_NP_TO_QNN.get(a.dtype.name, D.FLOAT_32), a.shape, data=a) for a in inputs]
        first = next((a for a in inputs if a is not None), np.zeros((1,), np.float32))
        outs = [T(D.FLOAT_32, first.shape)] * max(1, len([o for o in opdef.outputs if o.mandatory]))
        op, g = build(op_type, ins, outs, [_param(k, v) for k, v in params.items()])
        for backend in (registry.backends if "all" in _FORMS[op_type] else _FORMS[op_type]):
            bad = [d.message for d in validate_op(op, g, registry, backend) if d.code == "constraint-internal"]
            assert bad == [], (backend, bad)

    check()
