"""The `<name>.cpp` artifact: a QnnModel source in the shape the converter emits.

One `static ModelError_t addTensor_<t>(QnnModel&)` per graph input, static or
otherwise unproduced tensor, one `addNode_<n>` per op (its output tensors and
params inline), and `QnnModel_composeGraphs` calling them in order. Tensors
are `QNN_TENSOR_VERSION_2` initialisers; static data is reached through the
`BINVARSTART`/`BINLEN` macros, whose symbols match the `.bin` member names.
"""

from __future__ import annotations

import re

import math

from qlower.qnn.datatypes import DataType
from qlower.qnn.emit_bin import Layout, c_identifiers, plan
from qlower.qnn.emit_json import scalar_value
from qlower.qnn.model import EncodingKind, OpConfig, QnnGraph, QnnTensor, ScalarParam, TensorParam

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


def _quant(t: QnnTensor, c: str) -> tuple[list[str], str]:
    """Declarations the quantizeParams initialiser needs, and the initialiser itself."""
    e = t.encoding
    if e is None:
        return [], ("{ QNN_DEFINITION_UNDEFINED, QNN_QUANTIZATION_ENCODING_UNDEFINED, "
                    "{.scaleOffsetEncoding= {.scale= 0.0f, .offset= 0}}}")
    pairs = ", ".join(f"{{.scale= {cfloat(s)}, .offset= {o}}}" for s, o in zip(e.scales, e.offsets))
    head = f"{{ QNN_DEFINITION_DEFINED, QNN_QUANTIZATION_ENCODING_{e.kind.name}, "
    k = e.kind
    if k is EncodingKind.SCALE_OFFSET:
        return [], head + f"{{.scaleOffsetEncoding= {pairs}}}}}"
    if k is EncodingKind.BW_SCALE_OFFSET:
        return [], head + (f"{{.bwScaleOffsetEncoding= {{.bitwidth= {e.bitwidth}, "
                           f".scale= {cfloat(e.scales[0])}, .offset= {e.offsets[0]}}}}}}}")
    if k is EncodingKind.AXIS_SCALE_OFFSET:
        decls = [f"Qnn_ScaleOffset_t scaleOffset_{c}[] = {{{pairs}}};"]
        return decls, head + (f"{{.axisScaleOffsetEncoding= {{.axis= {e.axis}, .numScaleOffsets= "
                              f"{len(e.scales)}, .scaleOffset=scaleOffset_{c}}}}}}}")
    if k is EncodingKind.BW_AXIS_SCALE_OFFSET:
        decls = [f"float scales_{c}[] = {{{', '.join(cfloat(s) for s in e.scales)}}};"]
        offsets = "nullptr"
        if any(e.offsets):
            decls.append(f"int32_t offsets_{c}[] = {{{', '.join(str(o) for o in e.offsets)}}};")
            offsets = f"offsets_{c}"
        return decls, head + (f"{{.bwAxisScaleOffsetEncoding= {{.bitwidth= {e.bitwidth}, .axis= {e.axis}, "
                              f".numElements= {len(e.scales)}, .scales= scales_{c}, .offsets= {offsets}}}}}}}")
    assert k is EncodingKind.BLOCKWISE_EXPANSION and e.block_scales is not None
    assert e.block_scale_bitwidth is not None
    wide = e.block_scale_bitwidth > 8
    ctype, member = ("uint16_t", "blocksScale16") if wide else ("uint8_t", "blocksScale8")
    flat = ", ".join(str(int(v)) for row in e.block_scales for v in row)
    decls = [f"Qnn_ScaleOffset_t scaleOffsets_{c}[] = {{{pairs}}};",
             f"{ctype} blockScales_{c}[] = {{{flat}}};",
             f"Qnn_BlockwiseExpansion_t blockwise_{c} = {{.axis= {e.axis}, .scaleOffsets= scaleOffsets_{c}, "
             f".numBlocksPerAxis= {e.num_blocks_per_axis}, .blockScaleBitwidth= {e.block_scale_bitwidth}, "
             f".blockScaleStorageType= QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_{16 if wide else 8}, "
             f".{member}= blockScales_{c}}};"]
    return decls, head + f"{{.blockwiseExpansion= &blockwise_{c}}}}}"


