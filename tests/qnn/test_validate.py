"""validate_graph / validate_op: one failing and one passing case per kind of check."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np
import pytest

from qlower.diagnostics import Diagnostic
from qlower.qnn.datatypes import DataType as D
from qlower.qnn.model import (
    EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam, TensorType,
)
import qlower.qnn.shapes as shapes_module
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps
from qlower.qnn.shapes import ShapeError, Sig
from qlower.qnn.validate import validate_graph, validate_op

NATIVE, STATIC = TensorType.NATIVE, TensorType.STATIC


@pytest.fixture(scope="module")
def registry() -> OpDefRegistry:
    return OpDefRegistry.load()


@pytest.fixture(autouse=True)
def no_shape_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep these tests about the op definitions; shape tests install their own rules."""
    monkeypatch.setitem(sys.modules, "qlower.qnn.shapes", None)


class Builder:
    def __init__(self) -> None:
        self.graph = QnnGraph("g")

    def t(self, name: str, dt: D, dims: Sequence[int], kind: TensorType = NATIVE,
          encoding: QuantEncoding | None = None) -> str:
        data = np.zeros(dims, dtype=np.float32) if kind is STATIC else None
        self.graph.add_tensor(QnnTensor(name, kind, dt, tuple(dims), encoding=encoding, data=data))
        return name

    def const(self, name: str, dt: D, values: Sequence) -> QnnTensor:
        arr = np.asarray(values)
        return self.graph.add_tensor(QnnTensor(name, STATIC, dt, arr.shape, data=arr))

    def op(self, name: str, type_: str, ins: list[str], outs: list[str], params: Sequence = (),
           provenance: str | None = None) -> OpConfig:
        op = OpConfig(name, type_, ins, outs, list(params), provenance=provenance)
        self.graph.ops.append(op)
        return op


def codes(diags: list[Diagnostic]) -> list[str | None]:
    return [d.code for d in diags]


def tile(b: Builder, in_dt: D = D.FLOAT_16, out_dt: D = D.FLOAT_16, rank: int = 3,
         provenance: str | None = None) -> OpConfig:
    reps = b.const("reps", D.UINT_32, np.ones(rank, dtype=np.uint32))
    x = b.t("x", in_dt, (2,) * rank)
    y = b.t("y", out_dt, (2,) * rank)
    return b.op("rep.tile", "Tile", [x], [y], [TensorParam("multiples", reps)], provenance)


def test_valid_op_has_no_diagnostics(registry: OpDefRegistry) -> None:
    b = Builder()
    tile(b)
    assert validate_graph(b.graph, registry, "htp") == []


def test_unsupported_op_message_format(registry: OpDefRegistry) -> None:
    b = Builder()
    op = tile(b, provenance="rule repeat_interleave at patterns/mllm/repeat.qpat:12:5")
    [d] = validate_op(op, b.graph, registry, "lpai")
    assert d.code == "unsupported-op" and d.is_error
    assert d.subject == "node rep.tile (qnn.Tile, from rule repeat_interleave at patterns/mllm/repeat.qpat:12:5)"
    assert d.message == "Tile is not supported on LPAI"
    assert str(d) == f"{d.subject}: error: Tile is not supported on LPAI"
    assert validate_op(op, b.graph, registry, "HTP") == []


def test_unknown_op_and_backend(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_32, (2, 2)), b.t("y", D.FLOAT_32, (2, 2))
    b.op("m", "Matmul", [x, x], [y])
    [d] = validate_graph(b.graph, registry, "cpu")
    assert d.code == "unknown-op" and d.hint == "did you mean `MatMul`?"
    [d] = validate_graph(b.graph, registry, "htpp")
    assert d.code == "unknown-backend" and d.hint == "did you mean `htp`?"


def test_input_and_output_counts(registry: OpDefRegistry) -> None:
    b = Builder()
    op = tile(b)
    op.inputs.append("x")
    assert codes(validate_op(op, b.graph, registry, "htp")) == ["input-count"]
    op.inputs.pop()
    op.outputs.append("x")
    assert codes(validate_op(op, b.graph, registry, "htp")) == ["output-count"]
    c = Builder()
    parts = [c.t(f"p{i}", D.FLOAT_16, (1, 2)) for i in range(3)]
    cat = c.op("cat", "Concat", parts, [c.t("o", D.FLOAT_16, (1, 6))], [ScalarParam("axis", D.UINT_32, 1)])
    assert validate_op(cat, c.graph, registry, "htp") == []
    cat.inputs.clear()
    [d] = validate_op(cat, c.graph, registry, "htp")
    assert d.code == "input-count" and "at least 1 input" in d.message


