"""AIMET columns of the quantization matrix: small models quantized by aimet-onnx's QuantSim
(w8a8, w8a16, w4a16 LPBQ), lowered for HTP with `--quantization-overrides`, validated, verified
and compared with AIMET's own QuantSim run.

    python bench/bench_quant_aimet.py [--models cnn,gpt2,bert,llama] [--configs w8a8,w8a16,w4a16_lpbq]

Per cell: `ok` or the first error; then max |qlower − QuantSim| in steps of the output encoding,
the share of elements within one step, and the SQNR (dB) against the float model of qlower's
output and of QuantSim's. Needs aimet-onnx (and torch + transformers for the transformer rows);
prints a note and exits 0 when they are absent. Outside the default test run (minutes per row).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEQ = 8
CONFIGS = ("w8a8", "w8a16", "w4a16_lpbq")


def _cnn(work: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "frontends"))
    from test_overrides import SHAPE, _float_model  # the test's CNN: one definition

    import onnx

    path = work / "cnn.onnx"
    onnx.save(_float_model(), path)
    rng = np.random.default_rng(0)
    return path, lambda i: {"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)}, \
        {"x": (rng.standard_normal(SHAPE) * 1.5).astype(np.float32)}


def _transformer(kind: str, work: Path):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                                 use_cache=False))
        key = "logits"
    elif kind == "bert":
        model = tf.AutoModel.from_config(tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                                       num_attention_heads=4, intermediate_size=128,
                                                       max_position_embeddings=64), attn_implementation="eager")
        key = "last_hidden_state"
    else:
        cfg = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
        model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
        key = "logits"
    model.eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return getattr(self.m(input_ids=ids, return_dict=True), key)

    ids = torch.randint(0, 128, (1, SEQ), generator=torch.Generator().manual_seed(0))
    path = work / f"{kind}.onnx"
    for dynamo in (True, False):  # the dynamo exporter, or the TorchScript one where it fails
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(W().eval(), (ids,), str(path), input_names=["ids"], output_names=["y"],
                                  opset_version=18 if dynamo else 17, dynamo=dynamo)
            break
        except Exception:
            if not dynamo:
                raise

    def calib(i):
        return {"ids": np.random.default_rng(i).integers(0, 128, (1, SEQ)).astype(np.int64)}
    return path, calib, calib(99)


def _quantsim(path: Path, config: str, calib, feed, work: Path):
    """AIMET's encodings for `config` and QuantSim's output on `feed`."""
    import onnx
    from aimet_onnx import quantsim

    model = onnx.load(str(path))
    act = "int16" if "a16" in config else "int8"
    sim = quantsim.QuantizationSimModel(model, param_type="int8", activation_type=act,
                                        providers=["CPUExecutionProvider"])
    if config.endswith("lpbq"):
        quantsim.set_grouped_blockwise_quantization_for_weights(sim, ("Gemm", "MatMul", "Conv"), bitwidth=4,
                                                               decompressed_bw=8, block_size=16)

    def forward(session, _=None):
        for i in range(6):
            session.run(None, calib(i))

    sim.compute_encodings(forward, None)
    out = work / config
    out.mkdir(exist_ok=True)
    sim.export(str(out), path.stem, encoding_version="1.0.0")
    return out / f"{path.stem}.encodings", sim.session.run(None, feed)[0]


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    err = float(np.sum((got.astype(np.float64) - ref) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err)


def cell(path: Path, config: str, calib, feed, work: Path) -> str:
    import onnxruntime as ort

    import qlower
    from qlower.reference.interpreter import run

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        encodings, sim_out = _quantsim(path, config, calib, feed, work)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    try:
        graph = qlower.api.load_model(path, quantization_overrides=encodings)
        result = qlower.lower(graph, qlower.load_rules(packs=["onnx"]), "htp", verify=True,
                              inputs={k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feed.items()})
    except qlower.QlowerError as exc:
        return "lower: " + str(exc).splitlines()[0][:100]
    if not result.ok:
        first = result.errors[0]
        return (f"lower/validate: {len(result.errors)} errors, first: {getattr(first, 'subject', None) or '?'}: "
                + first.message[:90])
    verdict = "verify ok" if result.verification.passed else "VERIFY FAILED"
    have = run(result.qnn, {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feed.items()})
    have = next(iter(have.values())) if "y" not in have else have["y"]
    doc = json.loads(Path(encodings).read_text())
    step = next((e["scale"][0] for e in doc["activation_encodings"] if e["name"] == "y"), None)
    diff = np.abs(have.astype(np.float64) - sim_out)
    steps = f"max {diff.max() / step:.2f} st, {np.mean(diff <= step * 1.0001):.2%} <=1 st" if step else \
        f"max |d| {diff.max():.3g}"
    return f"{verdict}; {steps}; SQNR qlower {_sqnr(want, have):.1f} dB, QuantSim {_sqnr(want, sim_out):.1f} dB"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="cnn,gpt2,bert,llama")
    p.add_argument("--configs", default=",".join(CONFIGS))
    args = p.parse_args(argv)
    try:
        import aimet_onnx  # noqa: F401
    except ImportError:
        print("aimet-onnx is not installed: no AIMET columns (pip install aimet-onnx beside torch==2.13.0)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            work = Path(tmp) / name
            work.mkdir()
            try:
                path, calib, feed = _cnn(work) if name == "cnn" else _transformer(name, work)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
                continue
            except Exception as exc:  # the exporter's failure: the row cannot be built
                print(f"{name}: not exported ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
                continue
            for config in args.configs.split(","):
                t0 = time.perf_counter()
                try:
                    text = cell(path, config, calib, feed, work)
                except Exception as exc:  # a bench row: report the tool's failure and go on
                    text = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
                print(f"{name:8s} {config:11s} {text}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
