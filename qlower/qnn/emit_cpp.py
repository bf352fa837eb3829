"""The `<name>.cpp` artifact: a QnnModel source in the shape the converter emits.

One `static ModelError_t addTensor_<t>(QnnModel&)` per graph input, static or
otherwise unproduced tensor, one `addNode_<n>` per op (its output tensors and
params inline), and `QnnModel_composeGraphs` calling them in order. Tensors
are `QNN_TENSOR_VERSION_2` initialisers; static data is reached through the
`BINVARSTART`/`BINLEN` macros, whose symbols match the `.bin` member names.
"""

from __future__ import annotations

import io
from collections import deque
from itertools import chain, repeat
import math
import re
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from qlower.qnn import numtext
from qlower.qnn.datatypes import DataType
from qlower.qnn.emit_bin import Layout, c_identifiers, plan
from qlower.qnn.emit_json import _Text, scalar_value
from qlower.qnn.keys import NO_KEY, scalar_param_key
from qlower.qnn.model import (EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam,
                              TensorParam, TensorType)
from qlower.qnn.joiner import compile_join
from qlower.qnn.table import OpKind, QnnTable

_SCALAR_MEMBER = {
    DataType.INT_8: "int8Value", DataType.SFIXED_POINT_8: "int8Value", DataType.SFIXED_POINT_4: "int8Value",
    DataType.INT_16: "int16Value", DataType.SFIXED_POINT_16: "int16Value",
    DataType.INT_32: "int32Value", DataType.SFIXED_POINT_32: "int32Value", DataType.INT_64: "int64Value",
    DataType.UINT_8: "uint8Value", DataType.UFIXED_POINT_8: "uint8Value", DataType.UFIXED_POINT_4: "uint8Value",
    DataType.UINT_16: "uint16Value", DataType.UFIXED_POINT_16: "uint16Value",
    DataType.UINT_32: "uint32Value", DataType.UFIXED_POINT_32: "uint32Value", DataType.UINT_64: "uint64Value",
    DataType.BOOL_8: "bool8Value", DataType.FLOAT_16: "floatValue", DataType.BFLOAT_16: "floatValue",
    DataType.FLOAT_32: "floatValue", DataType.FLOAT_64: "doubleValue", DataType.STRING: "stringValue",
}
_RESERVED = {"model", "err", "graphConfigs", "models", "numModels", "backendHandle", "interface",
             "contextHandle", "graphsConfigInfo", "numGraphsConfigInfo", "graphsInfo", "numGraphsInfo",
             "debug", "logCallback", "maxLogLevel", "auto", "bool", "break", "case", "char", "class",
             "const", "continue", "default", "delete", "do", "double", "else", "enum", "extern", "float",
             "for", "goto", "if", "inline", "int", "long", "namespace", "new", "operator", "private",
             "protected", "public", "register", "return", "short", "signed", "sizeof", "static",
             "struct", "switch", "template", "this", "throw", "try", "typedef", "union", "unsigned",
             "using", "virtual", "void", "volatile", "while"}
_NO_COPYRIGHT = "/* COPYRIGHT HEADER GOES HERE: No CopyRight Header String Passed During Model Conversion */"
_COMPOSE_ARGS = ("Qnn_BackendHandle_t backendHandle", "QNN_INTERFACE_VER_TYPE interface",
                 "Qnn_ContextHandle_t contextHandle", "const GraphConfigInfo_t** graphsConfigInfo",
                 "const uint32_t numGraphsConfigInfo", "GraphInfoPtr_t** graphsInfo",
                 "uint32_t* numGraphsInfo", "bool debug", "QnnLog_Callback_t logCallback",
                 "QnnLog_Level_t maxLogLevel")


_PLAIN = re.compile(r'[ !#-/0-9:;<=>@-Z\[\]^_`a-z{|}~]*')  # printable ASCII except " \\ and ?


def cstr(text: str) -> str:
    """A C string literal for any text: ASCII only, octal escapes for the rest."""
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def cfloat(x: float, double: bool = False) -> str:
    x = float(x)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return repr(x) if double else repr(x) + "f"


