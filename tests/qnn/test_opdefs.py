"""The OpDef registry: shipped definitions, custom packages, hostile files, the generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.diagnostics import QlowerError
from qlower.qnn.datatypes import DataType
from qlower.qnn.describe import describe
from qlower.qnn.opdef import BACKENDS, SHIPPED_DIR, OpDefRegistry

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry() -> OpDefRegistry:
    return OpDefRegistry.load()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


CUSTOM = """<?xml version="1.0"?>
<OpDefCollection PackageName="my.ops" Domain="aisw" Version="1.0">
  <OpDefList>
    <OpDef>
      <Name>Fancy</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape></Input>
      <Input><Name>w</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Shape><Rank>2D</Rank></Shape><IsStaticTensor>true</IsStaticTensor></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype></Output>
      <Parameter><Name>mode</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_UINT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>0</Default>
        <Enumeration><Enum>FAST</Enum><Enum>EXACT</Enum></Enumeration></Parameter>
    </OpDef>
  </OpDefList>
  <SupplementalOpDefList Backend="HTP">
    <SupportedOps><OpName>Fancy</OpName></SupportedOps>
    <SupplementalOpDef>
      <Name>Fancy</Name>
      <DatatypeCombination config="All">
        <Input name="x"><Datatype>QNN_DATATYPE_FLOAT_16</Datatype></Input>
        <Output name="y"><Datatype>QNN_DATATYPE_FLOAT_16</Datatype></Output>
      </DatatypeCombination>
    </SupplementalOpDef>
  </SupplementalOpDefList>
</OpDefCollection>
"""


def test_shipped_registry_covers_documented_ops(registry: OpDefRegistry) -> None:
    assert len(registry.names()) == 151
    assert registry.backends == BACKENDS == ("cpu", "dsp", "gpu", "htp", "lpai")
    assert registry.packages() == ("qti.aisw",)


def test_the_backend_list_is_the_shipped_supplements() -> None:
    """BACKENDS is read from the supplement files; each file says, in QNN's schema, which backend it is."""
    import defusedxml.ElementTree as SafeET

    named = {p.stem: SafeET.parse(p).getroot().get("Backend") for p in SHIPPED_DIR.glob("*.xml") if p.stem != "master"}
    assert tuple(named) and sorted(named) == list(BACKENDS)
    assert all(attr.lower() == stem for stem, attr in named.items()), named


def test_param_facts(registry: OpDefRegistry) -> None:
    multiples = registry.param("Tile", "multiples")
    assert multiples is not None and multiples.mandatory and multiples.datatype is DataType.UINT_32
    assert multiples.rank == "1D" and not multiples.is_scalar
    axis = registry.param("Softmax", "axis")
    assert axis is not None and axis.is_scalar and axis.default == "N-1" and not axis.mandatory
    assert registry.param("Conv2d", "pad_amount").rank == "2D"
    assert registry.param("Conv2d", "stride").rank == "1D"
    assert registry.param("MatMul", "transpose_in0").default == "false"
    assert registry.param("Tile", "nope") is None


def test_enums_in_value_order(registry: OpDefRegistry) -> None:
    op = registry.param("ElementWiseNeuron", "operation")
    assert op.enum[:3] == ("ELU", "GELU", "HARD_SIGMOID") and op.enum[4] == "RELU"
    assert registry.enum_value("ElementWiseBinary", "operation", "multiply") == 13
    assert registry.enum_name("ElementWiseBinary", "operation", 13) == "MULTIPLY"
    assert registry.enum_name("ElementWiseBinary", "operation", 99) is None
    assert registry.enum_value("Tile", "multiples", "X") is None


def test_count_ranges(registry: OpDefRegistry) -> None:
    assert registry.input_count_range("Tile") == (1, 1)
    assert registry.input_count_range("MatMul") == (2, 3)
    assert registry.input_count_range("Concat") == (1, None)
    assert registry.output_count_range("Split") == (1, None)
    assert registry.input_count_range("CollectRpnProposals") == (2, 10)  # two bounded repeats of 4
    with pytest.raises(QlowerError):
        registry.input_count_range("NoSuchOp")


