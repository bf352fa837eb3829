"""MACs per op (the `opdefs/macs.txt` table) against naive loop counts, and their place in `_net.json`."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.qnn import artifacts
from qlower.qnn.datatypes import DataType as DT
from qlower.qnn.emit_json import si_notation
from qlower.qnn.macs import FormulaError, graph_macs, parse_table
from qlower.qnn.model import OpConfig, Origin, QnnGraph, QnnTensor, ScalarParam, TensorParam
from qlower.qnn.model import TensorType as TT


def one_op(op_type: str, ins: list[tuple[int, ...]], out: tuple[int, ...], params=(), package="qti.aisw") -> QnnGraph:
    g = QnnGraph("m")
    names = []
    for k, dims in enumerate(ins):
        kind = TT.APP_WRITE if k == 0 else TT.STATIC
        data = None if kind is TT.APP_WRITE else np.zeros(dims, np.float32)
        names.append(g.add_tensor(QnnTensor(f"in{k}", kind, DT.FLOAT_32, dims, data=data)).name)
    g.add_tensor(QnnTensor("out", TT.APP_READ, DT.FLOAT_32, out))
    g.inputs, g.outputs = ["in0"], ["out"]
    g.ops.append(OpConfig("op", op_type, names, ["out"], list(params), package=package))
    return g


def count(*ranges: int) -> int:
    """Iterations of a nested loop, counted one by one."""
    return sum(1 for _ in itertools.product(*map(range, ranges)))


dim = st.integers(1, 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(dim, min_size=0, max_size=2), dim, dim, dim, st.booleans())
def test_matmul_is_one_mac_per_multiply_of_the_naive_loop(batch, m, k, n, transpose_in0):
    a = (*batch, k, m) if transpose_in0 else (*batch, m, k)
    g = one_op("MatMul", [a, (*batch, k, n)], (*batch, m, n),
               [ScalarParam("transpose_in0", DT.BOOL_8, transpose_in0), ScalarParam("transpose_in1", DT.BOOL_8, False)])
    assert graph_macs(g) == [count(math.prod(batch), m, n, k)]


@settings(max_examples=30, deadline=None)
@given(dim, dim, dim, dim, dim, dim, st.sampled_from([1, 2]))
def test_conv2d_counts_every_filter_tap(n, oh, ow, kh, kw, cin_per_group, group):
    cout = 2 * group
    g = one_op("Conv2d", [(n, oh + kh - 1, ow + kw - 1, cin_per_group * group), (kh, kw, cin_per_group, cout)],
               (n, oh, ow, cout))
    # for each output element, each tap of its group's input channels
    assert graph_macs(g) == [count(n, oh, ow, cout, kh, kw, cin_per_group)]


def test_depthwise_fully_connected_and_transpose_conv():
    g = one_op("DepthWiseConv2d", [(1, 6, 6, 4), (3, 3, 1, 4)], (1, 4, 4, 4))
    assert graph_macs(g) == [count(1, 4, 4, 4, 3, 3)]
    g = one_op("FullyConnected", [(5, 7), (3, 7)], (5, 3))  # weights [m=3, n=7]
    assert graph_macs(g) == [count(5, 3, 7)]
    # every input element scatters into kh*kw taps of each of its group's output channels
    g = one_op("TransposeConv2d", [(1, 3, 3, 4), (2, 2, 4, 3)], (1, 6, 6, 3))
    assert graph_macs(g) == [count(1, 3, 3, 4, 2, 2, 3)]
    pool = TensorParam("filter_size", QnnTensor("fs", TT.STATIC, DT.UINT_32, (2,), data=np.array([2, 3], np.uint32)))
    g = one_op("PoolAvg2d", [(1, 4, 6, 2)], (1, 2, 2, 2), [pool])
    assert graph_macs(g) == [count(1, 2, 2, 2, 2, 3)]


@pytest.mark.parametrize("op_type", ["Reshape", "Transpose", "Concat", "Gather", "Cast", "StridedSlice", "Tile",
                                     "Softmax", "Relu"])
def test_data_movement_and_unlisted_ops_count_zero(op_type):
    assert graph_macs(one_op(op_type, [(2, 3)], (3, 2))) == [0]


def test_custom_packages_and_missing_tensors_count_zero():
    assert graph_macs(one_op("MatMul", [(2, 3), (3, 4)], (2, 4), package="my.pkg")) == [0]
    g = one_op("FullyConnected", [(2, 3)], (2, 4))  # no weights input
    assert graph_macs(g) == [0]


def test_net_json_carries_macs_totals_and_provenance(tmp_path: Path):
    g = one_op("FullyConnected", [(5, 7), (3, 7)], (5, 3))
    g.ops[0].origin = Origin("linear", "mllm/matmul.qpat:47", ("proj",))
    net = json.loads(artifacts.save(g, tmp_path)[0].read_text())
    assert net["Total MACs per inference"] == "105 (100%)"
    node = net["graph"]["nodes"]["op"]
    assert node["macs_per_inference"] == si_notation(105, 105)
    assert node["provenance"] == {"rule": "linear", "location": "mllm/matmul.qpat:47", "source_nodes": ["proj"]}
    assert list(node)[-2:] == ["macs_per_inference", "provenance"]  # after the converter's keys


def test_provenance_does_not_change_cpp_or_bin(tmp_path: Path):
    g = one_op("FullyConnected", [(5, 7), (3, 7)], (5, 3))
    plain = artifacts.save(g, tmp_path / "a")
    g.ops[0].origin = Origin("linear", "mllm/matmul.qpat:47", ("proj",))
    tagged = artifacts.save(g, tmp_path / "b")
    assert plain[1].read_bytes() == tagged[1].read_bytes() and plain[2].read_bytes() == tagged[2].read_bytes()


@pytest.mark.parametrize("text, needle", [
    ("MatMul out", "expected `OpType"), ("MatMul = out *", "expected more"), ("MatMul = bogus", "unknown factor"),
    ("MatMul = out\nMatMul = out", "listed twice"), ("X = in0[a]", "expected an integer"), ("X = out $", "cannot read"),
])
def test_malformed_table_lines_name_file_and_line(text, needle):
    with pytest.raises(FormulaError, match=needle) as e:
        parse_table(text, "t.txt")
    assert "t.txt:" in str(e.value)
