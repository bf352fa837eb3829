"""`qlower debug` on real transformers architectures (random weights), through every frontend.

    python tools/verify_real_models.py OUTDIR [--backends cpu,htp]

Builds small Qwen2 (causal LM) and BERT (encoder) models from `transformers` with
random weights, exports each with `torch.export` (.pt2) and `torch.onnx.export`
(.onnx), then runs `qlower debug MODEL --backend B --json ...` on each file and
prints the verdict line. Default tolerances only: the point is that a correct
lowering of a real model passes them. Needs the torch and onnx extras and
transformers; takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path


def build(outdir: Path) -> list[Path]:
    import torch
    import transformers

    torch.manual_seed(0)
    models = {
        "qwen2": transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=100, max_position_embeddings=64)).eval(),
        "bert": transformers.BertModel(transformers.BertConfig(
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2,
            vocab_size=100, max_position_embeddings=64), add_pooling_layer=False).eval(),
    }

    class Logits(torch.nn.Module):
        """The model's first output as a plain tensor (exporters want tensors, not ModelOutput)."""

        def __init__(self, m: torch.nn.Module, causal: bool) -> None:
            super().__init__()
            self.m, self.causal = m, causal

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            kw = {"use_cache": False} if self.causal else {}
            return self.m(ids, **kw)[0]

    files = []
    ids = torch.randint(0, 100, (1, 8))
    for name, model in models.items():
        wrapped = Logits(model, name == "qwen2").eval()
        ep = torch.export.export(wrapped, (ids,), strict=False)
        pt2 = outdir / f"{name}.pt2"
        torch.export.save(ep, pt2)
        files.append(pt2)
        onnx_path = outdir / f"{name}.onnx"
        try:  # the TorchScript exporter; Qwen2's mask code (aten::diff) needs the dynamo one
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(wrapped, (ids,), onnx_path, input_names=["ids"], output_names=["out"],
                                  dynamo=False)
        except Exception:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(wrapped, (ids,), onnx_path, input_names=["ids"], output_names=["out"],
                                  dynamo=True, external_data=False)
        files.append(onnx_path)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--backends", default="cpu,htp")
    args = ap.parse_args()
    from qlower.cli.main import main as qlower

    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for model in build(out):
        for backend in args.backends.split(","):
            report = out / f"{model.stem}_{model.suffix[1:]}_{backend}.json"
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = qlower(["debug", str(model), "--backend", backend, "--json", str(report)])
            lines = buf.getvalue().splitlines()
            verdict = next((line for line in lines if line.startswith("verification")), lines[-1] if lines else "")
            print(f"{model.name:12} {backend:4} exit {rc}  {verdict}")
            failures += rc != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