def _tensor(t: QnnTensor, layout: Layout, pad: str) -> tuple[list[str], list[str]]:
    """(declarations, initialiser lines) for one Qnn_Tensor_t."""
    c = layout.cnames[t.name]
    decls, quant = _quant(t, c)
    dims = "nullptr"
    if t.dims:
        decls.insert(0, f"uint32_t dimensions_{c}[] = {{{', '.join(str(int(d)) for d in t.dims)}}};")
        dims = f"dimensions_{c}"
    buf = (f"{{.clientBuf= {{ .data=BINVARSTART({c}), .dataSize=BINLEN({c})}}}}" if t.data is not None
           else "{.clientBuf= { .data=nullptr, .dataSize=0}}")
    body = [".id=0,", f".name= {cstr(t.name)},", f".type= QNN_TENSOR_TYPE_{t.type.name},",
            ".dataFormat= QNN_TENSOR_DATA_FORMAT_DENSE,", f".dataType= {t.datatype.qnn_name},",
            f".quantizeParams= {quant},", f".rank= {len(t.dims)},", f".dimensions={dims},",
            ".memType= QNN_TENSORMEMTYPE_RAW,", f"{buf},", ".isDynamicDimensions= nullptr,",
            ".sparseParams= { QNN_SPARSE_LAYOUT_UNDEFINED, .hybridCoo= {.numSpecifiedElements= 0, "
            ".numSparseDimensions= 0}},", ".isProduced= 0}}}"]
    lines = [f"{pad}(Qnn_Tensor_t) {{", f"{pad}  .version= QNN_TENSOR_VERSION_2,", f"{pad}  {{.v2= {{"]
    lines += [f"{pad}    {b}" for b in body]
    return decls, lines


def _add_tensor(t: QnnTensor, layout: Layout) -> list[str]:
    decls, lines = _tensor(t, layout, " " * 27)
    out = [f"static ModelError_t addTensor_{layout.cnames[t.name]}(QnnModel& model){{",
           "  ModelError_t err = MODEL_NO_ERROR;"]
    out += [f"  {d}" for d in decls]
    out.append(f"  VALIDATE(model.addTensor({cstr(t.name)}, // Tensor Name")
    out += lines
    return out + ["  ), err);", "  return err;", "}", ""]


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


def _add_node(op: OpConfig, graph: QnnGraph, layout: Layout) -> list[str]:
    nc = layout.node_cnames[op.name]
    out = [f"static ModelError_t addNode_{nc}(QnnModel& model){{", "  ModelError_t err = MODEL_NO_ERROR;",
           "", f"  /* ADDING NODE FOR {nc} */"]
    entries: list[list[str]] = []
    for p in op.params:
        head = f"    {{.paramType=QNN_PARAMTYPE_{'TENSOR' if isinstance(p, TensorParam) else 'SCALAR'},"
        if isinstance(p, TensorParam):
            decls, lines = _tensor(p.tensor, layout, " " * 6)
            out += [f"  {d}" for d in decls]
            entries.append([head, f"     .name={cstr(p.name)},", "     {.tensorParam=", *lines[:-1],
                            lines[-1] + "}}"])
        else:
            entries.append([head, f"     .name={cstr(p.name)},",
                            f"     {_scalar(p, f'node {op.name!r} param {p.name!r}')}}}"])
    if entries:
        out.append(f"  Qnn_Param_t params_{nc}[] = {{")
        for i, e in enumerate(entries):
            out += e[:-1] + [e[-1] + ("," if i < len(entries) - 1 else "")]
        out.append("  };")
    if op.inputs:
        out.append(f"  const char*  inputs_{nc}[] = {{")
        out += [f"    {cstr(n)}{',' if i < len(op.inputs) - 1 else ''}" for i, n in enumerate(op.inputs)]
        out.append("  };")
    tensors = []
    for n in op.outputs:
        decls, lines = _tensor(graph.tensors[n], layout, "    ")
        out += [f"  {d}" for d in decls]
        tensors.append(lines)
    if tensors:
        out.append(f"  Qnn_Tensor_t outputs_{nc}[] = {{")
        for i, lines in enumerate(tensors):
            out += lines[:-1] + [lines[-1] + ("," if i < len(tensors) - 1 else "")]
        out.append("  };")
    pad = " " * 25
    args = [("QNN_OPCONFIG_VERSION_1", "Op_Config_t Version"), (cstr(op.name), "Node Name"),
            (cstr(op.package), "Package Name"), (cstr(op.type), "Qnn Node Type"),
            (f"params_{nc}" if entries else "nullptr", "Node Params"), (str(len(entries)), "Num Node Params"),
            (f"inputs_{nc}" if op.inputs else "nullptr", "Input Tensor Names"),
            (str(len(op.inputs)), "Num Input Tensor Names"),
            (f"outputs_{nc}" if tensors else "nullptr", "Output Tensors"),
            (str(len(tensors)), "Num Output Tensors")]
    out.append(f"  VALIDATE(model.addNode({args[0][0]}, // {args[0][1]}")
    out += [f"{pad}{a}{',' if i < len(args) - 2 else ''} // {what}" for i, (a, what) in enumerate(args[1:])]
    return out + ["  ), err);", "  return err;", "}", ""]