def test_unknown_and_missing_params(registry: OpDefRegistry) -> None:
    b = Builder()
    op = tile(b)
    op.params[0] = TensorParam("multiple", op.params[0].tensor)
    diags = validate_op(op, b.graph, registry, "htp")
    assert sorted(codes(diags)) == ["missing-param", "unknown-param"]
    unknown = next(d for d in diags if d.code == "unknown-param")
    assert unknown.hint == "did you mean `multiples`?"


def test_param_datatype(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_16, (1, 8)), b.t("y", D.FLOAT_16, (1, 8))
    op = b.op("sm", "Softmax", [x], [y], [ScalarParam("axis", D.INT_32, 1)])
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "param-datatype" and "QNN_DATATYPE_UINT_32" in d.message
    op.params[0] = ScalarParam("axis", D.UINT_32, 1)
    assert validate_op(op, b.graph, registry, "htp") == []


def test_param_shape(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_16, (2, 3)), b.t("y", D.FLOAT_16, (3, 2))
    op = b.op("tr", "Transpose", [x], [y], [ScalarParam("perm", D.UINT_32, 1)])
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "param-shape" and "1D tensor" in d.message
    op.params[0] = TensorParam("perm", b.const("perm", D.UINT_32, np.array([1, 0], np.uint32)))
    assert validate_op(op, b.graph, registry, "htp") == []


def test_param_enum(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_16, (1, 8)), b.t("y", D.FLOAT_16, (1, 8))
    op = b.op("act", "ElementWiseNeuron", [x], [y], [ScalarParam("operation", D.UINT_32, 9)])
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "param-enum" and "4 (RELU)" in d.hint
    op.params[0] = ScalarParam("operation", D.UINT_32, 4)
    assert validate_op(op, b.graph, registry, "htp") == []


def test_param_only_default(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_32, (1, 4, 8)), b.t("y", D.FLOAT_32, (1, 4, 8))
    op = b.op("sm", "Softmax", [x], [y], [ScalarParam("axis", D.UINT_32, 1)])
    [d] = validate_op(op, b.graph, registry, "gpu")
    assert d.code == "param-default-only" and "N-1 = 2" in d.message
    assert validate_op(op, b.graph, registry, "cpu") == []  # CPU takes any axis (HTP: only N-1, per the 2.25 docs)
    op.params[0] = ScalarParam("axis", D.UINT_32, 2)
    assert validate_op(op, b.graph, registry, "gpu") == []


def test_datatype_rows_match_whole_combinations(registry: OpDefRegistry) -> None:
    b = Builder()
    # FLOAT_16 and FLOAT_32 are each allowed for in[0] and out[0] on HTP, but not mixed in one row.
    op = tile(b, D.FLOAT_16, D.FLOAT_32)
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "datatype" and "in[0]=FLOAT_16" in d.message and "out[0]=FLOAT_32" in d.message
    assert d.notes and all("closest" in n.message for n in d.notes)
    assert any("FP16" in n.message for n in d.notes)
    b2 = Builder()
    assert validate_op(tile(b2, D.UFIXED_POINT_8, D.UFIXED_POINT_8), b2.graph, registry, "htp") == []


def test_rank_limits(registry: OpDefRegistry) -> None:
    b = Builder()
    op = tile(b, rank=5)
    diags = validate_op(op, b.graph, registry, "htp")
    assert codes(diags) == ["rank", "rank"]  # in[0] and out[0]
    assert "in[0] `x` has rank 5" in diags[0].message and "rank <= 4" in diags[0].message
    assert validate_op(op, b.graph, registry, "gpu") == []  # no rank limit for Tile on GPU
    c = Builder()
    x, w = c.t("x", D.FLOAT_32, (1, 8, 3)), c.t("w", D.FLOAT_32, (3, 3, 3, 4), STATIC)
    y = c.t("y", D.FLOAT_32, (1, 8, 8, 4))
    params = [TensorParam("stride", c.const("s", D.UINT_32, np.array([1, 1], np.uint32))),
              TensorParam("pad_amount", c.const("p", D.UINT_32, np.ones((2, 2), np.uint32)))]
    conv = c.op("conv", "Conv2d", [x, w], [y], params)
    [d] = validate_op(conv, c.graph, registry, "cpu")
    assert d.code == "rank" and "requires rank 4" in d.message


