"""Real QNN converter outputs: every `*_net.json` under $QLOWER_REAL_NET_JSON_DIR.

Not shipped (third-party files): point the variable at a directory of converter
outputs, e.g. copies of the `_net.json`/`.cpp`/`.bin` files of public repositories
such as apo11o-M/ml-models, xLPMG/efficient-machine-learning (submissions/*/model)
or tristanqiu8/qnn_test_flow (test_dump/*). For each file:

* it reads (absent or git-LFS `.bin` allowed); with a real `.bin` it has all its
  data and runs on the reference interpreter (random inputs; outputs of the declared shapes);
* when the converter's `.cpp` sits next to it, every node has the op type,
  package, params (in order) and scalar values the `.cpp` passes to addNode;
* validation on every backend runs without unknown params or shape-rule crashes;
* with an `expect.json` in the directory ({"<relative path>": {"backend": "htp",
  "errors": 0}, ...}), the error count on that backend is the expected verdict; files of the
  public repositories above are also matched against `real_net_verdicts.json` (the backend each
  was built for and qlower's verdict there).
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from qlower.api import load_registry
from qlower.qnn import reader
from qlower.qnn.backends import BACKENDS
from qlower.qnn.datatypes import to_numpy
from qlower.qnn.model import ScalarParam
from qlower.qnn.validate import validate_graph
from qlower.reference.interpreter import run

ENV = "QLOWER_REAL_NET_JSON_DIR"
ROOT = Path(os.environ[ENV]) if os.environ.get(ENV) else None
FILES = sorted(ROOT.rglob("*_net.json")) if ROOT and ROOT.is_dir() else []

_STR = r'"((?:[^"\\]|\\.)*)"'
_NODE = re.compile(r"addNode\(\s*QNN_OPCONFIG_VERSION_\w+,\s*//[^\n]*\n\s*" + _STR + r",\s*//\s*Node Name\s*"
                   + _STR + r",\s*//\s*Package Name\s*" + _STR + r",\s*//\s*Qnn Node Type\s*(\w+),")
_PARAMS = re.compile(r"Qnn_Param_t\s+(\w+)\[\]\s*=\s*\{(.*?)\n\s*\};", re.S)
_SCALAR = r"(?:,\s*\{\.scalarParam\s*=\s*\(Qnn_Scalar_t\)\s*\{QNN_DATATYPE_(\w+),\s*\{\.\w+\s*=\s*([^}]*)\}\}\})?"
_PARAM = re.compile(r"\.paramType\s*=\s*QNN_PARAMTYPE_(\w+),\s*\.name\s*=\s*" + _STR + _SCALAR)


def cpp_nodes(text: str) -> dict[str, tuple[str, str, list[tuple[str, str, str, str]]]]:
    """node name -> (package, QNN type, [(param kind, name, scalar datatype, scalar value)]) from a converter .cpp."""
    params = {m.group(1): _PARAM.findall(m.group(2)) for m in _PARAMS.finditer(text)}
    return {m.group(1): (m.group(2), m.group(3), params.get(m.group(4), [])) for m in _NODE.finditer(text)}


def _same_scalar(p: object, datatype: str, value: str) -> bool:
    if not isinstance(p, ScalarParam) or p.datatype.name != datatype:
        return False
    got, want = float(p.value), float(value.strip().rstrip("f"))
    return abs(got - want) <= 1e-6 * max(1.0, abs(want))


@pytest.mark.skipif(ROOT is None, reason=f"set {ENV} to a directory of real QNN converter outputs (*_net.json)")
def test_the_directory_has_converter_outputs() -> None:
    assert FILES, f"{ROOT} holds no *_net.json"


@pytest.mark.skipif(not FILES, reason=f"set {ENV} to a directory of real QNN converter outputs (*_net.json)")
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES] if ROOT else [])
def test_real_net_json(path: Path) -> None:
    net = reader.read(path)
    binp = path.with_name(path.name[: -len("_net.json")] + ".bin")
    if binp.is_file() and tarfile.is_tarfile(binp):
        graph = net.require_data()
        rng = np.random.default_rng(0)
        inputs = {}
        for name in graph.inputs:
            t = graph.tensors[name]
            dtype = to_numpy(t.datatype)
            if np.issubdtype(dtype, np.integer):
                info = np.iinfo(dtype)
                inputs[name] = rng.integers(max(info.min, -128), min(info.max, 255), t.dims, endpoint=True).astype(dtype)
            else:
                inputs[name] = rng.standard_normal(t.dims).astype(dtype)
        outputs = run(graph, inputs)
        assert {k: v.shape for k, v in outputs.items()} == {k: tuple(graph.tensors[k].dims) for k in graph.outputs}
    cpp = path.with_name(path.name[: -len("_net.json")] + ".cpp")
    if cpp.is_file():
        nodes = cpp_nodes(cpp.read_text(encoding="utf-8", errors="replace"))
        assert len(nodes) == len(net.graph.ops)
        for op in net.graph.ops:
            package, qnn_type, params = nodes[op.name]
            assert (op.package, op.type) == (package, qnn_type), op.name
            assert [p.name for p in op.params] == [p[1] for p in params], op.name
            for kind, name, datatype, value in params:
                if kind == "SCALAR":
                    assert _same_scalar(op.param(name), datatype, value), (op.name, name)
    registry = load_registry([])
    verdicts = {}
    for backend in BACKENDS:
        diags = validate_graph(net.graph, registry, backend)
        assert not [d for d in diags if d.code in ("unknown-param", "shape-internal")], backend
        verdicts[backend] = sum(d.is_error for d in diags)
    expected = _expected(path)
    if expected is not None:
        assert verdicts[expected["backend"]] == expected["errors"], verdicts


def _expected(path: Path) -> dict | None:
    """The verdict for `path`: from $DIR/expect.json, else from the shipped verdicts of known public files
    (matched by their path within their repository, so any copy layout works)."""
    expect_file = ROOT / "expect.json"
    if expect_file.is_file():
        found = json.loads(expect_file.read_text()).get(str(path.relative_to(ROOT)))
        if found is not None:
            return found
    shipped = json.loads((Path(__file__).with_name("real_net_verdicts.json")).read_text(encoding="utf-8"))["verdicts"]
    rel = path.as_posix()
    matches = [v for k, v in shipped.items() if rel.endswith("/" + k.split(":", 1)[1])]
    return matches[0] if len(matches) == 1 else None
