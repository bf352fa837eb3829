"""`compute SRC... as DST [for OPS] [backends(...)]` declarations: parsed, checked, formatted, collected."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.diagnostics import QlowerError
from qlower.lang.formatter import format_text
from qlower.lang.loader import load_rules

TEXT = """\
# Narrow integers compute in int32.
compute i8, u16 as i32 for qnn.ElementWiseGreater, qnn.Reshape backends(cpu)

compute f16 as f32
"""


def test_compute_declarations_are_collected_in_order(tmp_path: Path) -> None:
    (tmp_path / "c.qpat").write_text(TEXT)
    rs = load_rules([tmp_path / "c.qpat"])
    first, second = rs.computes
    assert (first.sources, first.target, first.ops, first.backends) == (
        ("i8", "u16"), "i32", ("qnn.ElementWiseGreater", "qnn.Reshape"), ("cpu",))
    assert first.doc == "Narrow integers compute in int32."
    assert (second.sources, second.target, second.ops, second.backends) == (("f16",), "f32", (), None)


def test_compute_declarations_format_canonically_and_stably() -> None:
    assert format_text(TEXT) == TEXT
    messy = "compute   i8,u8   as i32  for qnn.Reshape ,qnn.Transpose\n"
    assert format_text(messy) == "compute i8, u8 as i32 for qnn.Reshape, qnn.Transpose\n"


@pytest.mark.parametrize("text, code", [
    ("compute i9 as i32\n", "unknown-dtype"),
    ("compute i32 as int32\n", "type-mismatch"),
    ("compute i8 as i32 for qnn.NoSuchOp\n", "unknown-op"),
    ("compute i8 as i32 backends(xpu)\n", "unknown-backend"),
])
def test_bad_compute_declarations_are_errors(tmp_path: Path, text: str, code: str) -> None:
    (tmp_path / "bad.qpat").write_text(text)
    with pytest.raises(QlowerError) as exc:
        load_rules([tmp_path / "bad.qpat"])
    assert code in [d.code for d in exc.value.diagnostics if d.is_error]
