"""Quantization bench: real quantizers' models lowered by qlower, against the quantizer's own simulation.

Each model (transformers architectures with tiny configs and random weights, and small CNNs) is
exported with `torch.onnx.export`, quantized by each *quantizer column* (a registry of callables:
onnxruntime's `quantize_static` with `get_qnn_qdq_config` and plainly, in the configurations of
issue 27; more columns — AIMET, ExecuTorch — register themselves in `QUANTIZERS`), lowered by qlower
for HTP and CPU, validated, run with qlower's QNN reference kernels and compared with the
quantizer's simulation (for onnxruntime: the QDQ model run by onnxruntime with graph optimizations
off). Per cell it prints whether it lowered and validated, how many QNN compute ops are float,
the steps of the output encoding between qlower and the simulation (share within 1 step, max),
and the SQNR of each against the float model (qlower's / the quantizer's, in dB).

    python bench/bench_quant.py [--only llama_sdpa,resnet] [--quantizers ort_qnn_a8w8,...] [--backends htp,cpu]
                                [--keep DIR] [--layers 1]

Needs torch, transformers and onnxruntime (`pip install 'qlower[onnx,test]' transformers`); a column
whose quantizer is not installed is skipped with a note. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

SEQ = 8
IMAGE = 32
CALIBRATION = 8


# ------------------------------------------------------------------ models
@attrs.frozen
class Model:
    """A float model: the torch module, one example input per graph input, and the output key."""

    module: Any
    feeds: dict[str, Any]  # name → torch tensor
    kind: str  # "tokens" or "image": what calibration inputs look like
    transformer: bool = True


def _tokens():
    import torch

    return torch.randint(0, 128, (1, SEQ), generator=torch.Generator().manual_seed(0))


def _image():
    import torch

    return torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))


class _Out:
    """Wrap a transformers model so the ONNX graph has one float output."""

    def __new__(cls, model, key):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, x):
                out = self.m(x, return_dict=True)
                return getattr(out, key)

        return W()


def _causal(cfg_name: str, attn: str, layers: int):
    def build() -> Model:
        import transformers as tf

        cfg = getattr(tf, cfg_name)(vocab_size=128, hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                    max_position_embeddings=64, use_cache=False)
        m = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
        return Model(_Out(m, "logits"), {"input_ids": _tokens()}, "tokens")
    return build


def _gpt2(attn: str, layers: int):
    def build() -> Model:
        import transformers as tf

        cfg = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=layers, n_head=4, n_positions=64, use_cache=False)
        return Model(_Out(tf.GPT2LMHeadModel._from_config(cfg, attn_implementation=attn), "logits"),
                     {"input_ids": _tokens()}, "tokens")
    return build


def _bert(attn: str, layers: int):
    def build() -> Model:
        import transformers as tf

        cfg = tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=64)
        return Model(_Out(tf.BertModel._from_config(cfg, attn_implementation=attn), "last_hidden_state"),
                     {"input_ids": _tokens()}, "tokens")
    return build


def _vit(attn: str, layers: int):
    def build() -> Model:
        import transformers as tf

        cfg = tf.ViTConfig(image_size=IMAGE, patch_size=8, hidden_size=64, num_hidden_layers=layers,
                           num_attention_heads=4, intermediate_size=128)
        return Model(_Out(tf.ViTModel._from_config(cfg, attn_implementation=attn), "last_hidden_state"),
                     {"pixel_values": _image()}, "image")
    return build


def _hf_cnn(cfg_name: str, model_name: str, **kw):
    def build() -> Model:
        import transformers as tf

        cfg = getattr(tf, cfg_name)(**kw)
        return Model(_Out(getattr(tf, model_name)(cfg), "pooler_output"), {"pixel_values": _image()}, "image",
                     transformer=False)
    return build


def _resnet18_layout():
    """A torchvision-layout ResNet-18 (BasicBlocks 2-2-2-2, BatchNorm, max pool, fc), narrow."""
    def build() -> Model:
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(cout)
                self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(cout)
                self.down = None if stride == 1 and cin == cout else nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

            def forward(self, x):
                y = torch.relu(self.bn1(self.conv1(x)))
                y = self.bn2(self.conv2(y))
                return torch.relu(y + (x if self.down is None else self.down(x)))

        widths = [8, 16, 32, 64]
        layers, cin = [], 8
        for i, w in enumerate(widths):
            layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
            cin = w
        net = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                            nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
        for m in net.modules():  # random BatchNorm statistics, so folding them is not the identity
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        return Model(net, {"x": _image()}, "image", transformer=False)
    return build


def models(layers: int = 1) -> dict[str, Callable[[], Model]]:
    return {
        "llama_sdpa": _causal("LlamaConfig", "sdpa", layers), "llama_eager": _causal("LlamaConfig", "eager", layers),
        "qwen2_sdpa": _causal("Qwen2Config", "sdpa", layers), "qwen2_eager": _causal("Qwen2Config", "eager", layers),
        "gpt2_sdpa": _gpt2("sdpa", layers), "gpt2_eager": _gpt2("eager", layers),
        "bert_sdpa": _bert("sdpa", layers), "bert_eager": _bert("eager", layers),
        "vit_sdpa": _vit("sdpa", layers), "vit_eager": _vit("eager", layers),
        "hf_resnet": _hf_cnn("ResNetConfig", "ResNetModel", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                             layer_type="basic"),
        "hf_mobilenet_v2": _hf_cnn("MobileNetV2Config", "MobileNetV2Model", depth_multiplier=0.25, image_size=IMAGE),
        "resnet18_layout": _resnet18_layout(),
    }


def calibration(model: Model, n: int = CALIBRATION, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if model.kind == "tokens":
            out.append({k: rng.integers(0, 128, tuple(v.shape)).astype(np.int64) for k, v in model.feeds.items()})
        else:
            out.append({k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in model.feeds.items()})
    return out


def export(model: Model, path: Path, opset: int | None = None) -> Path:
    import onnx
    import torch

    model.module.eval()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), torch.no_grad():
        torch.onnx.export(model.module, tuple(model.feeds.values()), str(path), input_names=list(model.feeds),
                          output_names=["y"], dynamo=True)
    if opset is not None:
        from onnx import version_converter

        m = onnx.load(str(path))
        m = version_converter.convert_version(m, opset)
        onnx.save(m, str(path))
    return path


# ------------------------------------------------------------------ quantizers
@attrs.frozen
class Quantized:
    """A quantizer's result: the model qlower lowers and the quantizer's own simulation of it."""

    path: Path
    simulate: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    output_step: float | None  # the output encoding's scale (None: a float output)


@attrs.frozen
class Quantizer:
    """A bench column. `run(model, float_onnx, calibration, workdir)` → Quantized, or raise
    `NotApplicable` for models the configuration does not cover. `requires`: importable modules."""

    name: str
    run: Callable[[Model, Path, list, Path], Quantized]
    requires: tuple[str, ...] = ()
    opset: int | None = None  # export the float model at this opset first


class NotApplicable(Exception):
    pass


QUANTIZERS: dict[str, Quantizer] = {}


def register(q: Quantizer) -> Quantizer:
    QUANTIZERS[q.name] = q
    return q


def _ort_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _output_step(path: Path) -> float | None:
    """The scale of the DequantizeLinear writing the graph output (None if the output is float)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path), load_external_data=False)
    out = m.graph.output[0].name
    inits = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        if out in n.output and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            s = numpy_helper.to_array(inits[n.input[1]])
            return float(np.max(s))
    return None


