"""pt2e-quantized torch.export programs (qlower.frontends.torch_quant): ExecuTorch's QnnQuantizer's own
programs when executorch is installed, and programs written here with the same quantize/dequantize ops."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning", "ignore::DeprecationWarning",
                                        "ignore::UserWarning")

import torch.ao.quantization.fx._decomposed  # noqa: E402,F401  (registers quantized_decomposed)

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.torch_frontend import load_exported  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402

qd = torch.ops.quantized_decomposed


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


def _export(module, *args):
    return torch.export.export(module.eval(), args, strict=False)


def _lowered(ep, rules, inputs, backend="htp"):
    """The program imported, lowered (validated) and run by qlower's reference interpreter: output and result.

    Without HTP's float16 pass: it routes a final 16-bit Dequantize through FLOAT_16 (issue 27's item 4,
    not this frontend's), which alone costs 16-bit outputs some steps; the quantized ops are the same."""
    g = load_exported(ep)
    feeds = {v.name: t.numpy().astype(v.dtype) for v, t in zip(g.inputs, inputs)}
    assert len(feeds) == len(inputs)
    result = qlower.lower(g, rules, backend=backend, float16=False)
    result.raise_for_errors()
    out = run_dequantized(result.qnn, feeds)[result.qnn.outputs[0]]
    return out, result


def _steps(got: np.ndarray, want: np.ndarray, step: float) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / step


