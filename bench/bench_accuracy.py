"""Accuracy side by side (outside the default test run): SQNR of each quantizer's outputs against the
float model on held-out inputs, on the same calibration data, at w8a16 and w4a16.

    python bench/bench_accuracy.py [--calibration 8] [--held-out 8]

  qlower   `qlower.quantize` (min-max; 4-bit: per channel, LPBQ blocks of 32 where they divide the
           rows), lowered for HTP and run with qlower's QNN reference interpreter; again with
           param_calibration_method="mse" (weights clipped where that lowers their squared error)
  AIMET    aimet-onnx's QuantizationSimModel, its default scheme, int16 activations, int8/int4 params
  ORT      onnxruntime's get_qnn_qdq_config (QUInt16 activations, QUInt8 / QInt4 per-channel weights),
           the QDQ model run by onnxruntime's CPU provider

Models are ONNX exports of small torch models with fixed seeds (a CNN, a transformer encoder block).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) /
                               max(np.sum((ref.astype(np.float64) - got) ** 2), 1e-30)))


def models(tmp: Path) -> dict[str, tuple[Path, dict[str, tuple[int, ...]]]]:
    import torch

    torch.manual_seed(0)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(32 * 8 * 8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).eval()

    class Block(torch.nn.Module):
        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.n1(x)).chunk(3, dim=-1)
            sh = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            a = torch.softmax(sh(q) @ sh(k).transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ sh(v)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
            return x + self.f2(torch.relu(self.f1(self.n2(x))))

    out = {}
    for name, m, shape in (("cnn", cnn, (1, 3, 16, 16)), ("encoder_block", Block().eval(), (1, 16, 64))):
        path = tmp / f"{name}.onnx"
        torch.onnx.export(m, (torch.randn(shape),), str(path), input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17)
        out[name] = (path, {"x": shape})
    return out


def run_qlower(path: Path, calib: list[dict], held: list[dict], bits: int, tmp: Path,
               param_method: str = "minmax") -> list[np.ndarray]:
    import qlower
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.graph.quantize import quantize_real
    from qlower.qnn.convert import encoding_of
    from qlower.quantize import QuantOptions, quantize
    from qlower.reference.interpreter import run as run_qnn
    from qlower.reference.quant import dequantize

    g = load_onnx(path)
    opts = QuantOptions(weights_bitwidth=bits, block_size=32 if bits == 4 else None,
                        param_calibration_method=param_method)
    q = quantize(g, calib, opts)
    result = qlower.lower(q, qlower.load_rules(packs=["onnx"]), backend="htp")
    result.raise_for_errors()
    qnn = result.qnn
    outs = []
    for feed in held:
        ins = {v.name: quantize_real(feed[v.name], v.quant, v.dtype) for v in q.inputs}
        got = run_qnn(qnn, ins)
        y = q.outputs[0]
        outs.append(dequantize(got[y.name], encoding_of(y.quant, y.dtype, y.shape), y.dtype))
    return outs


def run_ort(path: Path, calib: list[dict], held: list[dict], bits: int, tmp: Path) -> list[np.ndarray]:
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    cfg = get_qnn_qdq_config(str(path), Reader(), activation_type=QuantType.QUInt16,
                             weight_type=QuantType.QUInt8 if bits == 8 else QuantType.QInt4, per_channel=True)
    out = tmp / f"{path.stem}_ort_w{bits}.onnx"
    quantize(str(path), str(out), cfg)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in held]


def run_aimet(path: Path, calib: list[dict], held: list[dict], bits: int, tmp: Path) -> list[np.ndarray]:
    import onnx
    from aimet_onnx.quantsim import QuantizationSimModel

    sim = QuantizationSimModel(onnx.load(str(path)), param_type=f"int{bits}", activation_type="int16")
    sim.compute_encodings(calib)
    return [sim.session.run(None, f)[0] for f in held]


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--held-out", type=int, default=8)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="qlower_acc_"))
    rows = []
    for name, (path, shapes) in models(tmp).items():
        rng = np.random.default_rng(1)
        make = lambda: {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}  # noqa: E731
        calib = [make() for _ in range(args.calibration)]
        held = [make() for _ in range(args.held_out)]
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        ref = np.concatenate([sess.run(None, f)[0].reshape(-1) for f in held])
        for bits in (8, 4):
            row = [name, f"w{bits}a16"]
            qlower_mse = lambda *a: run_qlower(*a, param_method="mse")  # noqa: E731
            for tool, fn in (("qlower", run_qlower), ("qlower-mse", qlower_mse), ("AIMET", run_aimet),
                             ("ORT", run_ort)):
                try:
                    got = np.concatenate([np.asarray(o).reshape(-1) for o in fn(path, calib, held, bits, tmp)])
                    row.append(f"{sqnr(ref, got):6.2f}")
                except Exception as exc:  # a tool that cannot do this case: say so in the table
                    row.append(f"n/a ({type(exc).__name__}: {str(exc)[:80]})")
            rows.append(row)
            print(" | ".join(row), flush=True)
    print("\nmodel | mode | qlower SQNR dB | qlower, mse weights dB | AIMET QuantSim dB | ORT get_qnn_qdq_config dB")
    for r in rows:
        print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