def test_backend_support_and_rows(registry: OpDefRegistry) -> None:
    assert registry.supported("Tile", "htp") and registry.supported("Tile", "HTP")
    assert not registry.supported("Tile", "lpai")
    assert not registry.supported("NoSuchOp", "htp")
    rows = registry.supplement("Tile", "htp").rows
    assert len(rows) == 6 and {r.config for r in rows} == {"FP16", "INT16", "INT8", "OTHERS"}
    assert rows[0].get("in[0]") == frozenset({DataType.FLOAT_16})
    cpu = registry.backend_support("cpu")
    assert "Tile" in cpu.supported and cpu.backend == "cpu"
    only = registry.supplement("Softmax", "gpu").target("axis")
    assert only.only_default == ("All",)


def test_describe(registry: OpDefRegistry) -> None:
    text = describe(registry, "Tile", "htp")
    assert "multiples" in text and "UINT_32" in text and "LPAI no" in text
    assert "FP16" in text and "in[0]=FLOAT_16" in text
    listing = describe(registry)
    assert listing.splitlines()[0].split() == ["op", *BACKENDS]
    assert any(line.startswith("Tile ") for line in listing.splitlines())
    assert "Tile" not in describe(registry, None, "lpai").split()
    with pytest.raises(QlowerError) as exc:
        describe(registry, "Matmul")
    assert exc.value.diagnostics[0].hint == "did you mean `MatMul`?"
    with pytest.raises(QlowerError):
        describe(registry, "Tile", "npu")


def test_custom_package(tmp_path: Path) -> None:
    reg = OpDefRegistry.load([write(tmp_path, "fancy.xml", CUSTOM)])
    fancy = reg.op("Fancy")
    assert fancy is not None and fancy.package == "my.ops"
    assert fancy.inputs[1].is_static and fancy.inputs[1].datatypes == (DataType.FLOAT_32,)
    assert fancy.inputs[1].rank == "2D" and fancy.params[0].enum == ("FAST", "EXACT")
    assert reg.supported("Fancy", "htp") and not reg.supported("Fancy", "cpu")
    assert reg.packages() == ("my.ops", "qti.aisw")
    assert "my.ops.Fancy" in describe(reg)
    assert reg.op("Tile") is not None  # shipped definitions are still there


def test_package_without_supplements_runs_everywhere(tmp_path: Path) -> None:
    text = CUSTOM[: CUSTOM.index("  <SupplementalOpDefList")] + "</OpDefCollection>\n"
    reg = OpDefRegistry.from_files([write(tmp_path, "a.xml", text)])
    assert all(reg.supported("Fancy", b) for b in reg.backends)


def test_conflicting_definitions_are_reported(tmp_path: Path) -> None:
    a = write(tmp_path, "a.xml", CUSTOM)
    b = write(tmp_path, "b.xml", CUSTOM.replace("<Rank>2D</Rank>", "<Rank>3D</Rank>"))
    same = write(tmp_path, "c.xml", CUSTOM)
    OpDefRegistry.from_files([a, same])  # identical definitions do not conflict
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([a, b])
    message = str(exc.value)
    assert "conflicts" in message and "a.xml" in message and "b.xml" in message