def test_static_input(registry: OpDefRegistry) -> None:
    def matmul(kind: TensorType) -> tuple[Builder, OpConfig]:
        b = Builder()
        x, w = b.t("x", D.FLOAT_16, (1, 4, 8)), b.t("w", D.SFIXED_POINT_8, (8, 8), kind)
        return b, b.op("mm", "MatMul", [x, w], [b.t("y", D.FLOAT_16, (1, 4, 8))])

    b, op = matmul(NATIVE)
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "static-input" and "`w`" in d.message
    b, op = matmul(STATIC)
    assert validate_op(op, b.graph, registry, "htp") == []


def test_static_input_by_encoding(registry: OpDefRegistry) -> None:
    enc = QuantEncoding(EncodingKind.BW_AXIS_SCALE_OFFSET, [0.1] * 8, [0] * 8, axis=1, bitwidth=4)
    b = Builder()
    x = b.t("x", D.UFIXED_POINT_8, (1, 4, 8))
    w = b.t("w", D.SFIXED_POINT_8, (8, 8), NATIVE, enc)
    op = b.op("mm", "MatMul", [x, w], [b.t("y", D.UFIXED_POINT_8, (1, 4, 8))])
    assert codes(validate_op(op, b.graph, registry, "htp")) == ["static-input"]
    b.graph.tensors["w"].encoding = None
    assert validate_op(op, b.graph, registry, "htp") == []


CUSTOM = """<OpDefCollection PackageName="my.ops" Domain="aisw" Version="1.0">
  <OpDefList><OpDef><Name>Fancy</Name>
    <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Input>
    <Input><Name>w</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
      <IsStaticTensor>true</IsStaticTensor></Input>
    <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Output>
  </OpDef></OpDefList>
  <SupplementalOpDefList Backend="HTP"><SupportedOps><OpName>Fancy</OpName></SupportedOps></SupplementalOpDefList>
</OpDefCollection>
"""


def test_static_input_from_custom_package(tmp_path: Path) -> None:
    path = tmp_path / "fancy.xml"
    path.write_text(CUSTOM)
    reg = OpDefRegistry.load([path])
    b = Builder()
    x, y = b.t("x", D.FLOAT_16, (4, 4)), b.t("y", D.FLOAT_16, (4, 4))
    op = b.op("f", "Fancy", [x, b.t("w", D.FLOAT_32, (4, 4))], [y])
    op.package = "my.ops"
    [d] = validate_op(op, b.graph, reg, "htp")
    assert d.code == "static-input" and d.subject == "node f (my.ops.Fancy)"
    b.graph.tensors["w"].type = STATIC
    assert validate_op(op, b.graph, reg, "htp") == []
    assert codes(validate_op(op, b.graph, reg, "cpu")) == ["unsupported-op"]


def test_unknown_tensor(registry: OpDefRegistry) -> None:
    b = Builder()
    op = tile(b)
    op.outputs[0] = "ghost"
    [d] = validate_op(op, b.graph, registry, "htp")
    assert d.code == "unknown-tensor" and "`ghost`" in d.message


def test_all_problems_reported_in_one_run(registry: OpDefRegistry) -> None:
    b = Builder()
    x, y = b.t("x", D.FLOAT_16, (1, 2, 3, 4, 5, 6)), b.t("y", D.FLOAT_32, (1, 2, 3, 4, 5, 6))
    b.op("act", "ElementWiseNeuron", [x], [y], [ScalarParam("operation", D.UINT_32, 42),
                                                 ScalarParam("alpah", D.FLOAT_32, 1.0)])
    b.op("sm", "Softmax", [x], [y], [ScalarParam("axis", D.INT_32, 1)])
    diags = validate_graph(b.graph, registry, "htp")
    assert {"param-enum", "unknown-param", "datatype", "rank", "param-datatype"} <= set(codes(diags))
    assert {d.subject for d in diags} == {"node act (qnn.ElementWiseNeuron)", "node sm (qnn.Softmax)"}