def cint(v: int, dt: DataType | None = None) -> str:
    if dt is DataType.UINT_64:
        return f"{v}ULL"
    if v == -(2**63):
        return "(-9223372036854775807LL - 1)"
    return f"{v}LL" if dt is DataType.INT_64 else str(v)


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def _pairs(e: QuantEncoding) -> str:
    """`{.scale= s, .offset= o}` of each channel, joined by ", " (numpy-formatted: `numtext`)."""
    n = min(len(e.scales), len(e.offsets))
    return numtext.join_fields([numtext.floats(e.scales.array[:n], cfloat), numtext.ints(e.offsets.array[:n])],
                               ("{.scale= ", ", .offset= ", "}"), ", ", n)


def _quant(t: QnnTensor, c: str) -> tuple[list[str], str]:
    """Declarations the quantizeParams initialiser needs, and the initialiser itself."""
    e = t.encoding
    if e is None:
        return [], ("{ QNN_DEFINITION_UNDEFINED, QNN_QUANTIZATION_ENCODING_UNDEFINED, "
                    "{.scaleOffsetEncoding= {.scale= 0.0f, .offset= 0}}}")
    head = f"{{ QNN_DEFINITION_DEFINED, QNN_QUANTIZATION_ENCODING_{e.kind.name}, "
    k = e.kind
    if k is EncodingKind.SCALE_OFFSET:
        return [], head + f"{{.scaleOffsetEncoding= {_pairs(e)}}}}}"
    if k is EncodingKind.BW_SCALE_OFFSET:
        return [], head + (f"{{.bwScaleOffsetEncoding= {{.bitwidth= {e.bitwidth}, "
                           f".scale= {cfloat(e.scales[0])}, .offset= {e.offsets[0]}}}}}}}")
    if k is EncodingKind.AXIS_SCALE_OFFSET:
        decls = [f"Qnn_ScaleOffset_t scaleOffset_{c}[] = {{{_pairs(e)}}};"]
        return decls, head + (f"{{.axisScaleOffsetEncoding= {{.axis= {e.axis}, .numScaleOffsets= "
                              f"{len(e.scales)}, .scaleOffset=scaleOffset_{c}}}}}}}")
    if k is EncodingKind.BW_AXIS_SCALE_OFFSET:
        decls = [f"float scales_{c}[] = {{{numtext.join(numtext.floats(e.scales.array, cfloat))}}};"]
        offsets = "nullptr"
        if e.offsets.array.any():
            decls.append(f"int32_t offsets_{c}[] = {{{numtext.join(numtext.ints(e.offsets.array))}}};")
            offsets = f"offsets_{c}"
        return decls, head + (f"{{.bwAxisScaleOffsetEncoding= {{.bitwidth= {e.bitwidth}, .axis= {e.axis}, "
                              f".numElements= {len(e.scales)}, .scales= scales_{c}, .offsets= {offsets}}}}}}}")
    assert k is EncodingKind.BLOCKWISE_EXPANSION and e.block_scales is not None
    assert e.block_scale_bitwidth is not None
    wide = e.block_scale_bitwidth > 8
    ctype, member = ("uint16_t", "blocksScale16") if wide else ("uint8_t", "blocksScale8")
    flat = numtext.join(numtext.ints(e.block_scales.array))
    decls = [f"Qnn_ScaleOffset_t scaleOffsets_{c}[] = {{{_pairs(e)}}};",
             f"{ctype} blockScales_{c}[] = {{{flat}}};",
             f"Qnn_BlockwiseExpansion_t blockwise_{c} = {{.axis= {e.axis}, .scaleOffsets= scaleOffsets_{c}, "
             f".numBlocksPerAxis= {e.num_blocks_per_axis}, .blockScaleBitwidth= {e.block_scale_bitwidth}, "
             f".blockScaleStorageType= QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_{16 if wide else 8}, "
             f".{member}= blockScales_{c}}};"]
    return decls, head + f"{{.blockwiseExpansion= &blockwise_{c}}}}}"


def _scalar(p: ScalarParam, subject: str) -> str:
    v = scalar_value(p, subject)
    dt = p.datatype
    if dt is DataType.STRING:
        text = cstr(str(v))
    elif isinstance(v, float):
        text = cfloat(v, double=dt is DataType.FLOAT_64)
    else:
        text = cint(int(v), dt)
    return f"{{.scalarParam= (Qnn_Scalar_t) {{{dt.qnn_name}, {{.{_SCALAR_MEMBER[dt]} = {text}}}}}}}"


