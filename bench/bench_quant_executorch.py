"""The ExecuTorch columns of the quantization bench: pt2e programs made by ExecuTorch's QnnQuantizer.

Each model (small transformers configs with random weights, and CNNs; bench/zoo_models.py) is exported
with torch.export, quantized with `QnnQuantizer` (8a8w, 16a8w, 16a4w; per-channel conv and linear
weights, as ExecuTorch's Qualcomm examples set it) through torchao's `prepare_pt2e` / `convert_pt2e`,
calibrated on a few seeded random inputs, and exported again. qlower imports that program, lowers it
for HTP (validation included) and runs the lowered graph with its reference interpreter; the result
is compared with the converted program run in torch (the quantizer's own simulation):

    steps   |lowered − simulated| in steps of the output's encoding: share ≤ 1 step, and the largest
    SQNR    10·log10(Σ float² / Σ (float − x)²) against the float model, for the simulation and for qlower
    float   QNN ops of the lowered graph that compute in float (Quantize/Dequantize/Cast excepted)

Needs the optional tools (torch, torchao, executorch, transformers); prints a note and exits 0 when
one is absent. Run:

    python bench/bench_quant_executorch.py [--models llama,gpt2] [--configs 8a8w,16a8w] [--json out.json]
        [--save DIR [--reuse]] [--no-float16]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = ("llama", "qwen2", "gpt2", "bert", "vit", "hf-resnet", "tv-resnet18", "tv-mobilenet-v2")
CONFIGS = {"8a8w": "use_8a8w", "16a8w": "use_16a8w", "16a4w": "use_16a4w"}
_BOUNDARY = frozenset({"Quantize", "Dequantize", "Cast", "Convert"})


def missing_tools() -> list[str]:
    return [m for m in ("torch", "torchao", "executorch", "transformers") if importlib.util.find_spec(m) is None]


def quantize_program(module: Any, inputs: tuple, config: str, *, calibration: int = 4) -> Any:
    """The converted pt2e program of `module`, as ExecuTorch's QnnQuantizer quantizes it for `config`."""
    import torch
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(getattr(QuantDtype, CONFIGS[config]), is_conv_per_channel=True,
                                       is_linear_per_channel=True)
    graph_module = torch.export.export(module, inputs, strict=False).module()
    prepared = prepare_pt2e(graph_module, quantizer)
    for batch in calibration_inputs(inputs, calibration):
        prepared(*batch)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, inputs, strict=False)


def calibration_inputs(inputs: tuple, n: int) -> list[tuple]:
    """The example inputs and n − 1 seeded random ones like them (token ids in the same range)."""
    import torch

    g = torch.Generator().manual_seed(7)
    out = [inputs]
    for _ in range(n - 1):
        batch = []
        for t in inputs:
            if t.dtype.is_floating_point:
                batch.append(torch.randn(t.shape, generator=g, dtype=t.dtype))
            elif t.dtype == torch.bool or int(t.max()) <= 1:
                batch.append(t.clone())  # masks stay
            else:
                batch.append(torch.randint(0, int(t.max()) + 1, t.shape, generator=g, dtype=t.dtype))
        out.append(tuple(batch))
    return out