def install_shapes(monkeypatch: pytest.MonkeyPatch, registry: OpDefRegistry, fn=None) -> tuple[list, QnnOps]:
    """Shape checks on, through an op registry whose ElementWiseNeuron shape function is a stand-in
    (keeps its input's shape, rejects rank 1) that records its calls; `fn` replaces it."""
    calls: list = []

    def infer(inputs: Sequence, params: dict) -> list | None:
        calls.append((tuple(inputs), dict(params)))
        if len(inputs[0].shape) == 1:
            raise ShapeError("ElementWiseNeuron: in[0] must not be 1-D here")
        return [Sig(inputs[0].shape, inputs[0].dtype)]

    monkeypatch.setitem(sys.modules, "qlower.qnn.shapes", shapes_module)
    entries = dict(QnnOps.build(registry).entries)
    entries["ElementWiseNeuron"] = attrs.evolve(entries["ElementWiseNeuron"], shape_fn=fn or infer)
    return calls, QnnOps(entries, registry)


def neuron(b: Builder, in_dims: Sequence[int], out_dims: Sequence[int]) -> OpConfig:
    x, y = b.t("x", D.FLOAT_16, in_dims), b.t("y", D.FLOAT_16, out_dims)
    return b.op("act", "ElementWiseNeuron", [x], [y], [ScalarParam("operation", D.UINT_32, 4)])


def test_shape_consistency(registry: OpDefRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    calls, ops = install_shapes(monkeypatch, registry)
    b = Builder()
    op = neuron(b, (1, 8), (1, 9))
    [d] = validate_op(op, b.graph, registry, "htp", ops=ops)
    assert d.code == "shape" and "[1, 9]" in d.message and "[1, 8]" in d.message
    assert calls[-1] == ((Sig((1, 8), "float16"),), {"operation": 4})
    b2 = Builder()
    assert validate_op(neuron(b2, (1, 8), (1, 8)), b2.graph, registry, "htp", ops=ops) == []


def test_shape_error_from_rules(registry: OpDefRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    _, ops = install_shapes(monkeypatch, registry)
    b = Builder()
    [d] = validate_op(neuron(b, (8,), (8,)), b.graph, registry, "htp", ops=ops)
    assert d.code == "shape" and "must not be 1-D" in d.message


def test_the_shipped_shape_rules_are_the_default(registry: OpDefRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qlower.qnn.shapes", shapes_module)
    b = Builder()
    [d] = validate_op(neuron(b, (1, 8), (1, 9)), b.graph, registry, "htp")
    assert d.code == "shape" and "[1, 9]" in d.message


def test_shape_checks_skipped_without_shapes_module(registry: OpDefRegistry) -> None:
    b = Builder()  # the autouse fixture hides qlower.qnn.shapes
    assert validate_op(neuron(b, (1, 8), (1, 9)), b.graph, registry, "htp") == []


def test_failing_shape_rule_degrades_to_warning(registry: OpDefRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("rule bug")

    _, ops = install_shapes(monkeypatch, registry, broken)
    b = Builder()
    [d] = validate_op(neuron(b, (1, 8), (1, 8)), b.graph, registry, "htp", ops=ops)
    assert d.code == "shape-internal" and not d.is_error and "rule bug" in d.message


def test_op_in_wrong_package(tmp_path: Path) -> None:
    path = tmp_path / "fancy.xml"
    path.write_text(CUSTOM)
    reg = OpDefRegistry.load([path])
    b = Builder()
    x, w, y = b.t("x", D.FLOAT_16, (4, 4)), b.t("w", D.FLOAT_32, (4, 4), STATIC), b.t("y", D.FLOAT_16, (4, 4))
    op = b.op("f", "Fancy", [x, w], [y])  # package left at qti.aisw
    [d] = validate_op(op, b.graph, reg, "htp")
    assert d.code == "unknown-op" and "package my.ops" in d.hint


def test_a_param_newer_than_the_definitions_is_noted_not_refused(registry: OpDefRegistry) -> None:
    """Real QAIRT 2.27 converter output gives ResizeBilinear an `antialias` the 2.25 docs lack."""
    b = Builder()
    x, y = b.t("x", D.FLOAT_32, (1, 4, 4, 3)), b.t("y", D.FLOAT_32, (1, 8, 8, 3))
    op = b.op("rs", "ResizeBilinear", [x], [y], [ScalarParam("align_corners", D.BOOL_8, False),
                                                 ScalarParam("antialias", D.BOOL_8, False)])
    found = validate_op(op, b.graph, registry, "cpu")
    assert [(d.severity.name, d.code) for d in found] == [("WARNING", "newer-param")]
    assert "seen in 2.27" in found[0].message
    op.params[1] = ScalarParam("antialiased", D.BOOL_8, False)  # a misspelling is still refused
    assert [d.code for d in validate_op(op, b.graph, registry, "cpu")] == ["unknown-param"]