class _Reader:
    def __init__(self, data):
        self.it = iter(data)

    def get_next(self):
        return next(self.it, None)


def _ort_simulation(path: Path) -> Quantized:
    sess = _ort_session(path)
    return Quantized(path, lambda feeds: sess.run(None, dict(feeds))[0], _output_step(path))


def _ort_qnn(activation: str, weight: str, per_channel: bool, symmetric: bool | None = None):
    def run(model: Model, float_path: Path, calib: list, work: Path) -> Quantized:
        from onnxruntime.quantization import QuantType, quantize
        from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

        out = work / "quantized.onnx"
        cfg = get_qnn_qdq_config(str(float_path), _Reader(calib), activation_type=getattr(QuantType, activation),
                                 weight_type=getattr(QuantType, weight), per_channel=per_channel,
                                 weight_symmetric=symmetric)
        with contextlib.redirect_stderr(io.StringIO()):
            quantize(str(float_path), str(out), cfg)
        return _ort_simulation(out)
    return run


def _ort_plain(model: Model, float_path: Path, calib: list, work: Path) -> Quantized:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    out = work / "quantized.onnx"
    with contextlib.redirect_stderr(io.StringIO()):
        quantize_static(str(float_path), str(out), _Reader(calib), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    return _ort_simulation(out)


def _ort_int4_block(model: Model, float_path: Path, calib: list, work: Path) -> Quantized:
    """int4 block-quantized MatMul weights (block 32, symmetric), as blocked DequantizeLinear (opset 21)."""
    import onnx
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    if not model.transformer:
        raise NotApplicable("no MatMul weights")
    m = onnx.load(str(float_path))
    q = MatMulNBitsQuantizer(m, algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True,
                                                                        quant_format=QuantFormat.QDQ))
    with contextlib.redirect_stderr(io.StringIO()):
        q.process()
    out = work / "quantized.onnx"
    onnx.save(q.model.model, str(out))
    return _ort_simulation(out)


