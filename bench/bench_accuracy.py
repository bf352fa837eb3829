"""Accuracy side by side (outside the default test run): SQNR of each quantizer's outputs against the
float model on held-out inputs, every quantizer calibrated on the same calibration inputs, at w8a16
and w4a16.

    python bench/bench_accuracy.py [--calibration 8] [--held-out 8] [--models cnn,llama,...] [--seed 0]

  qlower   `qlower.quantize` with its defaults (min-max ranges, 16-bit ones with 1/16 headroom;
           Sigmoid / Softmax results at HTP's fixed 1/65536; weights symmetric per channel, 4-bit
           as LPBQ: blocks of 32 inputs where they divide the rows, per channel elsewhere; biases
           corrected for the weights' mean shift), lowered for HTP and run with qlower's QNN
           reference interpreter; again with param_calibration_method="mse" (weights clipped per
           channel/block where that lowers their squared error)
  AIMET    aimet-onnx's QuantizationSimModel, its default scheme (min-max, default config) at int16
           activations and int8 / int4 params; at 4 bits LPBQ (`set_lpbq_for_params`, blocks of 32,
           4-bit block scales) on its Conv/Gemm/MatMul weights
  ORT      onnxruntime's get_qnn_qdq_config (QUInt16 activations, QUInt8 / QInt4 per-channel weights:
           ORT has no LPBQ, so its w4a16 is per channel), the QDQ model run by onnxruntime's CPU provider

Models are ONNX exports (torch.onnx.export, dynamo=False, opset 17) of small models with fixed seeds:
a CNN, a transformer encoder block, transformers' ViTModel (its last_hidden_state), and two causal
LM decoders, LlamaForCausalLM and Qwen3ForCausalLM (tiny random configs, eager attention, a prefill of
32 token ids in and its logits out, no KV cache). Float inputs are standard normals, token ids uniform
over the vocabulary.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) /
                               max(np.sum((ref.astype(np.float64) - got) ** 2), 1e-30)))


# name -> (shape, dtype, vocabulary): float inputs are standard normals, integer inputs token ids in [0, vocabulary)
Inputs = dict[str, tuple[tuple[int, ...], str, int | None]]

SEQ, VOCAB = 32, 256
BLOCK = 32  # LPBQ block (4-bit weights)


def models(tmp: Path, wanted: set[str] | None = None, seed: int = 0) -> dict[str, tuple[Path, Inputs]]:
    import torch
    import transformers

    torch.manual_seed(seed)
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

    block = Block().eval()

    class Logits(torch.nn.Module):  # a causal LM's prefill: token ids in, logits out, no KV cache
        def __init__(self, lm: torch.nn.Module) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits

    class Hidden(torch.nn.Module):  # an encoder's last hidden state
        def __init__(self, enc: torch.nn.Module) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, x):
            return self.enc(x).last_hidden_state

    def hf(model_cls, config_cls, model_kw=None, **kw):  # a tiny random transformers model, eager attention
        config = config_cls(**kw)
        config._attn_implementation = "eager"
        torch.manual_seed(seed)
        return model_cls(config, **(model_kw or {})).eval()

    decoder = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * SEQ)
    vit = hf(transformers.ViTModel, transformers.ViTConfig, {"add_pooling_layer": False}, image_size=32,
             patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    ids = ((1, SEQ), "int64", VOCAB)
    cases = (("cnn", cnn, {"x": ((1, 3, 16, 16), "float32", None)}),
             ("encoder_block", block, {"x": ((1, 16, 64), "float32", None)}),
             ("vit", Hidden(vit), {"x": ((1, 3, 32, 32), "float32", None)}),
             ("llama", Logits(hf(transformers.LlamaForCausalLM, transformers.LlamaConfig, **decoder)),
              {"input_ids": ids}),
             ("qwen3", Logits(hf(transformers.Qwen3ForCausalLM, transformers.Qwen3Config, head_dim=16, **decoder)),
              {"input_ids": ids}))
    out = {}
    for name, m, inputs in cases:
        if wanted is not None and name not in wanted:
            continue
        path = tmp / f"{name}.onnx"
        (shape, dtype, vocab), = inputs.values()
        example = torch.randint(0, vocab, shape) if vocab else torch.randn(shape)
        with torch.no_grad():
            torch.onnx.export(m, (example,), str(path), input_names=list(inputs), output_names=["y"],
                              dynamo=False, opset_version=17)
        out[name] = (path, inputs)
    return out


def feed_maker(inputs: Inputs, rng: np.random.Generator):
    """One input set a call: normals for float inputs, token ids for integer ones."""
    def make() -> dict[str, np.ndarray]:
        return {k: (rng.integers(0, vocab, shape).astype(dtype) if vocab else
                    rng.standard_normal(shape).astype(dtype)) for k, (shape, dtype, vocab) in inputs.items()}
    return make


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
    opts = QuantOptions(weights_bitwidth=bits, block_size=BLOCK if bits == 4 else None,
                        param_calibration_method=param_method)
    q = quantize(g, calib, opts)
    result = qlower.lower(q, qlower.load_rules(packs=["onnx"]), backend="htp")
    result.raise_for_errors()
    qnn = result.qnn
    outs = []
    for feed in held:
        ins = {v.name: quantize_real(feed[v.name], v.quant, v.dtype) if v.quant is not None else feed[v.name]
               for v in q.inputs}
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
    from aimet_onnx.quantsim import QuantizationSimModel, set_lpbq_for_params

    sim = QuantizationSimModel(onnx.load(str(path)), param_type=f"int{bits}", activation_type="int16")
    if bits == 4:  # LPBQ as qlower's: 4-bit blocks of 32 inputs, 4-bit integer scales per channel
        set_lpbq_for_params(sim, bitwidth=4, block_size=BLOCK, op_types={"Conv", "Gemm", "MatMul"})
    sim.compute_encodings(calib)
    return [sim.session.run(None, f)[0] for f in held]


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--calibration", type=int, default=8)
    ap.add_argument("--held-out", type=int, default=8)
    ap.add_argument("--models", help="comma-separated subset of the models (default: all)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seeds the models (torch) and, plus one, the inputs (numpy)")
    args = ap.parse_args(argv)
    wanted = set(args.models.split(",")) if args.models else None
    tmp = Path(tempfile.mkdtemp(prefix="qlower_acc_"))
    rows = []
    start = time.perf_counter()
    for name, (path, inputs) in models(tmp, wanted, args.seed).items():
        make = feed_maker(inputs, np.random.default_rng(args.seed + 1))
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
    print(f"(ORT's w4a16 is per channel: get_qnn_qdq_config has no LPBQ. {args.calibration} calibration and "
          f"{args.held_out} held-out input sets a model; {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