def test_supplement_must_name_known_entries(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.xml", CUSTOM.replace('<Input name="x">', '<Input name="xx">'))
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([bad])
    assert "unknown entry `xx`" in str(exc.value)
    assert exc.value.diagnostics[0].hint == "did you mean `x`?"


def test_schema_errors_are_collected(tmp_path: Path) -> None:
    text = CUSTOM.replace("<Mandatory>true</Mandatory>", "<Mandatory>yes</Mandatory>", 1)
    text = text.replace("QNN_DATATYPE_FLOAT_32", "QNN_DATATYPE_FLOAT_33")
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([write(tmp_path, "bad.xml", text)])
    messages = [d.message for d in exc.value.diagnostics]
    assert any("must be true or false" in m for m in messages)
    assert any("unknown datatype 'QNN_DATATYPE_FLOAT_33'" in m for m in messages)
    assert all(d.subject and d.subject.endswith("bad.xml") for d in exc.value.diagnostics)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<OpDefCollection PackageName="&lol4;"/>
"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE x [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<OpDefCollection PackageName="p"><OpDefList><OpDef><Name>&secret;</Name></OpDef></OpDefList></OpDefCollection>
"""


@pytest.mark.parametrize("text", [BILLION_LAUGHS, EXTERNAL_ENTITY], ids=["billion-laughs", "external-entity"])
def test_hostile_xml_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([write(tmp_path, "evil.xml", text)])
    diag = exc.value.diagnostics[0]
    assert diag.subject.endswith("evil.xml") and "DTD" in diag.message


def test_malformed_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([write(tmp_path, "broken.xml", "<OpDefCollection>\n  <OpDefList>\n")])
    diag = exc.value.diagnostics[0]
    assert "malformed" in diag.message and diag.span is not None and diag.span.file.endswith("broken.xml")
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([tmp_path / "absent.xml"])
    assert "cannot read" in exc.value.diagnostics[0].message
    with pytest.raises(QlowerError) as exc:
        OpDefRegistry.from_files([write(tmp_path, "other.xml", "<Html/>")])
    assert "expected <OpDefCollection>" in exc.value.diagnostics[0].message


def test_op_package_names_its_backends(tmp_path: Path) -> None:
    """`<SupportedBackend>` in an OpDefCollection's OpDef (QNN's op package layout) limits the op to them."""
    text = CUSTOM[: CUSTOM.index("  <SupplementalOpDefList")] + "</OpDefCollection>\n"
    text = text.replace("    </OpDef>", "      <SupportedBackend>CPU</SupportedBackend>\n"
                                       "      <SupportedBackend>GPU</SupportedBackend>\n    </OpDef>")
    reg = OpDefRegistry.from_files([write(tmp_path, "a.xml", text)])
    assert [b for b in reg.backends if reg.supported("Fancy", b)] == ["cpu", "gpu"]


def test_qnn_native_roots_are_read(tmp_path: Path) -> None:
    """Files rooted in OpDefList / SupplementalOpDefList (QNN's own layout) define qti.aisw ops."""
    master = write(tmp_path, "m.xml", """<OpDefList Version="1.0"><OpDef><Name>Thing</Name>
      <Description><Content>x</Content></Description>
      <Input><Name>in[0..3]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape><Repeated>true</Repeated></Input>
      <Output><Name>out[0]</Name><Mandatory>true</Mandatory><Datatype>BACKEND_SPECIFIC</Datatype>
        <Shape><Rank>ND</Rank></Shape></Output></OpDef></OpDefList>""")
    supp = write(tmp_path, "s.xml", """<SupplementalOpDefList Backend="HTP">
      <SupportedOps><OpName>Thing</OpName></SupportedOps>
      <SupplementalOpDef><Name>Thing</Name></SupplementalOpDef></SupplementalOpDefList>""")
    reg = OpDefRegistry.from_files([master, supp])
    assert reg.op("Thing").package == "qti.aisw" and reg.supported("Thing", "htp")
    assert reg.input_count_range("Thing") == (1, 4)  # bounded by its name in[0..3]


def _sdk_dir(var: str) -> Path:
    import os
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"set {var} to the SDK's examples/QNN/OpPackageGenerator (not shipped with qlower)")
    return Path(value)


def test_sdk_op_package_examples_load() -> None:
    """Every OpPackageGenerator example of the QNN SDK loads next to the shipped definitions."""
    examples = sorted(_sdk_dir("QLOWER_QNN_OPPACKAGE_EXAMPLES").glob("*.xml"))
    assert examples
    for path in examples:
        reg = OpDefRegistry.load([path])
        custom = [p for p in reg.packages() if p != "qti.aisw"]
        assert len(custom) == 1 and reg.names(custom[0]), path.name
        assert any(reg.supported(n, b, custom[0]) for n in reg.names(custom[0]) for b in reg.backends)


def test_describe_lists_documented_constraints(registry: OpDefRegistry) -> None:
    text = describe(registry, "Transpose", "gpu")
    assert "in[0]: rank 2..5" in text and "out[0]: same datatype as in[0]" in text
    text = describe(registry, "ElementWiseUnary", "htp")
    assert "in[0]: rank ..4 (when operation" in text and "SQRT" in text
