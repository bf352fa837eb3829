"""ONNX ops qlower composes from ordinary QNN ops, checked against onnx.reference (ONNX's own
implementation, not written here) on drawn shapes and data, lowered for CPU and run with the QNN
reference interpreter:

* blocked QuantizeLinear / DequantizeLinear (opset 21 `block_size`): scale and zero point per
  block of `block_size` elements along `axis`, stretched to the input's shape (patterns/onnx/quant.qpat);
* MaxPool's second result, Indices: flat positions in the input (storage_order 0 row-major,
  1 column-major) of each window's first maximum, 1-D to 3-D, float (±inf included), int8 and
  uint8, on CPU and HTP (float16); a window wholly in the padding is refused (patterns/onnx/conv.qpat).
  Also checked against onnxruntime (when installed) for unit strides, where onnx.reference's own
  pooling routine is wrong and qlower's verification reference routes around it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run  # noqa: E402


@functools.cache
def _onnx_rules():
    return qlower.load_rules(packs=["onnx"])


@pytest.fixture(scope="module")
def rules():
    return _onnx_rules()


def _model(node, inputs, outputs, inits=(), opset=21):
    g = h.make_graph([node], "m", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _lower_and_run(model, rules, feeds, backend="cpu"):
    result = qlower.lower(load_onnx(model), rules, backend=backend)
    result.raise_for_errors()
    return run(result.qnn, feeds)


@st.composite
def _blocked(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    block = draw(st.integers(1, 4))
    pshape = list(shape)
    pshape[axis] = -(-shape[axis] // block)
    seed = draw(st.integers(0, 2**31 - 1))
    return shape, axis, block, pshape, np.random.default_rng(seed)


_QTYPES = {"uint8": (np.uint8, T.UINT8), "int8": (np.int8, T.INT8)}


@settings(max_examples=25, deadline=None)
@given(_blocked(), st.sampled_from(sorted(_QTYPES)), st.booleans())
def test_blocked_dequantize_equals_onnx_reference(case, qtype, with_zero_point):
    rules = _onnx_rules()
    shape, axis, block, pshape, rng = case
    npt, onnx_t = _QTYPES[qtype]
    info = np.iinfo(npt)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(npt)
    scale = (rng.random(pshape) * 2 + 0.01).astype(np.float32)
    inits = [("s", scale)]
    if with_zero_point:
        inits.append(("z", rng.integers(info.min, info.max, pshape, endpoint=True).astype(npt)))
    node = h.make_node("DequantizeLinear", ["x"] + [n for n, _ in inits], ["y"], axis=axis, block_size=block)
    model = _model(node, [h.make_tensor_value_info("x", onnx_t, shape)],
                   [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = _lower_and_run(model, rules, {"x": x})["y"]
    np.testing.assert_array_equal(np.asarray(got, np.float32), want)


@settings(max_examples=25, deadline=None)
@given(_blocked(), st.sampled_from(sorted(_QTYPES)), st.booleans())
def test_blocked_quantize_equals_onnx_reference(case, qtype, with_zero_point):
    rules = _onnx_rules()
    shape, axis, block, pshape, rng = case
    npt, onnx_t = _QTYPES[qtype]
    info = np.iinfo(npt)
    scale = (rng.random(pshape) * 2 + 0.01).astype(np.float32)
    # half-way points (ties round to even) and values far past the range (saturation)
    x = (rng.integers(-600, 600, shape) / 2.0).astype(np.float32)
    inits = [("s", scale)]
    attrs = {}
    if with_zero_point:
        inits.append(("z", rng.integers(info.min, info.max, pshape, endpoint=True).astype(npt)))
    else:
        attrs["output_dtype"] = onnx_t
    node = h.make_node("QuantizeLinear", ["x"] + [n for n, _ in inits], ["y"], axis=axis, block_size=block, **attrs)
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, shape)],
                   [h.make_tensor_value_info("y", onnx_t, shape)], inits)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = _lower_and_run(model, rules, {"x": x})["y"]
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_blocked_dequantize_of_runtime_scale_is_a_clear_error(rules):
    node = h.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    model = _model(node, [h.make_tensor_value_info("x", T.UINT8, [2, 4]), h.make_tensor_value_info("s", T.FLOAT, [2, 2])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    with pytest.raises(Exception, match="constant scales and zero points"):
        result.raise_for_errors()


_POOL_TYPES = {"float32": (np.float32, T.FLOAT), "uint8": (np.uint8, T.UINT8), "int8": (np.int8, T.INT8)}


@st.composite
def _pool(draw, types=tuple(sorted(_POOL_TYPES)), unit_strides=False, pads_below_kernel=False, infinities=True,
          for_onnx_reference=True):
    """A MaxPool case: 1-D to 3-D, dilated or not, ceil mode or not, pads up to past the kernel (so
    that some windows lie wholly in the padding), float inputs with ties and ±inf, int8 / uint8."""
    nd = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
    dil = [draw(st.integers(1, 2)) for _ in range(nd)]
    # onnx.reference takes its ONNX-exact path (flat indices over all planes) only when some
    # stride or dilation is not 1; its other path drops the plane offset.
    strides = [draw(st.integers(1 if unit_strides else 2, 3))] + [draw(st.integers(1, 3)) for _ in range(nd - 1)]
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    wide = draw(st.integers(0, 3)) == 0  # now and then pads up to past the kernel
    if pads_below_kernel:  # onnxruntime refuses pads of a kernel's size or more
        span = kernel
    begin = [draw(st.integers(0, s if wide else s - 1)) for s in span]
    end = [draw(st.integers(0, s if wide else s - 1)) for s in span]
    if pads_below_kernel:
        begin, end = [min(b, k - 1) for b, k in zip(begin, kernel)], [min(e, k - 1) for e, k in zip(end, kernel)]
        span = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    top = 7 if nd < 3 else 4
    sizes = [draw(st.integers(max(1, s - b - e), max(top, s - b - e))) for s, b, e in zip(span, begin, end)]
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2 if nd == 3 else 3))
    order = draw(st.sampled_from([0, 1]))
    ceil = draw(st.sampled_from([0, 1]))
    dtype = draw(st.sampled_from(types))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    shape = [n, c, *sizes]
    if dtype == "float32":
        x = rng.integers(-3, 4, shape).astype(np.float32)  # few values: ties, the first maximum wins
        if infinities and draw(st.booleans()):
            x[rng.random(shape) < 0.3] = np.inf
            x[rng.random(shape) < 0.4] = -np.inf
    else:
        info = np.iinfo(_POOL_TYPES[dtype][0])
        x = rng.integers(info.min, info.min + 4, shape, endpoint=True).astype(_POOL_TYPES[dtype][0])
        if draw(st.booleans()):
            x = rng.integers(info.max - 3, info.max, shape, endpoint=True).astype(_POOL_TYPES[dtype][0])
    attrs = dict(kernel_shape=kernel, dilations=dil, strides=strides, pads=begin + end, storage_order=order,
                 ceil_mode=ceil)
    if draw(st.integers(0, 3)) == 0:
        # onnx.reference counts floor(size / stride) SAME_LOWER windows and ignores ceil_mode under
        # VALID (ONNX shape inference and onnxruntime: ceil, and ceil_mode counts): onnxruntime checks those
        mode = draw(st.sampled_from(["SAME_UPPER", "VALID"] if for_onnx_reference else ["SAME_UPPER", "SAME_LOWER", "VALID"]))
        if mode == "VALID" and for_onnx_reference:
            attrs["ceil_mode"] = 0
        if mode.startswith("SAME") and not for_onnx_reference:
            attrs["dilations"] = dil = [1] * nd  # onnxruntime pads dilated SAME windows as undilated ones
            span = kernel
        # VALID: windows that fit (else no output); SAME: padding >= 0 (with a kernel narrower than
        # the stride, ONNX shape inference clamps it to 0, onnx.reference shifts the windows and
        # onnxruntime refuses)
        fits = all(size >= s for size, s in zip(sizes, span)) if mode == "VALID" else \
            all((-(-size // st_) - 1) * st_ + s >= size for size, s, st_ in zip(sizes, span, strides))
        if fits:
            del attrs["pads"]
            attrs["auto_pad"] = mode
    return x, attrs


def _window_count(size, k, d, s, b, e, ceil, opset):
    """MaxPool's output size along one dim as ONNX shape inference gives it: from opset 22 (and in
    onnxruntime and onnx.reference at every opset) a ceil-mode window must start before the end
    padding; inference for older opsets counts such a window too."""
    span = size + b + e - (k - 1) * d - 1
    out = (-(-span // s) if ceil else span // s) + 1
    return out - 1 if ceil and opset >= 22 and (out - 1) * s >= size + b else out


def _has_empty_window(shape, attrs, opset):
    """Whether some window lies wholly in the padding (along some dim it reaches no input element)."""
    nd = len(shape) - 2
    for i in range(nd):
        size, k, d, s = shape[2 + i], attrs["kernel_shape"][i], attrs["dilations"][i], attrs["strides"][i]
        mode = attrs.get("auto_pad", "NOTSET")
        if mode == "NOTSET":
            b, e = attrs["pads"][i], attrs["pads"][nd + i]
            count = _window_count(size, k, d, s, b, e, attrs["ceil_mode"], opset)
        elif mode == "VALID":
            b, count = 0, _window_count(size, k, d, s, 0, 0, attrs["ceil_mode"], opset)
        else:  # SAME_*: ceil(size / s) windows, the padding they need split between both ends
            count = -(-size // s)
            total = max((count - 1) * s + (k - 1) * d + 1 - size, 0)
            b = total // 2 if mode == "SAME_UPPER" else total - total // 2
        for o in range(count):
            if not any(0 <= o * s - b + t * d < size for t in range(k)):
                return True
    return False


def _pool_model(x, attrs, results, opset=12):
    node = h.make_node("MaxPool", ["x"], ["y", "z"][:results], **attrs)
    onnx_t = _POOL_TYPES[x.dtype.name][1]
    outs = [h.make_tensor_value_info("y", onnx_t, None), h.make_tensor_value_info("z", T.INT64, None)]
    return _model(node, [h.make_tensor_value_info("x", onnx_t, list(x.shape))], outs[:results], opset=opset)


def _check_pool(x, attrs, results, backend, opset=12, runtime=None):
    model = _pool_model(x, attrs, results, opset)
    result = qlower.lower(load_onnx(model), _onnx_rules(), backend=backend)
    if _has_empty_window(list(x.shape), attrs, opset):
        # no maximum to compute: onnx.reference gives NaN or 0 there, onnxruntime the lowest float;
        # or (before opset 22) a ceil-mode window the runtimes drop: refused, not guessed
        with pytest.raises(QlowerError, match="lies wholly in the padding"):
            result.raise_for_errors()
        return
    # (HTP computes int8 in int32 behind Casts at the graph's edges; at rank 5, above its Cast's
    # rank 4, they cast the tensor flattened)
    result.raise_for_errors()
    want = runtime(model, {"x": x}) if runtime else ReferenceEvaluator(model).run(None, {"x": x})
    got = run(result.qnn, {"x": x})
    np.testing.assert_array_equal(np.asarray(got["y"]), want[0])
    assert np.asarray(got["y"]).dtype == want[0].dtype
    if results == 2:
        np.testing.assert_array_equal(np.asarray(got["z"], np.int64), want[1])


@settings(max_examples=40, deadline=None)
@given(_pool(), st.sampled_from(["cpu", "htp"]), st.sampled_from([12, 22]))
def test_maxpool_indices_equal_onnx_reference(case, backend, opset):
    x, attrs = case
    _check_pool(x, attrs, 2, backend, opset)


@settings(max_examples=30, deadline=None)
@given(_pool(types=("float32",)), st.sampled_from(["cpu", "htp"]), st.sampled_from([12, 22]))
def test_maxpool_values_equal_onnx_reference(case, backend, opset):
    x, attrs = case
    _check_pool(x, attrs, 1, backend, opset)


def _onnxruntime(model, feeds):
    ort = pytest.importorskip("onnxruntime")  # optional: a second implementation, not written here
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@settings(max_examples=30, deadline=None)
@given(_pool(unit_strides=True, pads_below_kernel=True, infinities=False, for_onnx_reference=False), st.sampled_from(["cpu", "htp"]),
       st.sampled_from([1, 2]))
def test_maxpool_equals_onnxruntime(case, backend, results):
    # onnxruntime computes unit-stride pooling too (onnx.reference's path for it drops the plane
    # offset from Indices), but no windows wholly in the padding beyond what dilation makes; finite
    # inputs only: onnxruntime's max of a window of -inf is the lowest float (index -1), not -inf
    x, attrs = case
    if results == 1 and x.dtype != np.float32:
        return
    _check_pool(x, attrs, results, backend, opset=22, runtime=_onnxruntime)
    nd = x.ndim - 2
    if _has_empty_window(list(x.shape), attrs, 22) or (nd == 3 and 1 not in attrs["kernel_shape"]):
        return  # nothing lowered; or a 3-D unit-stride kernel, which onnx.reference alone computes
    # --verify's reference (onnx.reference, routed around its unit-stride routine) agrees as well
    result = qlower.lower(load_onnx(_pool_model(x, attrs, results, 22)), _onnx_rules(), backend=backend, verify=True,
                          inputs={"x": x})
    assert result.verification.passed, result.verification


@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("shape", [[2, 3, 11], [1, 3, 9, 10], [1, 2, 5, 6, 7]])
def test_torch_exported_maxpool_with_indices_verifies(backend, shape):
    # torch.onnx.export of MaxPool{1,2,3}d(return_indices=True) (dynamo, opset 18): ONNX's Indices
    # minus each plane's start, found by a second MaxPool (kernel 1, stride 1) whose Indices
    # onnx.reference gets wrong on its own; --verify compares with qlower's onnx reference kernels
    nd = len(shape) - 2
    nodes = [
        h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3] * nd, strides=[2] * nd, pads=[1] * (2 * nd),
                    ceil_mode=1),
        h.make_node("MaxPool", ["x"], ["_", "j"], kernel_shape=[1] * nd, strides=[1] * nd),
        h.make_node("Slice", ["j", "zero", "one", "axes"], ["first"]),
        h.make_node("Sub", ["i", "first"], ["z"]),
    ]
    inits = [numpy_helper.from_array(np.zeros(nd, np.int64), "zero"), numpy_helper.from_array(np.ones(nd, np.int64), "one"),
             numpy_helper.from_array(np.arange(2, 2 + nd, dtype=np.int64), "axes")]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.INT64, None)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    result = qlower.lower(load_onnx(model), _onnx_rules(), backend=backend, verify=True, inputs={"x": x})
    result.raise_for_errors()
    assert result.verification.passed
    want = _onnxruntime(model, {"x": x})[1]
    np.testing.assert_array_equal(np.asarray(run(result.qnn, {"x": x})["z"], np.int64), want)
    assert (want.max() >= shape[-1]) == (nd > 1)  # 2-D, 3-D: flat over each plane, not within a row


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_maxpool_indices_of_infinities_beside_the_padding(backend):
    # -inf inputs next to padded taps: the index is the first input tap (float16 saturation once
    # tied them with the padding on HTP), and +inf wins
    x = np.full([1, 1, 3, 3], -np.inf, np.float32)
    x[0, 0, 2, 2] = np.inf
    _check_pool(x, dict(kernel_shape=[2, 2], pads=[1, 1, 1, 1], strides=[2, 2], dilations=[1, 1], ceil_mode=0), 2, backend)


@pytest.mark.parametrize("results", [1, 2])
def test_maxpool_window_wholly_in_the_padding_is_refused(rules, results):
    x = np.zeros([1, 1, 1, 3], np.float32)
    model = _pool_model(x, dict(kernel_shape=[2, 2], pads=[1, 0, 1, 0], dilations=[2, 1]), results)
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    with pytest.raises(QlowerError, match=r"the window of output position \[0, 0\] \(of \[1, 2\]\) lies wholly "
                                          r"in the padding of the \[1, 3\] input"):
        result.raise_for_errors()


def test_one_result_maxpool_lowers_as_before(rules):
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 6, 6])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], opset=12)
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    result.raise_for_errors()
    assert [op.type for op in result.qnn.ops] == ["Transpose", "PoolMax2d", "Transpose"]


def test_int8_3d_maxpool_with_indices_on_htp_equals_onnx_reference():
    """int8 is computed in int32 on HTP behind Casts; at rank 5 they cast the tensor flattened
    (HTP's Cast takes rank 4 at most)."""
    x = np.random.default_rng(5).integers(-128, 128, (1, 2, 3, 4, 4)).astype(np.int8)
    attrs = {"kernel_shape": [1, 2, 2], "dilations": [1, 1, 1], "strides": [1, 2, 2], "storage_order": 0,
             "ceil_mode": 0, "auto_pad": "NOTSET", "pads": [0, 0, 0, 0, 0, 0]}
    _check_pool(x, attrs, 2, "htp", 12)
    _check_pool(np.array([[[[[-124]]]]], np.int8), {"kernel_shape": [1, 1, 1], "dilations": [1, 1, 1],
                "strides": [2, 1, 1], "storage_order": 0, "ceil_mode": 0, "auto_pad": "SAME_UPPER"}, 2, "htp", 12)