class _Tensors:
    """Qnn_Tensor_t initialisers at one indentation, from per-kind text templates.

    `(t)` gives (declarations, initialiser): the declarations as `  <decl>\\n`
    lines, the initialiser as lines joined by newlines without a final one.
    An unquantized tensor's text depends only on its name, C identifier and
    (type, datatype, dims, static or not), so that text is cached as the
    constant pieces between the identifier's occurrences.
    """

    def __init__(self, layout: Layout, pad: str) -> None:
        self.renamed = layout.cnames
        self.shapes = layout.shapes
        self.pad = pad
        self.head = (f"{pad}(Qnn_Tensor_t) {{\n{pad}  .version= QNN_TENSOR_VERSION_2,\n{pad}  {{.v2= {{\n"
                     f"{pad}    .id=0,\n{pad}    .name= ")
        self.tail = (f",\n{pad}    .isDynamicDimensions= nullptr,\n{pad}    .sparseParams= "
                     "{ QNN_SPARSE_LAYOUT_UNDEFINED, .hybridCoo= {.numSpecifiedElements= 0, "
                     f".numSparseDimensions= 0}}}},\n{pad}    .isProduced= 0}}}}}}")
        self.mem = f",\n{pad}    .memType= QNN_TENSORMEMTYPE_RAW,\n{pad}    "
        # (type, datatype, dims, static) -> (declaration after the identifier, pieces between identifiers)
        self.plain: dict[tuple[object, ...], tuple[str, tuple[str, ...]]] = {}

    def _kind(self, t: QnnTensor) -> str:
        pad = self.pad
        return (f",\n{pad}    .type= QNN_TENSOR_TYPE_{t.type.name},\n"
                f"{pad}    .dataFormat= QNN_TENSOR_DATA_FORMAT_DENSE,\n"
                f"{pad}    .dataType= {t.datatype.qnn_name},\n{pad}    .quantizeParams= ")

    def _pieces(self, t: QnnTensor, quant: str) -> tuple[str, tuple[str, ...]]:
        """(declaration after `dimensions_<c>` or "", the text after the name split at each `<c>`)."""
        pad = self.pad
        rank = len(t.dims)
        text = f"{self._kind(t)}{quant},\n{pad}    .rank= {rank},\n{pad}    .dimensions="
        if rank:
            decl = f"[] = {{{self.shapes[t.dims][0]}}};\n"
            pieces = [text + "dimensions_"]
            text = ""
        else:
            decl, pieces = "", []
            text += "nullptr"
        if t.data is not None:
            pieces += [f"{text}{self.mem}{{.clientBuf= {{ .data=BINVARSTART(", "), .dataSize=BINLEN(",
                       f")}}}}{self.tail}"]
        else:
            pieces.append(f"{text}{self.mem}{_NO_BUF}{self.tail}")
        return decl, tuple(pieces)

    def __call__(self, t: QnnTensor) -> tuple[str, str]:
        name = t.name
        c = self.renamed.get(name)
        if c is None:  # an identifier: its own C identifier and a plain C string
            c, qname = name, f'"{name}"'
        else:
            qname = cstr(name)
        if t.encoding is None:
            key = (t.type, t.datatype, t.dims, t.data is not None)
            cached = self.plain.get(key)
            if cached is None:
                if len(self.plain) >= 1 << 16:
                    self.plain.clear()
                cached = self.plain[key] = self._pieces(t, _UNQUANTIZED)
            decl, pieces = cached
            return (f"  uint32_t dimensions_{c}{decl}" if decl else "",
                    f"{self.head}{qname}{c.join(pieces)}")
        qdecls, quant = _quant(t, c)
        decl, pieces = self._pieces(t, quant)
        decls = "".join(f"  {d}\n" for d in qdecls)
        if decl:
            decls = f"  uint32_t dimensions_{c}{decl}{decls}"
        return decls, f"{self.head}{qname}{c.join(pieces)}"


_UNQUANTIZED = _quant(QnnTensor("", TensorType.NATIVE, DataType.FLOAT_32, ()), "")[1]
_NO_BUF = "{.clientBuf= { .data=nullptr, .dataSize=0}}"
_ARG_PAD = " " * 25
_COMMA = ",\n"
_CHUNK = 1024  # functions buffered before a write


