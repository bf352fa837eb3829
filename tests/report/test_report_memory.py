"""`qlower lower --report`'s memory figures equal an independent reading of the written `_net.json`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from report_support import memory_from_net_json, mini_model

from qlower.cli.main import main
from qlower.qnn import artifacts
from qlower.qnn.datatypes import DataType as DT
from qlower.qnn.datatypes import to_numpy
from qlower.qnn.model import OpConfig, QnnGraph, QnnTensor, ScalarParam, TensorParam
from qlower.qnn.model import TensorType as TT
from qlower.report import memory_report


def test_report_memory_equals_the_net_json_figures(tmp_path, capsys):
    model = mini_model(tmp_path)
    code = main(["lower", str(model), "--backend", "htp", "-o", str(tmp_path / "out"),
                 "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0
    mem = json.loads((tmp_path / "r.json").read_text())["memory"]
    want = memory_from_net_json(tmp_path / "out" / "mini_net.json")
    assert mem["static_bytes"] == want["static_bytes"] > 0
    assert mem["peak_activation_bytes"] == want["peak_activation_bytes"] > 0
    assert (mem["peak_node"], mem["peak_step"]) == (want["peak_node"], want["peak_step"])
    assert {DT[k].value: v for k, v in mem["static_bytes_by_datatype"].items()} == want["static_by_code"]
    # the same figures in the terminal summary
    assert f"static {mem['static_bytes']:,} bytes" in out
    assert f"peak activations {mem['peak_activation_bytes']:,} bytes" in out and mem["peak_node"] in out


_TYPES = [DT.FLOAT_32, DT.FLOAT_16, DT.UFIXED_POINT_8, DT.UFIXED_POINT_16, DT.INT_32, DT.BOOL_8, DT.UFIXED_POINT_4,
          DT.SFIXED_POINT_8, DT.UINT_8]


@st.composite
def graphs(draw) -> QnnGraph:
    """Random well-formed DAGs: inputs, static tensors, ops with tensor params, native and output tensors."""
    g = QnnGraph("rand")
    counter = iter(range(1000))

    def tensor(kind: TT) -> QnnTensor:
        dims = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        dt = draw(st.sampled_from(_TYPES))
        data = np.zeros(dims, dtype=to_numpy(dt)) if kind is TT.STATIC else None
        return QnnTensor(f"t{next(counter)}", kind, dt, dims, None, data)

    for _ in range(draw(st.integers(1, 3))):
        g.inputs.append(g.add_tensor(tensor(TT.APP_WRITE)).name)
    for _ in range(draw(st.integers(0, 2))):
        g.add_tensor(tensor(TT.STATIC))
    for k in range(draw(st.integers(0, 7))):
        ins = draw(st.lists(st.sampled_from(list(g.tensors)), min_size=1, max_size=3))
        outs = [g.add_tensor(tensor(draw(st.sampled_from([TT.NATIVE, TT.NATIVE, TT.APP_READ])))).name
                for _ in range(draw(st.integers(1, 2)))]
        params = [TensorParam("table", tensor(TT.STATIC))] if draw(st.booleans()) else []
        params.append(ScalarParam("axis", DT.INT_32, 0))
        g.ops.append(OpConfig(f"op{k}", "Add", ins, outs, params))
    g.outputs = [n for n, t in g.tensors.items() if t.type is TT.APP_READ]
    return g


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_memory_report_agrees_with_the_written_json(g: QnnGraph) -> None:
    with tempfile.TemporaryDirectory() as d:
        net = artifacts.save(g, Path(d))[0]
        want = memory_from_net_json(net)
    got = memory_report(g)
    assert got.static_bytes == want["static_bytes"]
    assert got.peak_activation_bytes == want["peak_activation_bytes"]
    assert (got.peak_node, got.peak_step) == (want["peak_node"], want["peak_step"])
    assert list(got.live_bytes) == want["live"]
    assert got.static_bytes_by_datatype == {DT(c).name: v for c, v in sorted(want["static_by_code"].items(),
                                                                             key=lambda kv: DT(kv[0]).name)}


def test_liveness_by_hand() -> None:
    """in(400 B) -> a(40) -> b(4) -> out; `in` is also read at the last step, so it stays live throughout."""
    g = QnnGraph("h")
    for name, kind, n in (("in", TT.APP_WRITE, 100), ("a", TT.NATIVE, 10), ("b", TT.NATIVE, 1),
                          ("out", TT.APP_READ, 2)):
        g.add_tensor(QnnTensor(name, kind, DT.FLOAT_32, (n,)))
    g.add_tensor(QnnTensor("w", TT.STATIC, DT.UFIXED_POINT_4, (3,), data=np.zeros(3, np.uint8)))
    g.inputs, g.outputs = ["in"], ["out"]
    g.ops = [OpConfig("s0", "Relu", ["in", "w"], ["a"]), OpConfig("s1", "Relu", ["a"], ["b"]),
             OpConfig("s2", "Add", ["b", "in"], ["out"])]
    m = memory_report(g)
    assert m.live_bytes == (440, 444, 412)
    assert (m.peak_activation_bytes, m.peak_node, m.peak_step) == (444, "s1", 1)
    assert m.static_bytes == 2 and m.static_bytes_by_datatype == {"UFIXED_POINT_4": 2}  # 3 × 4 bits -> 2 bytes


def test_empty_graph_has_no_peak() -> None:
    m = memory_report(QnnGraph("e"))
    assert (m.static_bytes, m.peak_activation_bytes, m.peak_node, m.live_bytes) == (0, 0, None, ())
