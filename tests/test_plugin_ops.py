"""A plugin's custom op package goes through the one op registry, like QNN's own ops.

The plugin here brings OpDef XML for package `toy.ops` (op `Pair`: concatenate x with itself on the
last axis, times `gain`), the op's shape function and its reference kernel, plus a rule lowering
`pair.Twice` to it. The custom op must then be checked, shape-inferred, converted (as a `toy.ops`
op), validated (its shape function included) and run by the interpreter through the same
`QnnOps` entry path as a built-in op.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qlower
import qlower.plugins as plugins
from qlower import QlowerError
from qlower.cli.main import main
from qlower.graph import Graph
from qlower.plugins import Plugin, builtin_plugin, merge
from qlower.qnn.model import PACKAGE
from qlower.qnn.shapes import ShapeError, Sig
from qlower.qnn.validate import validate_graph
from qlower.reference.interpreter import run

OPDEFS = """<?xml version="1.0"?>
<OpDefCollection PackageName="toy.ops" Domain="aisw" Version="1.0">
  <OpDefList>
    <OpDef>
      <Name>Pair</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Output>
      <Parameter><Name>gain</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>1.0</Default></Parameter>
      <Parameter><Name>mode</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_UINT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>0</Default>
        <Enumeration><Enum>FAST</Enum><Enum>EXACT</Enum></Enumeration></Parameter>
      <SupportedBackend>CPU</SupportedBackend>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>
  </OpDefList>
</OpDefCollection>
"""

RULES = """\
op pair.Twice(x) -> y { gain: float = 1.0 }