_SLOT = "\x00"  # names in a node template's text are \x00<k>\x00 while it is being made
_STAND_IN = "QLOWER_STAND_IN"  # a tensor's name in its kind's template (an identifier: printed as is)
_NO_DATA = np.zeros(0, np.uint8)  # a static stand-in's data (the text does not depend on it)


_QUOTED: dict[int, tuple[str | tuple, ...]] = {0: (("n",),), 1: ('"', ("n",), '"')}


def _node_arg(a: int, n_in: int) -> tuple[str | tuple, ...]:
    """A node template's argument as `compile_join` parts, when every name is its own identifier and
    C string: 0 the node's identifier, 1 its name quoted, then inputs quoted, then outputs (identifier,
    quoted)."""
    if a < 2:
        return _QUOTED[a]
    if a < 2 + n_in:
        return '"', ("i", a - 2), '"'
    j, quoted = divmod(a - 2 - n_in, 2)
    return ('"', ("o", j), '"') if quoted else (("o", j),)


def _parts(pieces: list[str], slots: tuple[tuple[int, int], ...], arg: Callable[[int], tuple]) -> list:
    """A template (constant pieces, slots) as `compile_join` parts."""
    at = dict(slots)
    out: list = []
    for j, piece in enumerate(pieces):
        if j in at:
            out += arg(at[j])
        else:
            out.append(piece)
    return out


def _pieces(text: str, fields: dict[str, int]) -> tuple[list[str], tuple[tuple[int, int], ...]]:
    """`text` cut at each occurrence of a field: constant pieces, and (piece, argument) slots.

    Fields are found left to right, the longest first where two start at one place (a regex
    alternation of them, longest first), with `str.find`: a weight's text is megabytes of numbers."""
    pieces: list[str] = []
    slots: list[tuple[int, int]] = []
    keys = sorted(fields, key=len, reverse=True)
    ahead = {k: text.find(k) for k in keys}  # each field's next occurrence at or after `at` (-1: none)
    at = 0
    while True:
        best, hit = -1, ""
        for k in keys:
            p = ahead[k]
            if 0 <= p < at:
                p = ahead[k] = text.find(k, at)
            if p >= 0 and (best < 0 or p < best):
                best, hit = p, k
        if best < 0:
            break
        pieces.append(text[at:best])
        slots.append((len(pieces), fields[hit]))
        pieces.append("")
        at = best + len(hit)
    pieces.append(text[at:])
    return pieces, tuple(slots)


