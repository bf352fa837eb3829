"""Verification that gates and localises: a correct lowering passes, a wrong rule among
correct ones is named with its node, accumulated float16 error is labelled drift."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import qlower
from qlower import Graph
from qlower.cli.main import main
from qlower.verify.tolerance import TolerancePolicy

PACK = Path(__file__).resolve().parents[2] / "patterns" / "mllm"

# GELU, tanh approximation: HALF · x · (1 + tanh(√(2/π)·(x + 0.044715·x³))); HALF is 0.5 when right.
GELU_TANH = """\
# GELU, tanh approximation, decomposed into elementwise QNN ops.
rule gelu_tanh {
  match y = mllm.GELU(x) { approximate: "tanh" }
  emit {
    c = tensor(full([1], 0.044715, f32)) : dtype dtype(x)
    k = tensor(full([1], 0.7978845608, f32)) : dtype dtype(x)
    one = tensor(full([1], 1.0, f32)) : dtype dtype(x)
    h = tensor(full([1], HALF, f32)) : dtype dtype(x)
    x2 = qnn.ElementWiseMultiply(x, x)
    x3 = qnn.ElementWiseMultiply(x2, x)
    a = qnn.ElementWiseMultiply(x3, c)
    b = qnn.ElementWiseAdd(x, a)
    t = qnn.ElementWiseMultiply(b, k)
    u = qnn.Tanh(t)
    v = qnn.ElementWiseAdd(u, one)
    w = qnn.ElementWiseMultiply(x, v)
    y = qnn.ElementWiseMultiply(w, h)
  }
}
"""


@functools.cache
def _pack_with_gelu(root: Path, half: str) -> qlower.Rules:
    """The shipped mllm pack plus one rule file: GELU(tanh) with the given constant."""
    dst = root / f"mllm_{half}"
    if not dst.exists():
        shutil.copytree(PACK, dst)
        (dst / "gelu_tanh.qpat").write_text(GELU_TANH.replace("HALF", half))
    return qlower.load_rules([dst])


@pytest.fixture(scope="module")
def pack_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packs")


def mlp_graph() -> Graph:
    """x → MatMul(W) → GELU(tanh) → Mul(scale) → Add(x) → Softmax: a small MLP block."""
    rng = np.random.default_rng(7)
    g = Graph("mlp")
    x = g.add_value("x", "float32", [2, 8, 16])
    w = g.add_value("w", "float32", [16, 16], data=(rng.standard_normal((16, 16)) * 0.3).astype(np.float32))
    s = g.add_value("s", "float32", [1], data=np.array([0.7], np.float32))
    h, a, m, r, y = (g.add_value(n, "float32", [2, 8, 16]) for n in ("h", "a", "m", "r", "y"))
    g.add_op("fc", "mllm.MatMul", [x, w], [h], {"transpose_a": False, "transpose_b": False})
    g.add_op("act", "mllm.GELU", [h], [a], {"approximate": "tanh"})
    g.add_op("scale", "mllm.Mul", [a, s], [m])
    g.add_op("residual", "mllm.Add", [m, x], [r])
    g.add_op("softmax", "mllm.Softmax", [r], [y], {"dim": -1})
    g.set_io([x], [y])
    return g


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_correct_lowering_passes(pack_root: Path, backend: str) -> None:
    rules = _pack_with_gelu(pack_root, "0.5")
    result = qlower.lower(mlp_graph(), rules, backend, verify=True)
    result.raise_for_errors()
    v = result.verification
    assert v.passed and v.diagnosis == "pass" and v.culprit is None
    assert v.report.precision == ("float16" if backend == "htp" else "float32")
    # the per-op table on demand: every source op, each locally right
    report = qlower.api.verify(mlp_graph(), result, rules, localise=True).report
    assert [r.node for r in report.ops] == ["fc", "act", "scale", "residual", "softmax"]
    assert all(r.verdict == "ok" for r in report.ops), report.table()


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_wrong_rule_is_named(pack_root: Path, backend: str) -> None:
    rules = _pack_with_gelu(pack_root, "0.05")
    result = qlower.lower(mlp_graph(), rules, backend, verify=True)
    result.raise_for_errors()
    v = result.verification
    print(v.summary())
    assert not v.passed and v.diagnosis == "wrong-rule"
    culprit = v.culprit
    assert culprit.node == "act" and culprit.rule == "gelu_tanh"
    assert culprit.location.endswith("gelu_tanh.qpat:2:1")
    assert culprit.local.worst is not None and not culprit.local.ok
    w = culprit.local.worst
    assert abs(w.lowered - w.reference) == pytest.approx(culprit.local.error)
    # only that node is wrong; the ops it feeds are locally right (their error is inherited)
    verdicts = {r.node: r.verdict for r in v.report.ops}
    assert verdicts["fc"] == "ok" and verdicts["act"] == "wrong"
    assert all(verdicts[n] in ("ok", "inherited") for n in ("scale", "residual", "softmax"))


def chain_graph(depth: int) -> Graph:
    """x · c · c · … (depth Muls) with c = 1.0004, which float16 stores as 1.0: each op is off by
    0.04%, the chain by 1.0004^depth − 1."""
    g = Graph("chain")
    x = g.add_value("x", "float32", [4, 32])
    c = g.add_value("c", "float32", [1], data=np.array([1.0004], np.float32))
    prev = x
    for i in range(depth):
        nxt = g.add_value(f"t{i}", "float32", [4, 32])
        g.add_op(f"mul{i}", "mllm.Mul", [prev, c], [nxt])
        prev = nxt
    g.set_io([x], [prev])
    return g


@functools.cache
def _mllm() -> qlower.Rules:
    return qlower.load_rules(packs=["mllm"])


def test_float16_drift_is_labelled_drift() -> None:
    result = qlower.lower(chain_graph(64), _mllm(), "htp", verify=True)
    result.raise_for_errors()
    v = result.verification
    print(v.summary())
    assert not v.passed and v.diagnosis == "drift" and v.culprit is None
    rows = v.report.ops
    assert all(r.local is not None and r.local.ok for r in rows)
    first = v.report.first_drift
    assert first is not None and first.verdict == "drift"
    # drift starts where the accumulated error first crosses the bound, not at the first op
    assert rows.index(first) > 0 and all(r.verdict == "ok" for r in rows[:rows.index(first)])
    # the same chain in float32 is exact to float32's tolerance
    assert qlower.lower(chain_graph(64), _mllm(), "cpu", verify=True).verification.passed


def test_tolerance_overrides() -> None:
    """A looser bound passes the drifting chain; a zero bound fails even the float32 chain."""
    loose = qlower.lower(chain_graph(64), _mllm(), "htp", verify=True, tolerance=TolerancePolicy(rtol=0.05))
    assert loose.verification.passed
    strict = qlower.lower(chain_graph(8), _mllm(), "cpu", verify=True,
                          inputs={"x": np.full((4, 32), 3.0, np.float32)},
                          tolerance=TolerancePolicy(atol=0.0, rtol=0.0))
    assert strict.verification.seed is None
    assert strict.verification.passed == all(o.error == 0 for o in strict.verification.outputs)


# ------------------------------------------------------------------ the command line

def _write_model(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.json"
    qlower.save_graph(mlp_graph(), path)
    return path


def test_cli_verify_gates_and_writes_nothing(pack_root: Path, tmp_path: Path, capsys) -> None:
    _pack_with_gelu(pack_root, "0.05")
    model = _write_model(tmp_path)
    out = tmp_path / "out"
    rc = main(["lower", str(model), "--backend", "htp", "--rules", str(pack_root / "mllm_0.05"),
               "-o", str(out), "--verify"])
    text = capsys.readouterr().out
    print(text)
    assert rc == 1
    assert "wrong lowering: node act (mllm.GELU), rule gelu_tanh at" in text
    assert "no artifacts written" in text
    assert not out.exists() or not any(out.iterdir())
    rc = main(["lower", str(model), "--backend", "htp", "--rules", str(pack_root / "mllm_0.05"),
               "-o", str(out), "--verify", "--keep-artifacts"])
    text = capsys.readouterr().out
    assert rc == 1 and "artifacts written although verification failed" in text
    assert sorted(p.name for p in out.iterdir()) == ["mlp.bin", "mlp.cpp", "mlp_net.json"]


def test_cli_verify_passes_with_a_right_rule(pack_root: Path, tmp_path: Path, capsys) -> None:
    _pack_with_gelu(pack_root, "0.5")
    model = _write_model(tmp_path)
    rc = main(["lower", str(model), "--backend", "htp", "--rules", str(pack_root / "mllm_0.5"),
               "-o", str(tmp_path / "out"), "--verify"])
    assert rc == 0 and "verification passed" in capsys.readouterr().out


def test_cli_debug_table_and_json(pack_root: Path, tmp_path: Path, capsys) -> None:
    _pack_with_gelu(pack_root, "0.05")
    model = _write_model(tmp_path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.random.default_rng(3).standard_normal((2, 8, 16)).astype(np.float32))
    report = tmp_path / "debug.json"
    rc = main(["debug", str(model), "--backend", "cpu", "--rules", str(pack_root / "mllm_0.05"),
               "--inputs", str(inputs), "--json", str(report)])
    text = capsys.readouterr().out
    print(text)
    assert rc == 1
    header = text.splitlines()[1].split()
    assert header[:3] == ["source", "op", "type"] and header[-1] == "verdict"
    doc = json.loads(report.read_text())
    assert doc["format"] == "qlower-debug/1" and doc["culprit"] == "act" and doc["diagnosis"] == "wrong-rule"
    row = next(r for r in doc["ops"] if r["node"] == "act")
    assert row["verdict"] == "wrong" and row["rule"] == "gelu_tanh" and len(row["qnn_ops"]) == 9
    assert set(row["local"]) >= {"tensor", "error", "peak", "bound", "ok", "tolerance", "worst"}


def test_cli_tolerance_flags_are_usage_errors(tmp_path: Path, capsys) -> None:
    model = _write_model(tmp_path)
    assert main(["debug", str(model), "--atol", "-1"]) == 2
    assert main(["lower", str(model), "--verify", "--steps", "many"]) == 2


# ------------------------------------------------------------------ every frontend

def _onnx_gelu_mlp():
    """MatMul, then GELU spelled out as exporters write it (Div, Erf, Add, Mul, Mul): one rule fuses
    the five nodes into qnn.Gelu, so four rows are `fused` into the last Mul's."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)

    def const(name, v):
        return numpy_helper.from_array(np.asarray(v, np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Div", ["h", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["h", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    graph = helper.make_graph(nodes, "gelu_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              [const("w", rng.standard_normal((16, 16)) * 0.5), const("sqrt2", 1.4142135),
                               const("one", 1.0), const("half", 0.5)])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_onnx_fused_pattern_is_checked_as_one(backend: str) -> None:
    from qlower.frontends.onnx_frontend import load_onnx

    model = _onnx_gelu_mlp()
    rules = _pack("onnx")
    result = qlower.lower(load_onnx(model), rules, backend)
    result.raise_for_errors()
    report = qlower.api.verify(load_onnx(model), result, rules, localise=True).report
    assert report.passed, report.table()
    rows = {r.op.split(".")[1] + ("" if r.verdict == "fused" else "*"): r for r in report.ops}
    root = next(r for r in report.ops if r.verdict != "fused" and r.op == "onnx.Mul")
    assert root.rule == "onnx.onnx_gelu" and root.verdict == "ok" and root.local is not None
    fused = [r for r in report.ops if r.verdict == "fused"]
    assert {r.op for r in fused} == {"onnx.Div", "onnx.Erf", "onnx.Add", "onnx.Mul"} and len(rows) >= 3
    assert all(r.group == root.node for r in fused)


def test_onnx_qdq_graph_is_judged_in_quantization_steps() -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from qlower.frontends.onnx_frontend import load_onnx

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8), "w_q"),
             numpy_helper.from_array((rng.random(4) * 0.01 + 0.002).astype(np.float32), "w_s"),
             numpy_helper.from_array(np.zeros(4, np.int8), "w_z"),
             numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "cs"),
             numpy_helper.from_array(np.array(120, np.uint8), "cz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "xs", "xz"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_dq"], axis=0),
             helper.make_node("Conv", ["x_dq", "w_dq"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["c_q"]),
             helper.make_node("DequantizeLinear", ["c_q", "cs", "cz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    rules = _pack("onnx")
    v = qlower.lower(load_onnx(model), rules, "htp", verify=True).verification
    # the float output of the final Dequantize is judged in steps of the encoding it comes from
    assert v.report.precision == "quantized" and v.outputs[0].tolerance.scale == pytest.approx(0.05)
    assert v.passed, v.summary()


@functools.cache
def _pack(name: str) -> qlower.Rules:
    return qlower.load_rules(packs=[name])


@pytest.fixture(scope="module")
def torch_mlp():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                                torch.nn.LayerNorm(16)).eval()
    return torch.export.export(model, (torch.randn(2, 5, 16),))


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_torch_export_graph_verifies(torch_mlp, backend: str) -> None:
    from qlower.frontends.torch_frontend import load_exported

    ep = torch_mlp
    rules = _pack("aten")
    result = qlower.lower(load_exported(ep), rules, backend)
    result.raise_for_errors()
    report = qlower.api.verify(load_exported(ep), result, rules, localise=True).report
    assert report.passed and report.culprit is None, report.table()
    assert all(r.verdict in ("ok", "fused") for r in report.ops), report.table()


def test_verify_imports_only_downward() -> None:
    """The comparison modules sit below frontends, api and cli (issue 17's layering): no import of
    them, at any level. (verify/runner.py, the `qlower test` driver, still loads rules through api.)"""
    import ast

    root = Path(__file__).resolve().parents[2] / "qlower" / "verify"
    for path in (root / "compare.py", root / "debug.py", root / "tolerance.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("qlower.cli", "qlower.api", "qlower.frontends", "qlower.plugins")), \
                    f"{path.name} imports {name}"


def test_cli_bad_inputs_are_clear_errors(tmp_path: Path, capsys) -> None:
    model = tmp_path / "chain.json"
    qlower.save_graph(chain_graph(2), model)
    bad = tmp_path / "bad.npz"
    np.savez(bad, xx=np.zeros((4, 32), np.float32))
    assert main(["debug", str(model), "--backend", "cpu", "--inputs", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "`xx` is not an input of graph `chain`" in err and "did you mean" in err
    assert main(["debug", str(model), "--backend", "cpu", "--inputs", str(tmp_path / "none.npz")]) == 1
    assert "cannot read inputs" in capsys.readouterr().err