# y = 2 * gain * concat(x, x): the custom op makes an intermediate value whose shape only its
# shape function knows, then a built-in op doubles it.
rule twice {
  match y = pair.Twice(x) { gain: g }
  emit {
    t = qnn.Pair(x) { gain: g, mode: "EXACT" }
    y = qnn.ElementWiseAdd(t, t)
  }
}
"""


def pair_shape(inputs, params):
    (x,) = inputs
    if x is None:
        return None
    if x.rank == 0:
        raise ShapeError("Pair: x must have rank >= 1")
    return [Sig((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)]


def pair_kernel(inputs, params, outs):
    x = np.asarray(inputs[0], np.float32)
    return [(np.concatenate([x, x], axis=-1) * float(params.get("gain", 1.0))).astype(np.float32)]


def twice_kernel(inputs, attrs, outs):
    x = np.asarray(inputs[0], np.float32)
    return [(2 * np.concatenate([x, x], axis=-1) * float(attrs.get("gain", 1.0))).astype(np.float32)]


@pytest.fixture
def pair_plugin(tmp_path, monkeypatch) -> Plugin:
    xml = tmp_path / "toy_ops.xml"
    xml.write_text(OPDEFS)
    p = Plugin("pairs", opdefs=[xml], shapes={"Pair": pair_shape},
               kernels={"qnn": {"Pair": pair_kernel}, "pair": {"Twice": twice_kernel}})
    monkeypatch.setattr(plugins, "discover", lambda: [p])
    return p


def twice_graph(shape=(2, 3), gain=1.5) -> Graph:
    g = Graph("twice")
    x = g.add_value("x", "float32", list(shape))
    y = g.add_value("y", "float32", [*shape[:-1], 2 * shape[-1]])
    g.add_op("tw", "pair.Twice", [x], [y], {"gain": gain})
    g.set_io([x], [y])
    return g


def test_the_custom_op_is_an_entry_of_the_one_registry(pair_plugin):
    rules = qlower.rules_from_text(RULES)
    custom, builtin = rules.ops.get("Pair"), rules.ops.get("ElementWiseAdd")
    assert type(custom) is type(builtin)
    assert (custom.package, builtin.package) == ("toy.ops", PACKAGE)
    assert custom.kernel is pair_kernel and custom.shape_fn is pair_shape
    assert custom.infer([Sig((4, 5), "float32")], {}) == [Sig((4, 10), "float32")]
    assert custom.param("mode").enum == ("FAST", "EXACT") and custom.param("nope") is None
    assert [b for b in rules.ops.backends if custom.supported(b)] == ["cpu", "htp"]
    assert rules.ops.supported("Pair", "htp") and not rules.ops.supported("Pair", "gpu")
    # QNN's coverage lists are about QNN's ops: a custom op without a kernel is not a gap there
    assert "Pair" not in rules.ops.missing_kernel() + rules.ops.missing_shape_fn()


def test_lowered_converted_validated_and_run_like_a_builtin_op(pair_plugin, tmp_path):
    rules = qlower.rules_from_text(RULES)
    g = twice_graph()
    res = qlower.lower(g, rules, "cpu")
    res.raise_for_errors()
    # the intermediate value's shape came from the plugin's shape function
    (t,) = [op.results[0] for op in g.ops if op.type == "qnn.Pair"]
    assert t.shape == (2, 6)
    ops = {op.type: op for op in res.qnn.ops}
    assert ops["Pair"].package == "toy.ops" and ops["ElementWiseAdd"].package == PACKAGE
    assert ops["Pair"].param("mode").value == 1  # enum name → value through the op's param definition
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run(res.qnn, {"x": x}, ops=rules.ops)
    np.testing.assert_allclose(out["y"], 2 * 1.5 * np.concatenate([x, x], -1), rtol=1e-6)
    # lower(verify=True) runs the lowered graph with the same registry's kernels
    again = qlower.lower(twice_graph(), rules, "cpu", verify=True)
    assert again.verification is not None and again.verification.passed


def test_without_the_registry_the_interpreter_has_no_kernel_for_it(pair_plugin):
    rules = qlower.rules_from_text(RULES)
    res = qlower.lower(twice_graph(), rules, "cpu")
    with pytest.raises(QlowerError, match="no reference kernel for toy.ops.Pair"):
        run(res.qnn, {"x": np.ones((2, 3), np.float32)})


def test_validation_uses_the_custom_ops_shape_function(pair_plugin):
    rules = qlower.rules_from_text(RULES)
    res = qlower.lower(twice_graph(), rules, "cpu")
    (pair,) = [op for op in res.qnn.ops if op.type == "Pair"]
    out = res.qnn.tensors[pair.outputs[0]]
    out.dims = (2, 3)  # the shape function says (2, 6)
    found = [d for d in validate_graph(res.qnn, rules.registry, "cpu", ops=rules.ops) if d.is_error]
    assert any("Pair" in (d.subject or "") and "shape" in d.message for d in found), found


def test_a_backend_without_the_op_is_reported(pair_plugin):
    rules = qlower.rules_from_text(RULES)
    res = qlower.lower(twice_graph(), rules, "gpu")
    assert not res.ok
    assert any("Pair is not supported on GPU" in d.message for d in res.diagnostics), res.diagnostics


def test_an_emitted_param_the_op_lacks_is_refused(pair_plugin):
    with pytest.raises(QlowerError, match="speed"):
        qlower.rules_from_text(RULES.replace("mode: \"EXACT\"", "speed: 1"))


def test_saved_net_runs_and_validates_through_the_cli(pair_plugin, tmp_path, capsys):
    rules = qlower.rules_from_text(RULES)
    res = qlower.lower(twice_graph(), rules, "cpu")
    res.save(tmp_path)
    (net,) = tmp_path.glob("*_net.json")
    assert main(["validate", str(net), "--backend", "cpu"]) == 0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(net), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], 3 * np.concatenate([x, x], -1), rtol=1e-6)
    assert main(["plugins"]) == 0
    assert "shape functions: Pair" in capsys.readouterr().out


def test_shape_functions_and_kernels_of_builtin_ops_are_conflicts():
    evil = Plugin("evil", shapes={"Conv2d": pair_shape}, kernels={"qnn": {"ElementWiseAdd": pair_kernel}})
    c = merge([builtin_plugin(), evil])
    msgs = [d.message for d in c.conflicts]
    assert any("shape function qnn.Conv2d" in m for m in msgs) and any("kernel qnn.ElementWiseAdd" in m for m in msgs)
    ops = c.qnn_ops()
    assert ops.get("Conv2d").shape_fn is not pair_shape and ops.get("ElementWiseAdd").kernel is not pair_kernel


def test_plugins_command_names_dead_shape_functions_and_broken_op_packages(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("typo", shapes={"Piar": pair_shape})])
    assert main(["plugins"]) == 0  # a warning
    assert "shape function for qnn.Piar, which no op definition names" in capsys.readouterr().err
    bad = tmp_path / "bad.xml"
    bad.write_text("<OpDefCollection PackageName='x'><OpDefList><OpDef>")
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("broken", opdefs=[bad])])
    assert main(["plugins"]) == 1
    assert "bad.xml" in capsys.readouterr().err


SHADOWING = """<?xml version="1.0"?>
<OpDefCollection PackageName="shadow.ops" Domain="aisw" Version="1.0">
  <OpDefList>
    <OpDef><Name>Relu</Name>
      <Input><Name>in[0]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>out[0]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Output>
      <SupportedBackend>HTP</SupportedBackend></OpDef>
    <OpDef><Name>ArgMax</Name>
      <Input><Name>in[0]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>out[0]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Output>
      <Parameter><Name>axis</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_INT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape></Parameter>
      <SupportedBackend>HTP</SupportedBackend></OpDef>
  </OpDefList>