class _Functions:
    """The `addTensor_<t>` and `addNode_<n>` functions' text.

    A function's text depends on its names (tensor; or node, inputs, outputs) and on its
    kind (`QnnTable`). `tensor_at`/`node_at` format a kind's function once with stand-in
    names, keep it as constant pieces with slots, and join each tensor's or node's names
    into them; `tensor`/`node` format one function from its objects, the reference the
    templates must equal byte for byte (and what ops with tensor params use).
    """

    def __init__(self, layout: Layout, table: QnnTable, templates: bool = True) -> None:
        self.renamed = layout.cnames
        self.renamed_nodes = layout.node_cnames
        self.table = table
        self.use_templates = templates
        # every name its own C identifier and string: kinds' text compiles to one join per function
        self.plain = templates and not layout.cnames and not layout.node_cnames
        self.tensor_joins: dict[int, Callable[..., str]] = {}
        self.top = _Tensors(layout, " " * 27)
        self.param = _Tensors(layout, " " * 6)
        self.out = _Tensors(layout, "    ")
        self.scalars: dict[tuple[object, ...], str] = {}
        self.kinds: dict[tuple[str, str], str] = {}
        self.tensor_templates: dict[int, tuple[list[str], tuple[tuple[int, int], ...]]] = {}
        self.node_templates: dict[int, tuple[list[str], tuple[tuple[int, int], ...]] | None] = {}
        self.index: dict[str, int] | None = None
        self.input_at, self.output_at = table.input_at(), table.output_at()  # (where each op's names are)

    def tensor_at(self, i: int) -> str:
        """The `addTensor_` function of the table's tensor `i`."""
        table = self.table
        if not self.use_templates:
            return self.tensor(table.tensor(i))
        k = table.tensor_kind[i]
        if self.plain:
            join = self.tensor_joins.get(k)
            if join is None:
                pieces, slots = self._tensor_template(k)
                join = self.tensor_joins[k] = compile_join(_parts(pieces, slots, lambda a: _QUOTED[a]))
            return join(table.tensor_names[i], None, 0, None, 0, None)
        template = self.tensor_templates.get(k)
        if template is None:
            template = self.tensor_templates[k] = self._tensor_template(k)
        name = table.tensor_names[i]
        c = self.renamed.get(name)
        text, slots = template
        text = text[:]
        args = (name, f'"{name}"') if c is None else (c, cstr(name))
        for at, a in slots:
            text[at] = args[a]
        return "".join(text)

    def _tensor_template(self, k: int) -> tuple[list[str], tuple[tuple[int, int], ...]]:
        kind = self.table.tensor_kinds[k]
        return _pieces(self.tensor(kind.tensor(_STAND_IN, _NO_DATA if kind.static else None)),
                       {f'"{_STAND_IN}"': 1, _STAND_IN: 0})

    def node_joins_of(self) -> list[Callable[..., str] | None]:
        """Per op kind, its nodes' text as a compiled join (`plain` graphs; None: format each node)."""
        out: list[Callable[..., str] | None] = []
        for k, kind in enumerate(self.table.op_kinds):
            template = self.node_templates.get(k, False)
            if template is False:
                template = self.node_templates[k] = self._template(kind)
            if template is None:
                out.append(None)
                continue
            n_in = len(kind.inputs)
            out.append(compile_join(_parts(*template, lambda a, n_in=n_in: _node_arg(a, n_in))))
        return out

    def node_at(self, i: int) -> str:
        """The `addNode_` function of the table's op `i`."""
        table = self.table
        k = table.op_kind[i]
        templates = self.node_templates
        template = templates.get(k, False) if self.use_templates else None
        if template is False:
            template = templates[k] = self._template(table.op_kinds[k])
        if template is None:
            op = table.op(i, self.input_at, self.output_at)
            if self.index is None:
                self.index = {n: j for j, n in enumerate(table.tensor_names)}
            return self.node(op, {n: table.tensor(self.index[n]) for n in op.outputs})
        renamed, renamed_nodes = self.renamed, self.renamed_nodes
        name = table.op_names[i]
        nc = renamed_nodes.get(name)
        args = [name, f'"{name}"'] if nc is None else [nc, cstr(name)]
        for n in table.inputs_of(i, self.input_at):
            args.append(f'"{n}"' if n not in renamed else cstr(n))
        for n in table.outputs_of(i, self.output_at):
            c = renamed.get(n)
            args += (n, f'"{n}"') if c is None else (c, cstr(n))
        text, slots = template
        text = text[:]
        for at, a in slots:
            text[at] = args[a]
        return "".join(text)

    def _template(self, kind: OpKind) -> tuple[list[str], tuple[tuple[int, int], ...]] | None:
        """The text of a kind's nodes as constant pieces and (piece, argument) slots. Arguments: 0 the
        node's C identifier, 1 its quoted name, then each input's quoted name, then each output's C
        identifier and quoted name. None for kinds formatted node by node (tensor params; text that
        could pass for a stand-in name)."""
        if kind.tensor_params or any(_SLOT in t for t in (
                kind.package, kind.type, *(p.name for p in kind.params),
                *(p.value for p in kind.params if isinstance(getattr(p, "value", None), str)))):
            return None
        slot = [0]

        def fresh() -> str:
            slot[0] += 1
            return f"{_SLOT}{slot[0] - 1}{_SLOT}"

        node_name = fresh()
        fake_inputs = [fresh() for _ in kind.inputs]
        fake_tensors: dict[str, QnnTensor] = {}
        fake_outputs = []
        for k in kind.outputs:
            n = fresh()
            fake_outputs.append(n)
            if k < 0:
                return None  # (an unknown output: `plan` refuses the graph before this is reached)
            fake_tensors[n] = self.table.tensor_kinds[k].tensor(n, _NO_DATA if self.table.tensor_kinds[k].static
                                                                else None)
        fake = OpConfig(node_name, kind.type, fake_inputs, fake_outputs, list(kind.params), package=kind.package)
        text = self.node(fake, fake_tensors)
        # placeholder k: quoted, a name (the argument of the quoted name); bare, a C identifier
        fields = {f'"{node_name}"': 1, node_name: 0}
        for i, n in enumerate(fake_inputs):
            fields[f'"{n}"'] = 2 + i  # (an input's identifier never appears in the text)
        base = 2 + len(fake_inputs)
        for i, n in enumerate(fake_outputs):
            fields[f'"{n}"'] = base + 2 * i + 1
            fields[n] = base + 2 * i
        template = _pieces(text, fields)
        if any(_SLOT in p for p in template[0]):
            return None
        return template

    def tensor(self, t: QnnTensor) -> str:
        decls, block = self.top(t)
        c = self.renamed.get(t.name, t.name)
        return (f"static ModelError_t addTensor_{c}(QnnModel& model){{\n"
                f"  ModelError_t err = MODEL_NO_ERROR;\n{decls}"
                f"  VALIDATE(model.addTensor({cstr(t.name)}, // Tensor Name\n{block}\n"
                "  ), err);\n  return err;\n}\n\n")

    def _params(self, op: OpConfig, nc: str) -> tuple[str, str]:
        """(declarations, the `params_<n>` array) of an op with params."""
        decls = []
        entries = []
        scalars = self.scalars
        for p in op.params:
            if isinstance(p, TensorParam):
                d, block = self.param(p.tensor)
                decls.append(d)
                entries.append(f"    {{.paramType=QNN_PARAMTYPE_TENSOR,\n     .name={cstr(p.name)},\n"
                               f"     {{.tensorParam=\n{block}}}}}")
                continue
            key = scalar_param_key(p.name, p.datatype, p.value)
            text = scalars.get(key) if key is not NO_KEY else None
            if text is None:
                text = (f"    {{.paramType=QNN_PARAMTYPE_SCALAR,\n     .name={cstr(p.name)},\n"
                        f"     {_scalar(p, f'node {op.name!r} param {p.name!r}')}}}")
                if key is not NO_KEY:
                    if len(scalars) >= 1 << 16:  # (floats key too: a graph may hold many values)
                        scalars.clear()
                    scalars[key] = text
            entries.append(text)
        return "".join(decls), f"  Qnn_Param_t params_{nc}[] = {{\n{_COMMA.join(entries)}\n  }};\n"

    def node(self, op: OpConfig, tensors: dict[str, QnnTensor]) -> str:
        name = op.name
        nc = self.renamed_nodes.get(name)
        if nc is None:
            nc, qname = name, f'"{name}"'
        else:
            qname = cstr(name)
        params, inputs, outputs = op.params, op.inputs, op.outputs
        pdecls, ptext = self._params(op, nc) if params else ("", "")
        if inputs:
            renamed = self.renamed
            names = ",\n    ".join([f'"{n}"' if n not in renamed else cstr(n) for n in inputs])
            itext = f"  const char*  inputs_{nc}[] = {{\n    {names}\n  }};\n"
        else:
            itext = ""
        if len(outputs) == 1:
            odecls, blocks = self.out(tensors[outputs[0]])
        elif outputs:
            made = [self.out(tensors[n]) for n in outputs]
            odecls, blocks = "".join(d for d, _ in made), _COMMA.join(b for _, b in made)
        else:
            odecls = blocks = ""
        otext = f"  Qnn_Tensor_t outputs_{nc}[] = {{\n" if outputs else ""
        oend = "\n  };\n" if outputs else ""
        key = (op.package, op.type)
        kind = self.kinds.get(key)
        if kind is None:
            kind = self.kinds[key] = (f"{_ARG_PAD}{cstr(op.package)}, // Package Name\n"
                                      f"{_ARG_PAD}{cstr(op.type)}, // Qnn Node Type\n{_ARG_PAD}")
        return (f"static ModelError_t addNode_{nc}(QnnModel& model){{\n  ModelError_t err = MODEL_NO_ERROR;\n\n"
                f"  /* ADDING NODE FOR {nc} */\n{pdecls}{ptext}{itext}{odecls}{otext}{blocks}{oend}"
                f"  VALIDATE(model.addNode(QNN_OPCONFIG_VERSION_1, // Op_Config_t Version\n"
                f"{_ARG_PAD}{qname}, // Node Name\n{kind}"
                f"{f'params_{nc}' if params else 'nullptr'}, // Node Params\n"
                f"{_ARG_PAD}{len(params)}, // Num Node Params\n"
                f"{_ARG_PAD}{f'inputs_{nc}' if inputs else 'nullptr'}, // Input Tensor Names\n"
                f"{_ARG_PAD}{len(inputs)}, // Num Input Tensor Names\n"
                f"{_ARG_PAD}{f'outputs_{nc}' if outputs else 'nullptr'}, // Output Tensors\n"
                f"{_ARG_PAD}{len(outputs)} // Num Output Tensors\n"
                "  ), err);\n  return err;\n}\n\n")


