"""Recurrent ops unroll one step per rule application: long sequences must converge.

patterns/onnx/rnn.qpat lowers GRU/LSTM/RNN by a rule that emits one time step and re-emits the
op for the steps left, so the source phase applies rules about once per step. Its budget counts
the ops rules create (qlower.rewrite.driver.RewriteConfig); a budget of the starting ops alone
stopped a 200-step GRU with a false "two rules undo each other". Checked against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import qlower  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402

HIDDEN, FEATURES, BATCH = 3, 4, 1
GATES = {"GRU": 3, "LSTM": 4, "RNN": 1}


def recurrent(op: str, steps: int, direction: str = "forward") -> onnx.ModelProto:
    rng = np.random.default_rng(steps)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    w = nh.from_array((0.3 * rng.standard_normal((dirs, g * HIDDEN, FEATURES))).astype(np.float32), "w")
    r = nh.from_array((0.3 * rng.standard_normal((dirs, g * HIDDEN, HIDDEN))).astype(np.float32), "r")
    b = nh.from_array((0.1 * rng.standard_normal((dirs, 2 * g * HIDDEN))).astype(np.float32), "b")
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = h.make_node(op, ["x", "w", "r", "b"], outs, hidden_size=HIDDEN, direction=direction)
    vo = [h.make_tensor_value_info("y", T.FLOAT, [steps, dirs, BATCH, HIDDEN])] + [
        h.make_tensor_value_info(n, T.FLOAT, [dirs, BATCH, HIDDEN]) for n in outs[1:]]
    graph = h.make_graph([node], "rnn", [h.make_tensor_value_info("x", T.FLOAT, [steps, BATCH, FEATURES])],
                         vo, [w, r, b])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def onnx_rules():
    return qlower.load_rules(packs=["onnx"])


@pytest.mark.parametrize("op, steps, direction", [
    ("GRU", 1, "forward"), ("GRU", 200, "forward"), ("GRU", 1000, "reverse"),
    ("LSTM", 200, "bidirectional"), ("LSTM", 1000, "forward"), ("RNN", 1000, "forward"),
])
def test_long_sequences_lower_and_match_onnxruntime(onnx_rules, op, steps, direction):
    m = recurrent(op, steps, direction)
    x = np.random.default_rng(7).standard_normal((steps, BATCH, FEATURES)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x}), strict=True))
    result = qlower.lower(load_onnx(m), onnx_rules, backend="cpu")
    result.raise_for_errors()
    got = run_dequantized(result.qnn, {"x": x})
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, atol=1e-5, rtol=1e-4, err_msg=f"{op} {steps} {name}")
