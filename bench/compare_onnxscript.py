"""The comparison job with onnxscript's pattern rewriter on the ONNX form of W(B).

Rules: Mul(h, Sigmoid(h)) → one fused op (custom domain), MatMul → one custom
op; applied to fixpoint with `RewriteRuleSet.apply_to_model`. Also times a
whole process that loads the ONNX file with onnx_ir, rewrites it and saves it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def _rules():
    from onnxscript.rewriter import pattern

    def silu_target(op, h):
        return op.Mul(h, op.Sigmoid(h))

    def silu_replace(op, h):
        return op.FusedSiLU(h, _domain="bench")

    def mm_target(op, x, w):
        return op.MatMul(x, w)

    def mm_replace(op, x, w):
        return op.CustomMatMul(x, w, _domain="bench")

    return pattern.RewriteRuleSet([pattern.RewriteRule(silu_target, silu_replace),
                                   pattern.RewriteRule(mm_target, mm_replace)], commute=True)


def rewrite_time(model_path: Path) -> dict:
    import onnx_ir as ir

    model = ir.load(str(model_path))
    rules = _rules()
    t = time.perf_counter()
    while rules.apply_to_model(model):
        pass
    rewrite = time.perf_counter() - t
    script = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r});"
              "import onnx_ir as ir; from compare_onnxscript import _rules;"
              f"m = ir.load({str(model_path)!r}); r = _rules()\n"
              "while r.apply_to_model(m): pass\n"
              f"ir.save(m, {str(model_path.with_suffix('.rewritten.onnx'))!r})")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True)
    return {"rewrite": rewrite, "process": time.perf_counter() - t}