class _Written(torch.nn.Module):
    """What convert_pt2e writes for a linear + relu, spelled out: uint8 or int32-held uint16 activations,
    int8 per-channel weights (8-bit ±127 or 4-bit ±7), an int32 bias."""

    def __init__(self, act: str = "u8", wbits: int = 8, overload: str = "default") -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        w = torch.randn(6, 8, generator=g) * 0.3
        wmax = 127 if wbits == 8 else 7
        ws = w.abs().amax(1) / wmax
        self.register_buffer("wq", torch.clamp(torch.round(w / ws[:, None]), -wmax, wmax).to(torch.int8))
        self.register_buffer("ws", ws)
        self.register_buffer("wz", torch.zeros(6, dtype=torch.int64))
        self.register_buffer("bq", torch.arange(-3, 3, dtype=torch.int32) * 1000)
        self.register_buffer("bs", torch.full((6,), 1e-5))
        self.register_buffer("bz", torch.zeros(6, dtype=torch.int32))
        self.wmax, self.overload = wmax, overload
        if act == "u8":
            self.lo, self.hi, self.dtype = 0, 255, torch.uint8
        else:
            self.lo, self.hi, self.dtype = 0, 65535, torch.int32
        steps = self.hi - self.lo
        self.enc_in = (4.0 / steps, steps // 2)
        self.enc_mid = (6.0 / steps, steps // 2)
        self.enc_out = (3.0 / steps, 0)
        self.register_buffer("s_in", torch.tensor(self.enc_in[0]))
        self.register_buffer("z_in", torch.tensor(self.enc_in[1]))

    def _qdq(self, x, enc):
        q = qd.quantize_per_tensor(x, enc[0], enc[1], self.lo, self.hi, self.dtype)
        return qd.dequantize_per_tensor(q, enc[0], enc[1], self.lo, self.hi, self.dtype)

    def forward(self, x):
        if self.overload == "tensor":  # scale and zero point as constant tensors
            q = qd.quantize_per_tensor.tensor(x, self.s_in, self.z_in, self.lo, self.hi, self.dtype)
            x = qd.dequantize_per_tensor.tensor(q, self.s_in, self.z_in, self.lo, self.hi, self.dtype)
        else:
            x = self._qdq(x, self.enc_in)
        w = qd.dequantize_per_channel(self.wq, self.ws, self.wz, 0, -self.wmax, self.wmax, torch.int8)
        b = qd.dequantize_per_channel(self.bq, self.bs, self.bz, 0, -2**31, 2**31 - 1, torch.int32)
        y = self._qdq(torch.nn.functional.linear(x, w, b), self.enc_mid)
        return self._qdq(torch.relu(y), self.enc_out)


@pytest.mark.parametrize("act,wbits,overload", [("u8", 8, "default"), ("u16", 8, "default"), ("u16", 4, "default"),
                                                 ("u8", 8, "tensor")])
def test_written_program_folds_into_encodings_and_matches_torch(rules, act, wbits, overload) -> None:
    m = _Written(act, wbits, overload)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    ep = _export(m, x)
    g = load_exported(ep)
    ops = {op.type: op for op in g.topo_order()}
    assert list(ops) == ["aten.quantize_encoded", "aten.linear", "aten.relu", "aten.dequantize_encoded"]
    store = np.dtype(np.uint8 if act == "u8" else np.uint16)
    lin = ops["aten.linear"]
    x_q, w_q, b_q = lin.operands
    assert x_q.dtype == store and x_q.quant.zero_point == (m.enc_in[1],)
    assert x_q.quant.scale[0] == pytest.approx(m.enc_in[0], rel=1e-7)  # a float32 buffer with .tensor
    assert w_q.dtype == np.int8 and w_q.quant.axis == 0 and w_q.quant.bitwidth == (None if wbits == 8 else 4)
    np.testing.assert_array_equal(w_q.data, m.wq.numpy())
    assert b_q.dtype == np.int32 and b_q.quant.axis == 0
    assert lin.results[0].dtype == store and lin.results[0].quant.scale[0] == pytest.approx(m.enc_mid[0], rel=1e-12)
    assert ops["aten.relu"].results[0].quant.zero_point == (0,)

    want = ep.module()(x).numpy()
    got, result = _lowered(ep, rules, (x,))
    assert _steps(got, want, m.enc_out[0]).max() <= 1.0 + 1e-6
    qnn = result.qnn
    fixed = {op.type: qnn.tensors[op.outputs[0]].datatype.name for op in qnn.ops}
    assert fixed["FullyConnected"] == fixed["Relu"] == ("UFIXED_POINT_8" if act == "u8" else "UFIXED_POINT_16")
    if wbits == 4:
        fc = next(op for op in qnn.ops if op.type == "FullyConnected")
        enc = qnn.tensors[fc.inputs[1]].encoding
        assert enc.bitwidth == 4


class _Requant(torch.nn.Module):
    """A dequantize read once, by a quantize of another encoding: requantization, the tensor keeps both."""

    def forward(self, x):
        q = qd.quantize_per_tensor(x, 0.02, 128, 0, 255, torch.uint8)
        d = qd.dequantize_per_tensor(q, 0.02, 128, 0, 255, torch.uint8)
        q2 = qd.quantize_per_tensor(d, 0.05, 10, 0, 255, torch.uint8)
        d2 = qd.dequantize_per_tensor(q2, 0.05, 10, 0, 255, torch.uint8)
        q3 = qd.quantize_per_tensor(torch.relu(d2), 0.01, 0, 0, 255, torch.uint8)
        return qd.dequantize_per_tensor(q3, 0.01, 0, 0, 255, torch.uint8)


def test_requantization_keeps_both_encodings(rules) -> None:
    x = torch.linspace(-3, 3, 40).reshape(5, 8)
    ep = _export(_Requant(), x)
    g = load_exported(ep)
    # the dequantize → quantize pair stays (two Q/DQ node units, as for ONNX); the rules make it a Convert
    assert [op.type for op in g.topo_order()] == ["aten.quantize_encoded", "aten.dequantize_encoded",
                                                   "aten.quantize_encoded", "aten.relu", "aten.dequantize_encoded"]
    got, result = _lowered(ep, rules, (x,))
    assert "Convert" in result.qnn_op_counts()
    want = ep.module()(x).numpy()
    assert _steps(got, want, 0.01).max() <= 1.0 + 1e-6
    # the values went through the coarse encoding: on its grid, which a fold that lost it would not be
    on_coarse = np.abs(got / 0.05 - np.round(got / 0.05))
    assert on_coarse.max() < 0.05 and np.unique(np.round(got / 0.01)).size > 10


class _Narrow(torch.nn.Module):
    def __init__(self, lo: int, hi: int, dtype) -> None:
        super().__init__()
        self.lo, self.hi, self.dtype = lo, hi, dtype

    def forward(self, x):
        q = qd.quantize_per_tensor(torch.relu(x), 0.01, 0, self.lo, self.hi, self.dtype)
        return qd.dequantize_per_tensor(q, 0.01, 0, self.lo, self.hi, self.dtype) * 2.0


def test_a_computed_tensor_on_a_range_qnn_does_not_saturate_to_is_refused() -> None:
    with pytest.raises(QlowerError, match=r"range \[0, 200\].*QNN would saturate to \[0, 255\]"):
        load_exported(_export(_Narrow(0, 200, torch.uint8), torch.randn(2, 4)))


def test_symmetric_int16_range_is_int16() -> None:
    g = load_exported(_export(_Narrow(-32767, 32767, torch.int16), torch.randn(2, 4)))
    # relu reads a float input (no dequantize): outside a node unit, it stays float before the quantize op
    relu = next(op for op in g.topo_order() if op.type == "aten.relu")
    q = next(op for op in g.topo_order() if op.type == "aten.quantize_encoded")
    assert relu.results[0].dtype == np.float32 and q.operands[0] is relu.results[0]
    assert q.results[0].dtype == np.int16 and q.results[0].quant.zero_point == (0,)


class _Dynamic(torch.nn.Module):
    def forward(self, x):
        s = x.abs().amax() / 127
        z = torch.zeros((), dtype=torch.int64)
        q = qd.quantize_per_tensor.tensor(x, s, z, -128, 127, torch.int8)
        return qd.dequantize_per_tensor.tensor(q, s, z, -128, 127, torch.int8)


def test_a_scale_computed_at_run_time_is_refused_clearly() -> None:
    with pytest.raises(QlowerError, match="computed at run time") as err:
        load_exported(_export(_Dynamic(), torch.randn(2, 4)))
    assert "node quantize_per_tensor" in err.value.render()


class _Affine(torch.nn.Module):
    """torchao's quantize_affine / dequantize_affine: per tensor (block = the whole shape), per channel."""

    def __init__(self, block=(1, 8)) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        w = torch.randn(4, 8, generator=g).reshape(4, 8 // block[1], block[1])
        ws = w.abs().amax(-1) / 127  # one scale per block of block[1] elements of a row
        self.register_buffer("wq", torch.clamp(torch.round(w / ws[..., None]), -127, 127).to(torch.int8).reshape(4, 8))
        self.register_buffer("ws", ws)
        self.register_buffer("s", torch.tensor([0.02]))
        self.register_buffer("z", torch.tensor([128], dtype=torch.int32))
        self.register_buffer("s_out", torch.tensor([0.08]))
        self.block = list(block)

    def forward(self, x):
        ao = torch.ops.torchao
        q = ao.quantize_affine(x, list(x.shape), self.s, self.z, torch.uint8, 0, 255)
        xd = ao.dequantize_affine(q, list(x.shape), self.s, self.z, torch.uint8, 0, 255)
        w = ao.dequantize_affine(self.wq, self.block, self.ws, None, torch.int8, -127, 127)
        y = torch.nn.functional.linear(xd, w)
        q2 = ao.quantize_affine(y, list(y.shape), self.s_out, self.z, torch.uint8, 0, 255)
        return ao.dequantize_affine(q2, list(y.shape), self.s_out, self.z, torch.uint8, 0, 255)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_torchao_affine_ops(rules) -> None:
    import torchao.quantization.quant_primitives  # noqa: F401  (registers torch.ops.torchao)

    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(4))
    ep = _export(_Affine(), x)
    g = load_exported(ep)
    lin = next(op for op in g.topo_order() if op.type == "aten.linear")
    assert lin.operands[1].dtype == np.int8 and lin.operands[1].quant.axis == 0
    got, _ = _lowered(ep, rules, (x,))
    assert _steps(got, ep.module()(x).numpy(), 0.08).max() <= 1.0 + 1e-6
    with pytest.raises(QlowerError, match="blocked quantization"):
        load_exported(_export(_Affine(block=(1, 4)), x))


def test_pt2_file_lowers_from_the_cli(tmp_path) -> None:
    from qlower.cli.main import main as cli

    m = _Written("u16", 4)
    path = tmp_path / "written.pt2"
    torch.export.save(_export(m, torch.randn(3, 8)), str(path))
    assert cli(["lower", str(path), "--backend", "htp", "-o", str(tmp_path / "out"), "-q"]) == 0
    from qlower.qnn.reader import read

    qnn = read(tmp_path / "out" / "written_net.json").graph
    fc = next(op for op in qnn.ops if op.type == "FullyConnected")
    x, w = (qnn.tensors[t] for t in fc.inputs[:2])
    assert x.datatype.name == "UFIXED_POINT_16" and w.encoding.bitwidth == 4


# ------------------------------------------------------------------ ExecuTorch's QnnQuantizer itself

def _has_executorch() -> bool:
    return importlib.util.find_spec("executorch") is not None and importlib.util.find_spec("torchao") is not None


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = torch.nn.functional.max_pool2d(y, 2)
        return self.fc(torch.flatten(y, 1))


@pytest.fixture(scope="module")
def qnn_quantized():
    """The converted programs of _Net for 8a8w, 16a8w and 16a4w, by QnnQuantizer through torchao's pt2e."""
    if not _has_executorch():
        pytest.skip("executorch and torchao are not installed (the ExecuTorch QnnQuantizer fixtures need them)")
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    net = _Net().eval()
    g = torch.Generator().manual_seed(5)
    batches = [torch.randn(1, 3, 12, 12, generator=g) for _ in range(4)]
    out = {}
    for config in ("use_8a8w", "use_16a8w", "use_16a4w"):
        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(getattr(QuantDtype, config), is_conv_per_channel=True,
                                           is_linear_per_channel=True)
        prepared = prepare_pt2e(torch.export.export(net, (batches[0],), strict=False).module(), quantizer)
        for b in batches:
            prepared(b)
        converted = convert_pt2e(prepared)
        out[config] = torch.export.export(converted, (batches[0],), strict=False)
    return net, batches[0], out


@pytest.mark.parametrize("config,act,wbits", [("use_8a8w", "UFIXED_POINT_8", None),
                                              ("use_16a8w", "UFIXED_POINT_16", None),
                                              ("use_16a4w", "UFIXED_POINT_16", 4)])
def test_qnn_quantizer_programs_lower_fixed_point_and_match_torch(qnn_quantized, rules, config, act, wbits) -> None:
    _, x, programs = qnn_quantized
    ep = programs[config]
    g = load_exported(ep)
    out_op = g.outputs[0].producer
    assert out_op.type == "aten.dequantize_encoded"
    step = out_op.operands[0].quant.scale[0]
    conv = next(op for op in g.topo_order() if op.type == "aten.conv2d")
    assert conv.operands[1].dtype == np.int8 and conv.operands[1].quant.axis == 0
    assert conv.operands[1].quant.bitwidth == wbits
    got, result = _lowered(ep, rules, (x,))
    want = ep.module()(x).detach().numpy()
    d = _steps(got.reshape(want.shape), want, step)
    assert d.max() <= 1.0 + 1e-6, d.max()
    qnn = result.qnn
    types = {op.type: qnn.tensors[op.outputs[0]].datatype.name for op in qnn.ops}
    for t in ("Conv2d", "Relu", "PoolMax2d", "FullyConnected"):
        assert types[t] == act, (t, types[t])


def test_qnn_quantizer_pt2_loads_from_a_file(qnn_quantized, tmp_path, rules) -> None:
    _, x, programs = qnn_quantized
    path = tmp_path / "net.pt2"
    torch.export.save(programs["use_16a8w"], str(path))
    g = load_exported(path)
    assert g.name == "net" and "aten.quantize_encoded" in {op.type for op in g.topo_order()}


def test_a_gqa_llama_quantized_by_qnn_quantizer_lowers_for_htp(rules, bench) -> None:
    """ExecuTorch's QnnQuantizer (8a8w) on a transformers Llama with grouped-query attention: its
    rank-5 key/value expansion reaches HTP's float16-less Quantize through a Cast, which HTP takes
    up to rank 4 only; the conversion is cast flattened. Lowers, validates and comes within 1 dB of
    the quantizer's own SQNR against the float model (bench/bench_quant_executorch.py's cell)."""
    pytest.importorskip("executorch.backends.qualcomm.quantizer.quantizer")
    pytest.importorskip("transformers")
    cell = bench("bench_quant_executorch").run_cell("llama", "8a8w", rules)
    assert cell["status"] == "ok", cell
    assert cell["sqnr_qlower"] >= cell["sqnr_quantizer"] - 1.0, cell
