"""ONNX model zoo: small transformers architectures (random weights) through qlower.

Each architecture is built from a small config, exported with `torch.onnx.export`
(the dynamo exporter, `--legacy` for the TorchScript one), lowered for each
backend with `qlower lower`, checked with `qlower validate`, run with
`qlower run` and compared with torch's output. Prints one cell per
(architecture, backend): ok with the relative error (max |diff| / max |torch|),
or the stage that failed and its first message line.

    python bench/onnx_zoo.py [--backends cpu,htp] [--only llama,bert] [--legacy] [--with-mask] [--keep DIR]

Needs the `onnx` and `torch` extras plus transformers. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import numpy as np

SEQ = 8
TOL = {"cpu": 1e-4, "htp": 2e-2}


def _small(cfg_cls, **kw):
    base = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base.update(kw)
    return cfg_cls(**base)


def architectures(with_mask: bool = False):
    """name → a function building (model, example inputs dict, output key)."""
    import torch
    import transformers as tf

    ids = torch.randint(0, 128, (1, SEQ), generator=torch.Generator().manual_seed(0))
    # a padded batch row: the mask's zeros must reach the attention
    mask = torch.tensor([[0] * 2 + [1] * (SEQ - 2)])

    def causal(cfg_name, **kw):
        def build():
            cfg = _small(getattr(tf, cfg_name), **kw)
            cfg.use_cache = False
            model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
            feeds = {"input_ids": ids, "attention_mask": mask} if with_mask else {"input_ids": ids}
            return model, feeds, "logits"
        return build

    def gpt2():
        cfg = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False)
        return tf.GPT2LMHeadModel(cfg), {"input_ids": ids}, "logits"

    def bert():
        cfg = tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=64)
        model = tf.AutoModel.from_config(cfg, attn_implementation="eager")
        return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, "last_hidden_state"

    def t5_encoder():
        cfg = tf.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                          use_cache=False)
        return tf.T5EncoderModel(cfg), {"input_ids": ids}, "last_hidden_state"

    return {
        "llama": causal("LlamaConfig"),
        "qwen2": causal("Qwen2Config"),
        "qwen3": causal("Qwen3Config", head_dim=16),
        "mistral": causal("MistralConfig"),
        "phi3": causal("Phi3Config", pad_token_id=0),
        "gemma": causal("GemmaConfig", head_dim=16),
        "gemma2": causal("Gemma2Config", head_dim=16),
        "gpt2": gpt2,
        "bert": bert,
        "t5_encoder": t5_encoder,
    }


class _Wrap:
    """A module returning one tensor, so the ONNX graph has one output."""

    def __new__(cls, model, key):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                names = list(self.names)
                return getattr(self.m(**dict(zip(names, args)), return_dict=True), key)

        return W()


def _qlower(argv: list[str]) -> tuple[int, str]:
    from qlower.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, (err.getvalue() + out.getvalue()).strip()


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line:
            return line.strip()[:160]
    return text.splitlines()[0][:160] if text else ""


def run_cell(onnx_path: Path, feeds: dict, want: np.ndarray, backend: str, work: Path) -> str:
    out = work / backend
    code, text = _qlower(["lower", str(onnx_path), "--backend", backend, "-o", str(out), "-q"])
    if code != 0:
        return "lower: " + _first_error(text)
    net = next(out.glob("*_net.json"))
    code, text = _qlower(["validate", str(net), "--backend", backend])
    if code != 0:
        return "validate: " + _first_error(text)
    inputs = work / "inputs.npz"
    np.savez(inputs, **{k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()})
    result = work / f"{backend}_out.npz"
    code, text = _qlower(["run", str(net), "--inputs", str(inputs), "-o", str(result)])
    if code != 0:
        return "run: " + _first_error(text)
    with np.load(result) as z:
        have = z[z.files[0]].astype(np.float64)
    if have.shape != want.shape:
        return f"mismatch: shape {have.shape} vs torch {want.shape}"
    rel = float(np.max(np.abs(have - want)) / max(np.max(np.abs(want)), 1e-30))
    return f"{'ok' if rel <= TOL[backend] else 'MISMATCH'} {rel:.1e}"


def _export(wrapped, feeds: dict, key: str, path: Path, legacy: bool) -> str:
    """Export with the dynamo exporter, or the TorchScript one where dynamo cannot (T5); returns which."""
    import torch

    for dynamo in ([False] if legacy else [True, False]):
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(wrapped, tuple(feeds.values()), str(path), input_names=list(feeds),
                                  output_names=[key], dynamo=dynamo, opset_version=18 if dynamo else 17)
            return "dynamo" if dynamo else "legacy"
        except Exception:
            if not dynamo or legacy:
                raise
    raise AssertionError("unreachable")


def main(argv=None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="cpu,htp")
    p.add_argument("--only", default=None)
    p.add_argument("--legacy", action="store_true", help="export with the TorchScript exporter (dynamo=False)")
    p.add_argument("--with-mask", action="store_true", help="decoders also take a padded attention_mask")
    p.add_argument("--keep", default=None, help="keep exported models and artifacts here")
    args = p.parse_args(argv)
    backends = args.backends.split(",")
    archs = architectures(args.with_mask)
    chosen = args.only.split(",") if args.only else list(archs)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="onnx_zoo_"))
    rows = []
    for name in chosen:
        torch.manual_seed(0)
        work = root / name
        work.mkdir(parents=True, exist_ok=True)
        try:
            model, feeds, key = archs[name]()
            model.eval()
            wrapped = _Wrap(model, key)
            wrapped.names = list(feeds)
            with torch.no_grad():
                want = wrapped(*feeds.values()).double().numpy()
            path = work / f"{name}.onnx"
            exporter = _export(wrapped, feeds, key, path, legacy=args.legacy)
        except Exception as exc:  # an export failure is a cell result, not a crash of the runner
            rows.append((name, [f"export: {type(exc).__name__}: {str(exc)[:120]}"] * len(backends)))
            continue
        np_feeds = {k: v.numpy() for k, v in feeds.items()}
        rows.append((f"{name} ({exporter})", [run_cell(path, np_feeds, want, b, work) for b in backends]))
        print(f"{name:<12}" + "  ".join(f"{b}: {c}" for b, c in zip(backends, rows[-1][1])), flush=True)
    print()
    print(f"| model | {' | '.join(backends)} |")
    print("|---|" + "---|" * len(backends))
    for name, cells in rows:
        print(f"| {name} | {' | '.join(cells)} |")
    ok = sum(c.startswith("ok") for _, cells in rows for c in cells)
    print(f"\n{ok} of {sum(len(c) for _, c in rows)} cells ok (exporter: {'legacy' if args.legacy else 'dynamo'})")
    return 0 if ok == sum(len(c) for _, c in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