for _q in (
    Quantizer("ort_qnn_a8w8", _ort_qnn("QUInt8", "QInt8", True), ("onnxruntime",)),
    Quantizer("ort_plain_a8w8", _ort_plain, ("onnxruntime",)),
    Quantizer("ort_qnn_a16w8_op20", _ort_qnn("QUInt16", "QUInt8", False), ("onnxruntime",), opset=20),
    Quantizer("ort_qnn_a16w8_op21", _ort_qnn("QUInt16", "QUInt8", False), ("onnxruntime",), opset=21),
    Quantizer("ort_qnn_a16w8_sym_pc", _ort_qnn("QUInt16", "QInt8", True, True), ("onnxruntime",)),
    Quantizer("ort_qnn_a16w4_pc", _ort_qnn("QUInt16", "QInt4", True, True), ("onnxruntime",), opset=21),
    Quantizer("ort_int4_block_matmul", _ort_int4_block, ("onnxruntime",), opset=21),
):
    register(_q)


# ------------------------------------------------------------------ cells
def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - got) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / noise)


def _float_ops(qnn: Any) -> int:
    """QNN compute ops with a float output (Cast, Dequantize, Quantize and data movement aside)."""
    movers = {"Cast", "Dequantize", "Quantize", "Reshape", "Transpose", "Convert", "StridedSlice", "Gather",
              "Concat", "Tile", "Split", "Pack", "UnPack"}
    n = 0
    for op in qnn.ops:
        if op.type in movers:
            continue
        outs = [qnn.tensors[o] for o in op.outputs]
        if any(t.datatype.name.startswith("FLOAT") for t in outs):
            n += 1
    return n