def sqnr(ref: np.ndarray, x: np.ndarray) -> float:
    noise = float(np.sum((np.asarray(ref, np.float64) - x) ** 2))
    signal = float(np.sum(np.asarray(ref, np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / noise)


def output_step(graph: Any) -> float | None:
    """The step of the first output's encoding: the scale of what its final dequantize reads."""
    out = graph.outputs[0]
    op = out.producer
    src = out if out.quant is not None else (op.operands[0] if op is not None and op.operands else None)
    if src is None or src.quant is None or len(src.quant.scale) != 1:
        return None
    return float(src.quant.scale[0])


def run_cell(name: str, config: str, rules: Any, backend: str = "htp", save: Path | None = None,
             float16: bool | None = None, reuse: bool = False) -> dict[str, Any]:
    import torch

    import qlower
    from qlower.frontends.torch_frontend import load_exported
    from qlower.reference.interpreter import run_dequantized
    from zoo_models import MODELS as BUILDERS

    cell: dict[str, Any] = {"model": name, "config": config, "backend": backend, "float16": float16}
    t0 = time.perf_counter()
    torch.manual_seed(0)
    module, inputs = BUILDERS[name]()
    module.eval()
    with torch.no_grad():
        reference = module(*inputs).detach().float().numpy()
        try:
            saved = save / f"{name}_{config}.pt2" if save is not None and reuse else None
            if saved is not None and saved.is_file():  # a program an earlier run wrote: the same quantizer output
                from qlower.frontends.torch_quant import register_quant_ops

                register_quant_ops(saved)
                program = torch.export.load(str(saved))
            else:
                program = quantize_program(module, inputs, config)
        except Exception as exc:  # the quantizer's own failure: reported, not ours
            cell["status"] = f"quantizer failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            return cell
        simulated = program.module()(*inputs).detach().float().numpy()
    cell["sqnr_quantizer"] = round(sqnr(reference, simulated), 2)
    if save is not None and not reuse:  # the program, for `qlower lower x.pt2` and for looking into a cell
        save.mkdir(parents=True, exist_ok=True)
        torch.export.save(program, str(save / f"{name}_{config}.pt2"))
    try:
        graph = load_exported(program, name=name.replace("-", "_"))
    except qlower.QlowerError as exc:
        cell["status"] = f"import failed: {exc.render().splitlines()[0][:200]}"
        return cell
    step = output_step(graph)
    feeds = {v.name: t.numpy().astype(v.dtype) for v, t in zip(graph.inputs, inputs)}
    result = qlower.lower(graph, rules, backend=backend, float16=float16)
    errors = [d for d in result.diagnostics if d.severity.name.lower() == "error"] if result.diagnostics else []
    if not result.ok or result.table is None:
        first = errors[0].message if errors else "lowering did not finish"
        where = f" [{errors[0].subject}]" if errors and errors[0].subject else ""
        cell["status"] = f"lower/validate failed ({len(errors)} errors): {first[:200]}{where}"
        return cell
    qnn = result.qnn
    cell["float_ops"] = sorted({op.type for op in qnn.ops if op.type not in _BOUNDARY and any(
        qnn.tensors[t].datatype.name.startswith("FLOAT") for t in op.outputs)})
    cell["qnn_ops"] = len(qnn.ops)
    lowered = next(iter(run_dequantized(qnn, feeds).values())).reshape(simulated.shape)
    cell["sqnr_qlower"] = round(sqnr(reference, lowered), 2)
    if step:
        d = np.abs(lowered.astype(np.float64) - simulated) / step
        cell["step"] = step
        cell["within_1_step"] = round(float(np.mean(d <= 1.0 + 1e-6)), 5)
        cell["max_steps"] = round(float(d.max()), 3)
    cell["status"] = "ok"
    cell["seconds"] = round(time.perf_counter() - t0, 1)
    return cell


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--backend", default="htp")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reuse", action="store_true", help="load the programs --save wrote instead of quantizing again")
    ap.add_argument("--no-float16", action="store_true",
                    help="lower without HTP's float16 pass (which routes a final 16-bit Dequantize through FLOAT_16)")
    ap.add_argument("--save", type=Path, help="write each converted program there as <model>_<config>.pt2")
    args = ap.parse_args(argv)
    absent = missing_tools()
    if absent:
        print(f"note: skipped, not installed: {', '.join(absent)} (pip install executorch torchao transformers)")
        return 0
    import qlower

    rules = qlower.load_rules(packs=["aten"])
    cells = []
    for name in args.models.split(","):
        for config in args.configs.split(","):
            cell = run_cell(name, config, rules, args.backend, args.save, False if args.no_float16 else None,
                            args.reuse)
            cells.append(cell)
            print(_line(cell), flush=True)
    if args.json:
        args.json.write_text(json.dumps(cells, indent=1))
    return 0


def _line(c: dict[str, Any]) -> str:
    head = f"{c['model']:<18} {c['config']:<6}"
    if c.get("status") != "ok":
        return f"{head} {c.get('status')}"
    steps = f"≤1 step {c['within_1_step']:.4%}  max {c['max_steps']:.2f}" if "max_steps" in c else "steps n/a"
    fl = f"  float ops {c['float_ops']}" if c["float_ops"] else ""
    return (f"{head} ok  {steps}  SQNR qlower {c['sqnr_qlower']:.2f} dB vs quantizer {c['sqnr_quantizer']:.2f} dB"
            f"  ({c['qnn_ops']} QNN ops, {c['seconds']} s){fl}")


if __name__ == "__main__":
    raise SystemExit(main())