def render(graph: QnnGraph, *, converter_command: str = "qlower", copyright_str: str = "",
           layout: Layout | None = None) -> str:
    """The `.cpp` text; deterministic for a given graph and arguments."""
    layout = layout or plan(graph)
    var = _model_var(graph.name)
    produced = {n for op in graph.ops for n in op.outputs}
    steps: list[tuple[str, str]] = []
    added: set[str] = set()

    def need(name: str) -> None:
        if name not in produced and name not in added:
            added.add(name)
            steps.append(("tensor", name))

    for n in graph.inputs:
        need(n)
    body: list[str] = []
    for op in graph.ops:
        for n in op.inputs:
            need(n)
        steps.append(("node", op.name))
    for n in graph.tensors:
        need(n)
    ops = {op.name: op for op in graph.ops}
    calls = []
    for kind, name in steps:
        if kind == "tensor":
            body += _add_tensor(graph.tensors[name], layout)
            calls.append(f"  VALIDATE(addTensor_{layout.cnames[name]}({var}), err);")
        else:
            body += _add_node(ops[name], graph, layout)
            calls.append(f"  VALIDATE(addNode_{layout.node_cnames[name]}({var}), err);")
    copyright_line = f"/* {_comment(copyright_str)} */" if copyright_str else _NO_COPYRIGHT
    gname = cstr(graph.name)
    head = [copyright_line, "", "/* Command Line used:", _comment(converter_command), "*/", "",
            "#include <cmath>", "", '#include "QnnOpDef.h"', '#include "QnnModel.hpp"', "",
            "// Flag to determine if Backend should do node validation for each opNode added",
            "#define DO_GRAPH_NODE_VALIDATIONS 1", "", "using namespace qnn_wrapper_api;", 'extern "C" {']
    compose = ["QNN_API", "ModelError_t QnnModel_composeGraphs("
               + (",\n" + " " * 36).join(_COMPOSE_ARGS) + ") {", "",
               "  ModelError_t err = MODEL_NO_ERROR;", "", f"  /* model/graph for {var} */",
               f"  QnnModel {var};", "  const QnnGraph_Config_t** graphConfigs = nullptr;",
               f"  VALIDATE(getQnnGraphConfigFromInfo({gname}, graphsConfigInfo, numGraphsConfigInfo, "
               "graphConfigs), err);",
               f"  VALIDATE({var}.initialize(backendHandle, interface, contextHandle, {gname}, debug, "
               "DO_GRAPH_NODE_VALIDATIONS, graphConfigs), err);", *calls, "",
               "  // Add all models to array to get graphsInfo", f"  QnnModel* models [] = {{&{var}}};",
               "  uint32_t numModels = 1;", "",
               "  // Populate the constructed graphs in provided output variables",
               "  VALIDATE(getGraphInfoFromModels(*models, numModels, graphsInfo), err);",
               "  *numGraphsInfo = numModels;", "", "  return err;", "", "} // PREPARE_GRAPHS", "",
               "QNN_API",
               "ModelError_t QnnModel_freeGraphsInfo(GraphInfoPtr_t** graphsInfo, uint32_t numGraphsInfo){",
               "  return qnn_wrapper_api::freeGraphsInfo(graphsInfo, numGraphsInfo);",
               "} // FREEGRAPHINFO", "", "}"]
    return "\n".join(head + body + compose) + "\n"


def _model_var(name: str) -> str:
    """The QnnModel variable in composeGraphs: the graph's name unless that would shadow something."""
    var = c_identifiers([name])[name]
    if var in _RESERVED or var.startswith(("addTensor_", "addNode_", "QnnModel")):
        var = "graph_" + var
    return var