</OpDefCollection>
"""


def test_an_op_package_op_named_like_a_qnn_op(monkeypatch, tmp_path, capsys):
    """Like the SDK's example packages (ReluOpPackage defines `Relu`): QNN's op keeps the name, and
    `qlower plugins` says the package's op is out of reach; an exact name QNN only has as a
    spelling (`ArgMax` for `Argmax`) is the package's."""
    xml = tmp_path / "shadow.xml"
    xml.write_text(SHADOWING)
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("shadow", opdefs=[xml])])
    ops = plugins.installed().qnn_ops()
    assert ops.unreachable() == (("shadow.ops", "Relu"),)
    assert ops.get("Relu").package == PACKAGE
    assert ops.get("ArgMax").package == "shadow.ops" and ops.get("Argmax").package == PACKAGE
    assert ops.param("ArgMax", "axis").datatype.name == "INT_32"
    assert main(["plugins"]) == 0
    err = capsys.readouterr().err
    assert "op Relu of op package shadow.ops has the name of an op of package qti.aisw" in err
    assert "ArgMax" not in err


SDK_EXAMPLES = "QLOWER_QNN_SDK_OP_PACKAGES"


def test_the_sdk_example_op_packages_join_the_registry():
    """The SDK's examples/QNN/OpPackageGenerator/*.xml (not shipped with qlower): each loads, its
    ops are entries of their package, supported on the backends the file names, or reported as
    out of reach when QNN has the name."""
    import os

    root = os.environ.get(SDK_EXAMPLES)
    if not root or not Path(root).is_dir():
        pytest.skip(f"set {SDK_EXAMPLES} to the SDK's examples/QNN/OpPackageGenerator (not shipped with qlower)")
    files = sorted(Path(root).glob("*.xml"))
    assert files
    for f in files:
        c = merge([builtin_plugin(), Plugin("sdk", opdefs=[f])])
        ops = c.qnn_ops()
        custom = [(pkg, n) for pkg, n in ops.opdefs.ops if pkg != PACKAGE]
        assert custom, f.name
        for pkg, n in custom:
            entry = ops.get(n)
            if (pkg, n) in ops.unreachable():
                assert entry.package != pkg
                assert any(n in d.message and d.code == "plugin-shadowed-op" for d in c.check_ops(ops))
            else:
                assert entry.package == pkg and any(entry.supported(b) for b in ops.backends), (f.name, n)


def test_opdefs_and_check_commands_see_the_plugins_op_package(pair_plugin, tmp_path, capsys):
    assert main(["opdefs", "Pair", "--backend", "htp"]) == 0
    assert "gain" in capsys.readouterr().out
    rules = tmp_path / "r.qpat"
    rules.write_text(RULES)
    assert main(["check", str(rules)]) == 0


def test_qnn_ops_still_run_when_a_plugin_package_reuses_their_names(monkeypatch, tmp_path):
    """`qlower run` of a graph with QNN's Relu, while a plugin's package also defines a `Relu`."""
    xml = tmp_path / "shadow.xml"
    xml.write_text(SHADOWING)
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("shadow", opdefs=[xml])])
    rules = qlower.rules_from_text("op m.R(x) -> y\n\nrule r {\n  match y = m.R(x)\n  emit y = qnn.Relu(x)\n}\n")
    g = Graph("g")
    x, y = g.add_value("x", "float32", [2, 3]), g.add_value("y", "float32", [2, 3])
    g.add_op("n", "m.R", [x], [y])
    g.set_io([x], [y])
    res = qlower.lower(g, rules, "cpu")
    res.raise_for_errors()
    assert res.qnn.ops[0].package == PACKAGE
    res.save(tmp_path)
    (net,) = tmp_path.glob("*_net.json")
    np.savez(tmp_path / "in.npz", x=np.array([[-1, 2, -3], [4, -5, 6]], np.float32))
    assert main(["run", str(net), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_array_equal(z["y"], [[0, 2, 0], [4, 0, 6]])


def test_qlowers_own_kernels_do_not_serve_a_package_op_of_the_same_name(tmp_path):
    """qlower has a kernel for `IsInf` (an op QNN's XML lacks); a package defining `IsInf` gets its own."""
    xml = tmp_path / "isinf.xml"
    xml.write_text(SHADOWING.replace("<Name>Relu</Name>", "<Name>IsInf</Name>"))
    ops = merge([builtin_plugin(), Plugin("p", opdefs=[xml])]).qnn_ops()
    assert ops.get("IsInf").package == "shadow.ops" and ops.get("IsInf").kernel is None
    # bringing one for that name is a conflict with qlower's (kernels are keyed by name), not an override
    c = merge([builtin_plugin(), Plugin("p", opdefs=[xml], kernels={"qnn": {"IsInf": pair_kernel}})])
    assert [d.code for d in c.conflicts] == ["plugin-conflict"] and "qnn.IsInf" in c.conflicts[0].message
    assert c.qnn_ops().get("IsInf").kernel is None
