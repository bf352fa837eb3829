"""The QNN→QNN cleanup phase: rules rooted at QNN ops, run after lowering."""

from __future__ import annotations

import pytest

import qlower
from qlower.diagnostics import QlowerError


def _errors(tmp_path, text: str) -> list[str]:
    (tmp_path / "r.qpat").write_text(text)
    try:
        qlower.load_rules([tmp_path / "r.qpat"], cleanup=False)
    except QlowerError as exc:
        return [d.code for d in exc.diagnostics if d.is_error]
    return []


def test_a_cleanup_rule_cannot_emit_source_ops(tmp_path):
    text = "op m.Neg(x) -> y\n\nrule r {\n  match y = qnn.Relu(x)\n  emit y = m.Neg(x)\n}\n"
    assert _errors(tmp_path, text) == ["cleanup-emits-source"]


def test_a_rule_roots_at_qnn_ops_or_at_none(tmp_path):
    text = "op m.Neg(x) -> y\n\nrule r {\n  match y = qnn.Relu | m.Neg(x)\n  emit y = qnn.Sigmoid(x)\n}\n"
    assert _errors(tmp_path, text) == ["mixed-root"]


def test_channel_first_sandwiches_of_a_cnn_are_removed(tmp_path):
    torch = pytest.importorskip("torch", reason="needs the torch extra (pip install 'qlower[torch]')")
    pytest.importorskip("onnx", reason="needs the onnx extra (pip install 'qlower[onnx]')")
    from qlower.frontends.onnx_frontend import load_onnx

    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 8, 8)
    torch.onnx.export(m, (x,), tmp_path / "cnn.onnx", dynamo=False)
    counts = {}
    for cleanup in (False, True):
        result = qlower.lower(load_onnx(tmp_path / "cnn.onnx"), qlower.load_rules(packs=["onnx"], cleanup=cleanup),
                              backend="cpu")
        result.raise_for_errors()
        counts[cleanup] = result.qnn_op_counts().get("Transpose", 0)
    assert counts[False] == 8 and counts[True] == 2  # one into channel-last at the input, one out at the output