def lower_cell(q: Quantized, feeds: Mapping[str, np.ndarray], float_out: np.ndarray, column: str) -> str:
    """One backend column: `htp`, `cpu`, ... or `htp:f32` (HTP with its float ops in float32, no float16 pass)."""
    backend, _, variant = column.partition(":")
    float16 = False if variant == "f32" else None
    import qlower
    from qlower.api import load_model
    from qlower.diagnostics import QlowerError
    from qlower.reference.interpreter import run_dequantized

    try:
        graph = load_model(q.path)
        result = qlower.lower(graph, _rules(), backend=backend, float16=float16)
    except QlowerError as exc:
        return "import: " + exc.diagnostics[0].message.splitlines()[0][:150]
    if not result.ok:
        return f"lower: {len(result.errors)} errors, first: " + result.errors[0].message.splitlines()[0][:150]
    qnn = result.qnn
    runnable = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
    try:
        got = next(iter(run_dequantized(qnn, runnable).values())).astype(np.float64)
    except QlowerError as exc:
        return "run: " + exc.diagnostics[0].message.splitlines()[0][:150]
    want = np.asarray(q.simulate(feeds), np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    diff = np.abs(got - want)
    mine, theirs = _sqnr(float_out, got), _sqnr(float_out, want)
    floats = _float_ops(qnn)
    if q.output_step:
        steps = diff / q.output_step
        head = f"<=1 step {np.mean(steps <= 1.0 + 1e-6) * 100:.2f}% max {steps.max():.1f}"
    else:
        head = f"rel {diff.max() / max(np.abs(want).max(), 1e-30):.1e} (float output)"
    return f"ok {head}; SQNR {mine:.1f}/{theirs:.1f} dB; float ops {floats}"


_RULES: list = []


def _rules():
    import qlower

    if not _RULES:
        _RULES.append(qlower.load_rules(packs=["onnx"]))
    return _RULES[0]


def _available(q: Quantizer) -> str | None:
    import importlib

    for mod in q.requires:
        try:
            importlib.import_module(mod)
        except ImportError:
            return f"skipped: {mod} is not installed"
    return None


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None, help="models (comma-separated)")
    p.add_argument("--quantizers", default=None, help="columns (comma-separated); default: all registered")
    p.add_argument("--backends", default="htp,cpu", help="columns: htp, cpu, htp:f32 (no float16 pass), ...")
    p.add_argument("--layers", type=int, default=1, help="transformer layers")
    p.add_argument("--keep", default=None, help="keep models here")
    args = p.parse_args(argv)
    catalogue = models(args.layers)
    chosen = args.only.split(",") if args.only else list(catalogue)
    columns = [QUANTIZERS[n] for n in (args.quantizers.split(",") if args.quantizers else QUANTIZERS)]
    backends = args.backends.split(",")
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_quant_"))
    counts = {b: [0, 0] for b in backends}
    print(f"| model | quantizer | {' | '.join(backends)} |")
    print("|---|---|" + "---|" * len(backends))
    for name in chosen:
        torch.manual_seed(0)
        model = catalogue[name]()
        calib = calibration(model)
        feeds = calibration(model, 1, seed=7)[0]
        for q in columns:
            work = root / name / q.name
            work.mkdir(parents=True, exist_ok=True)
            note = _available(q)
            cells = [note] * len(backends) if note else None
            if cells is None:
                t0 = time.perf_counter()
                try:
                    float_path = root / name / f"float_opset{q.opset or 'default'}.onnx"
                    if not float_path.exists():  # one export per model and opset, shared by the columns
                        export(model, float_path, q.opset)
                    float_out = _ort_session(float_path).run(None, feeds)[0].astype(np.float64)
                    quantized = q.run(model, float_path, calib, work)
                except NotApplicable as exc:
                    cells = [f"n/a: {exc}"] * len(backends)
                except Exception as exc:  # a quantizer's failure is a cell, not the bench's
                    cells = [f"quantizer: {type(exc).__name__}: {str(exc)[:120]}"] * len(backends)
                else:
                    cells = [lower_cell(quantized, feeds, float_out, b) for b in backends]
                    for b, c in zip(backends, cells):
                        counts[b][0] += c.startswith("ok")
                        counts[b][1] += 1
                del t0
            print(f"| {name} | {q.name} | {' | '.join(cells)} |", flush=True)
    print()
    for b, (ok, n) in counts.items():
        print(f"{b}: {ok} of {n} applicable cells lower, validate and run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
