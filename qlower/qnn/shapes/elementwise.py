"""Element-wise ops, activations and dtype conversions: the output is the
(broadcast) input shape, so only the dtype needs thought."""

from __future__ import annotations

from qlower.qnn.shapes.core import Call, Rule, Sig, broadcast, fmt, same

BOOL = "bool"

# Ops whose output has the shape and dtype of in[0].
_UNARY = (
    "ElementWiseAbs", "ElementWiseAsin", "ElementWiseAtan", "ElementWiseCeil", "ElementWiseCos",
    "ElementWiseExp", "ElementWiseFloor", "ElementWiseLog", "ElementWiseNeg", "ElementWiseRound",
    "ElementWiseRsqrt", "ElementWiseSin", "ElementWiseSign", "ElementWiseSoftplus",
    "ElementWiseSquareRoot",
    "Sigmoid", "Tanh", "Relu", "Relu1", "Relu6", "ReluMinMax", "Gelu", "HardSwish", "Elu", "Logit",
)

# Binary ops keeping in[0]'s dtype / producing bool.
_ARITHMETIC = (
    "ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
    "ElementWiseFloorDiv", "ElementWiseFmod", "ElementWiseMod", "ElementWiseMaximum",
    "ElementWiseMinimum", "ElementWisePower", "ElementWiseSquaredDifference",
)
_PREDICATE = (
    "ElementWiseEqual", "ElementWiseNotEqual", "ElementWiseGreater", "ElementWiseGreaterEqual",
    "ElementWiseLess", "ElementWiseLessEqual", "ElementWiseAnd", "ElementWiseOr", "ElementWiseXor",
)

# QNN_OP_ELEMENT_WISE_BINARY_OPERATION values that produce bool:
# AND=1, EQUAL=3, GREATER=6, GREATER_EQUAL=7, LESS=8, LESS_EQUAL=9, NOT_EQUAL=14, OR=15, XOR=19.
_BINARY_BOOL_OPERATIONS = frozenset({1, 3, 6, 7, 8, 9, 14, 15, 19})
_BINARY_OPERATION_COUNT = 20
# QNN_OP_ELEMENT_WISE_UNARY_OPERATION: NOT=9 is the only one producing bool.
_UNARY_NOT = 9
_UNARY_OPERATION_COUNT = 16


def _unary(call: Call) -> list[Sig]:
    return same(call)


def _predicate_unary(call: Call) -> list[Sig]:
    return same(call, BOOL)


def _arithmetic(call: Call) -> list[Sig]:
    return [Sig(broadcast(call, (0, 1)), call.inp(0).dtype)]


def _predicate(call: Call) -> list[Sig]:
    return [Sig(broadcast(call, (0, 1)), BOOL)]


def _binary(call: Call) -> list[Sig]:
    operation = call.scalar("operation")
    if not 0 <= operation < _BINARY_OPERATION_COUNT:
        raise call.fail(f"param 'operation' = {operation} is not a known binary operation")
    dtype = BOOL if operation in _BINARY_BOOL_OPERATIONS else call.inp(0).dtype
    return [Sig(broadcast(call, (0, 1)), dtype)]


def _unary_generic(call: Call) -> list[Sig]:
    operation = call.scalar("operation")
    if not 0 <= operation < _UNARY_OPERATION_COUNT:
        raise call.fail(f"param 'operation' = {operation} is not a known unary operation")
    return same(call, BOOL if operation == _UNARY_NOT else None)


def _select(call: Call) -> list[Sig]:
    """in[0] is the condition; the values (and so the dtype) come from in[1]."""
    return [Sig(broadcast(call, (0, 1, 2)), call.inp(1).dtype)]


def _prelu(call: Call) -> list[Sig]:
    """The slope must broadcast onto in[0] without growing it."""
    x, slope = call.inp(0), call.inp(1)
    if slope.rank > x.rank or broadcast(call, (0, 1)) != x.shape:
        raise call.fail(f"slope in[1] {fmt(slope.shape)} does not broadcast onto in[0] {fmt(x.shape)}")
    return same(call)


def _keep_dtype(call: Call) -> list[Sig]:
    """Cast, Convert and Quantize: the target dtype is a property of the output
    tensor, not of the inputs or params, so in[0]'s dtype is only a placeholder
    and callers should state the output dtype themselves."""
    return same(call)


def _neuron(call: Call) -> list[Sig]:
    """RELU_MIN_MAX (operation 5) has no defaults for its bounds: MasterOpDef says both must be given."""
    if call.scalar("operation", -1) == 5:
        missing = [p for p in ("min_value", "max_value") if not call.has(p)]
        if missing:
            raise call.fail(f"operation RELU_MIN_MAX needs param {' and '.join(repr(m) for m in missing)}")
    return same(call)


def _dequantize(call: Call) -> list[Sig]:
    """Dequantize produces float (FLOAT_32 by the op definition; some backends
    allow FLOAT_16, which the caller must then state)."""
    return same(call, "float32")


RULES: dict[str, Rule] = {
    **{op: _unary for op in _UNARY},
    **{op: _arithmetic for op in _ARITHMETIC},
    **{op: _predicate for op in _PREDICATE},
    "ElementWiseNeuron": _neuron,
    "ElementWiseNot": _predicate_unary,
    "IsInf": _predicate_unary,
    "IsNan": _predicate_unary,
    "ElementWiseBinary": _binary,
    "ElementWiseUnary": _unary_generic,
    "ElementWiseSelect": _select,
    "Prelu": _prelu,
    "Cast": _keep_dtype,
    "Convert": _keep_dtype,
    "Quantize": _keep_dtype,
    "Dequantize": _dequantize,
}