def write(graph: QnnGraph | QnnTable, fileobj: BinaryIO, *, converter_command: str = "qlower",
          copyright_str: str = "", layout: Layout | None = None, templates: bool = True) -> None:
    """Stream the `.cpp` text into `fileobj` (binary, UTF-8); deterministic for a given graph and arguments.

    The `addTensor_`/`addNode_` functions are written as the graph is walked, each from the text
    of its kind (`QnnTable`) with its names joined in; `QnnModel_composeGraphs`, which calls them
    in the same order, comes from a second, cheap walk, so no list of the graph's steps is kept.
    `templates=False` formats every function afresh (the same bytes, slower: for tests of the templates).
    """
    layout = layout or plan(graph)
    table = layout.table
    assert table is not None
    var = _model_var(table.name)
    out = _Text(fileobj)
    parts = out.parts
    add = parts.append
    copyright_line = f"/* {_comment(copyright_str)} */" if copyright_str else _NO_COPYRIGHT
    add("\n".join([copyright_line, "", "/* Command Line used:", _comment(converter_command), "*/", "",
                   "#include <cmath>", "", '#include "QnnOpDef.h"', '#include "QnnModel.hpp"', "",
                   "// Flag to determine if Backend should do node validation for each opNode added",
                   "#define DO_GRAPH_NODE_VALIDATIONS 1", "", "using namespace qnn_wrapper_api;",
                   'extern "C" {', ""]))
    # A tensor no op produces gets an addTensor_ function where it is first needed:
    # graph inputs first, then each op's inputs before the op, then the rest.
    names = table.tensor_names
    if table.unproduced is not None:  # tensor name -> index, for those no op outputs
        unproduced = {names[i]: i for i in table.unproduced}
    else:
        produced = set(table.op_output_names)
        unproduced = dict(zip(names, range(len(names))))
        deque(map(unproduced.pop, produced, repeat(None)), maxlen=0)  # (removed in C)
    fn = _Functions(layout, table, templates)
    tensor_fn, node_fn = fn.tensor_at, fn.node_at
    # the tensors whose functions come first (graph inputs), and those that come before an op (by op index)
    first = [n for n in dict.fromkeys(table.inputs) if n in unproduced]
    before: dict[int, list[str]] = {}
    for n in first:
        add(tensor_fn(unproduced[n]))
    out.flush()
    pending = unproduced.keys() - set(first)
    joins = fn.node_joins_of() if fn.plain else [None] * len(table.op_kinds)
    op_names, op_kind = table.op_names, table.op_kind
    ins, outs, in_at, out_at = table.op_input_names, table.op_output_names, fn.input_at, fn.output_at
    every_join = None not in joins
    disjoint = pending.isdisjoint
    for a in range(0, len(op_names), _CHUNK):
        b = min(a + _CHUNK, len(op_names))
        # the ops of this chunk that need tensor functions first (the tests run in C; each such op then
        # takes, in order, the tensors no earlier op took)
        texts: dict[int, str] = {}
        if pending and not disjoint(ins[in_at[a]:in_at[b]]):
            for i in [i for i, p, q in zip(range(a, b), in_at[a:b], in_at[a + 1:b + 1]) if not disjoint(ins[p:q])]:
                new = [n for n in dict.fromkeys(ins[in_at[i]:in_at[i + 1]]) if n in pending]
                if new:
                    pending.difference_update(new)
                    before[i] = new
                    texts[i] = "".join([tensor_fn(unproduced[n]) for n in new])
        if every_join:  # each node one compiled join, its tensor functions (if any) before it
            get = texts.get
            add("".join([f"{get(i, '')}{joins[k](n, ins, p, outs, q, None)}" for i, n, k, p, q in zip(
                range(a, b), op_names[a:b], op_kind[a:b], in_at[a:b], out_at[a:b])]))
        else:
            for i, name, k, p, q in zip(range(a, b), op_names[a:b], op_kind[a:b], in_at[a:b], out_at[a:b]):
                if i in texts:
                    add(texts[i])
                join = joins[k]
                add(join(name, ins, p, outs, q, None) if join is not None else node_fn(i))
        out.flush()
    last = [n for n in unproduced if n in pending]  # (op outputs are graph tensors) those left
    for n in last:
        add(tensor_fn(unproduced[n]))
    gname = cstr(table.name)
    add("\n".join(["QNN_API", "ModelError_t QnnModel_composeGraphs("
                   + (",\n" + " " * 36).join(_COMPOSE_ARGS) + ") {", "",
                   "  ModelError_t err = MODEL_NO_ERROR;", "", f"  /* model/graph for {var} */",
                   f"  QnnModel {var};", "  const QnnGraph_Config_t** graphConfigs = nullptr;",
                   f"  VALIDATE(getQnnGraphConfigFromInfo({gname}, graphsConfigInfo, numGraphsConfigInfo, "
                   "graphConfigs), err);",
                   f"  VALIDATE({var}.initialize(backendHandle, interface, contextHandle, {gname}, debug, "
                   "DO_GRAPH_NODE_VALIDATIONS, graphConfigs), err);", ""]))
    # The calls, in the order the functions were written.
    cname, node_cname = layout.cnames.get, layout.node_cnames.get

    def calls(tensors: list[str]) -> str:
        return "".join(f"  VALIDATE(addTensor_{cname(n, n)}({var}), err);\n" for n in tensors)

    add(calls(first))
    if layout.cnames:
        pre = {i: calls(ns) for i, ns in before.items()}
    else:  # (most ops that need a tensor function need one)
        pre = {i: f"  VALIDATE(addTensor_{ns[0]}({var}), err);\n" if len(ns) == 1 else calls(ns)
               for i, ns in before.items()}
    get = pre.get
    node_names = op_names if not layout.node_cnames else [node_cname(n, n) for n in op_names]
    for a in range(0, len(op_names), 16 * _CHUNK):
        b = min(a + 16 * _CHUNK, len(op_names))
        if pre:
            add("".join([f"{get(i, '')}  VALIDATE(addNode_{n}({var}), err);\n"
                         for i, n in zip(range(a, b), node_names[a:b])]))
        else:
            add("".join([f"  VALIDATE(addNode_{n}({var}), err);\n" for n in node_names[a:b]]))
        out.flush()
    add(calls(last))
    add("\n".join(["", "  // Add all models to array to get graphsInfo", f"  QnnModel* models [] = {{&{var}}};",
                   "  uint32_t numModels = 1;", "",
                   "  // Populate the constructed graphs in provided output variables",
                   "  VALIDATE(getGraphInfoFromModels(*models, numModels, graphsInfo), err);",
                   "  *numGraphsInfo = numModels;", "", "  return err;", "", "} // PREPARE_GRAPHS", "",
                   "QNN_API",
                   "ModelError_t QnnModel_freeGraphsInfo(GraphInfoPtr_t** graphsInfo, uint32_t numGraphsInfo){",
                   "  return qnn_wrapper_api::freeGraphsInfo(graphsInfo, numGraphsInfo);",
                   "} // FREEGRAPHINFO", "", "}", ""]))
    out.flush()


def render(graph: QnnGraph, *, converter_command: str = "qlower", copyright_str: str = "",
           layout: Layout | None = None, templates: bool = True) -> str:
    """The `.cpp` text `write` streams, as one string (for tests and small graphs)."""
    buf = io.BytesIO()
    write(graph, buf, converter_command=converter_command, copyright_str=copyright_str, layout=layout,
          templates=templates)
    return buf.getvalue().decode("utf-8")


def _model_var(name: str) -> str:
    """The QnnModel variable in composeGraphs: the graph's name unless that would shadow something."""
    var = c_identifiers([name])[name]
    if var in _RESERVED or var.startswith(("addTensor_", "addNode_", "QnnModel")):
        var = "graph_" + var
    return var
