"""Audit: which ATen ops the aten pack lowers at rank 5 on HTP (where many QNN ops stop at rank 4).

    python bench/aten_htp_rank.py [--rank 5] [--ops neg,exp,...]

Each op is a one-line torch module on a random input of the given rank, exported with torch.export
(and again after run_decompositions()), lowered for HTP and validated against HTP's op definitions.
Prints the ops that do not lower or validate, with the first reason; with --verify each lowered graph
is also run with the reference kernels and compared with the source semantics (`lower(verify=True)`).
Not part of the test run.
"""

from __future__ import annotations

import argparse
import sys
import warnings


def _cases(torch):
    F = torch.nn.functional
    return {
        "neg": lambda x: -x, "exp": torch.exp, "log": lambda x: (x * x + 1).log(), "sqrt": lambda x: (x * x).sqrt(),
        "rsqrt": lambda x: (x * x + 1).rsqrt(), "abs": torch.abs, "sin": torch.sin, "cos": torch.cos,
        "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu, "silu": F.silu, "relu": torch.relu,
        "hardswish": F.hardswish, "clamp": lambda x: x.clamp(-1, 1),
        "add": lambda x: x + 1, "mul_bcast": lambda x: x * x[:, :1], "div": lambda x: x / 3,
        "maximum": lambda x: torch.maximum(x, x[:, :1]), "eq": lambda x: (x == 0).float(),
        "where": lambda x: torch.where(x > 0, x, 0.0), "to_f16": lambda x: x.half().float(),
        "softmax": lambda x: x.softmax(-1), "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
        "rms_norm": lambda x: x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt(),
        "sum": lambda x: x.sum(-1), "amax": lambda x: x.amax(-1), "cumsum": lambda x: x.cumsum(-1),
        "matmul": lambda x: x @ x.transpose(-1, -2), "linear": lambda x: F.linear(x, torch.ones(3, x.shape[-1])),
        "permute": lambda x: x.permute(*range(x.dim() - 2), x.dim() - 1, x.dim() - 2),
        "pad": lambda x: F.pad(x, (1, 1)), "cat": lambda x: torch.cat([x, x], 2),
        "expand": lambda x: x[:, :1].expand(*x.shape),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rank", type=int, default=5)
    ap.add_argument("--ops", default="")
    ap.add_argument("--verify", action="store_true", help="also compare the numbers with the source semantics")
    args = ap.parse_args(argv)
    import torch

    import qlower
    from qlower.frontends.torch_frontend import load_exported

    warnings.simplefilter("ignore")
    rules = qlower.load_rules(packs=["aten"])
    cases = _cases(torch)
    chosen = [o for o in args.ops.split(",") if o] or list(cases)
    x = torch.randn(*([2, 3, 2, 4, 5, 2, 2][:args.rank]))

    class M(torch.nn.Module):
        def __init__(self, f) -> None:
            super().__init__()
            self.f = f

        def forward(self, x):
            return self.f(x)

    bad = 0
    for name in chosen:
        for core in (False, True):
            try:
                ep = torch.export.export(M(cases[name]), (x,), strict=False)
                if core:
                    ep = ep.run_decompositions()
                result = qlower.lower(load_exported(ep), rules, backend="htp", verify=args.verify)
                reason = "" if result.ok else next(str(d).splitlines()[0] for d in result.diagnostics if d.is_error)
                if not reason and result.verification is not None and not result.verification.passed:
                    reason = "verification failed: " + result.verification.summary().splitlines()[0]
            except Exception as exc:  # noqa: BLE001 - the audit reports every failure
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            if reason:
                bad += 1
                print(f"{name:12s} {'export-core' if core else 'export':12s} {reason[:200]}")
    what = "lower, validate and verify" if args.verify else "lower and validate"
    print(f"{bad} of {2 * len(chosen)} (op, export path) pairs do not {what} on HTP at rank {args.rank}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
