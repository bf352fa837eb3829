"""Big graph files take the fast JSON path (orjson when installed) and read the same as small ones."""

from __future__ import annotations

import json
import math

from qlower.graph.io import dumps_graph, loads_graph


def _text(n: int, with_nan: bool) -> str:
    tensors = {"x0": {"dtype": "float32", "shape": [1, 4]}}
    nodes = []
    for i in range(n):
        tensors[f"x{i + 1}"] = {"dtype": "float32", "shape": [1, 4]}
        tensors[f"c{i}"] = {"dtype": "float32", "shape": [4],
                            "data": [float("nan") if with_nan and i == 7 else 0.5, 1.0, -2.0, 1e-5]}
        nodes.append({"name": f"n{i}", "op": "mllm.Add", "inputs": [f"x{i}", f"c{i}"], "outputs": [f"x{i + 1}"],
                      "attrs": {"k": i, "big": 2**62}})
    doc = {"format": "qlower-graph/1", "name": "big", "inputs": ["x0"], "outputs": [f"x{n}"], "tensors": tensors,
           "nodes": nodes}
    return json.dumps(doc)


def test_big_file_reads_like_json():
    for with_nan in (False, True):  # NaN is not JSON: orjson refuses it and json reads it
        text = _text(6000, with_nan)
        assert len(text) > 1 << 20
        g = loads_graph(text)
        assert len(g) == 6000
        assert g.op("n5999").attrs == {"k": 5999, "big": 2**62}
        assert type(g.op("n3").attrs["big"]) is int
        assert math.isnan(g.value("c7").data[0]) == with_nan
        assert loads_graph(dumps_graph(g)).op("n17").attrs == g.op("n17").attrs


def test_big_file_read_as_bytes_locates_errors_and_refuses_bad_utf8(tmp_path):
    """A big file is decoded from its bytes (no str of the whole file); errors are still located and
    a file that is not UTF-8 is a clear error, not a traceback."""
    import pytest

    from qlower.diagnostics import QlowerError
    from qlower.graph.io import load_graph

    text = _text(6000, False)
    path = tmp_path / "big.json"
    path.write_text(text)
    assert len(load_graph(path)) == 6000
    bad = text.replace('"c4321": {"dtype": "float32"', '"c4321": {"dtype": "floot32"', 1)
    assert bad != text
    path.write_text(bad)
    with pytest.raises(QlowerError) as e:
        load_graph(path)
    [d] = e.value.diagnostics
    assert "floot32" in d.message and d.span is not None
    assert d.span.line == 1 and d.span.column == bad.index('"c4321"') + 1
    path.write_bytes(text.encode()[:-200] + b"\xff\xfe" + text.encode()[-198:])
    with pytest.raises(QlowerError) as e:
        load_graph(path)
    assert "cannot read graph file" in str(e.value) or "invalid JSON" in str(e.value)
