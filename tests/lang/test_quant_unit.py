"""`quant_unit()`: the fixed output encoding HTP requires of a quantized Sigmoid (and Softmax)."""

from __future__ import annotations

import numpy as np
import pytest

from qlower.rewrite.emit import resolve_encoding
from qlower.lang.builtins import builtin_functions


@pytest.mark.parametrize("dtype, scale", [("uint16", 2.0 ** -16), ("int16", 2.0 ** -15), ("uint8", 2.0 ** -8),
                                          ("int8", 2.0 ** -7)])
def test_unit_encoding_is_one_over_two_to_the_value_bits_with_zero_point_zero(dtype, scale):
    enc = builtin_functions().functions["quant_unit"].impl()
    q = resolve_encoding(enc, np.dtype(dtype))
    assert list(q.scale) == [scale] and list(q.zero_point) == [0]


def test_a_float_value_has_no_unit_encoding():
    assert resolve_encoding(builtin_functions().functions["quant_unit"].impl(), np.dtype("float32")) is None


def test_silu_on_htp_gets_the_sigmoid_encoding_htp_requires():
    """mllm's SiLU rule once gave its Sigmoid quant_range(0, 1) = 1/65535 at uint16, which HTP's op
    definitions refuse (a validation warning per SiLU in every quantized Qwen/Llama)."""
    import qlower
    from qlower import Graph
    from qlower.graph.types import Quant

    g = Graph("silu")
    q = Quant.for_range(-4.0, 4.0, "uint16")
    x = g.add_value("x", "uint16", [1, 8], quant=q)
    y = g.add_value("y", "uint16", [1, 8], quant=q)
    g.add_op("act", "mllm.SiLU", [x], [y])
    g.set_io([x], [y])
    res = qlower.lower(g, qlower.load_rules(packs=["mllm"]), backend="htp")
    assert res.ok and not [d for d in res.diagnostics if "requires scale" in d.message], res.diagnostics
    sig = next(op for op in res.graph.ops if op.type == "qnn.Sigmoid")
    assert list(sig.results[0].quant.scale) == [2.0 ** -16] and list(sig.results[0].quant.zero_point) == [0]
