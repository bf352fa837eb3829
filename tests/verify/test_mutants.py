"""A rule test must be able to fail: known-wrong lowerings (the bug classes
hand-written visitors shipped) are caught by the shipped test blocks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qlower.api import load_rules
from qlower.verify.testcase import RuleTestFailure, RuleTest

PACK = Path(__file__).resolve().parents[2] / "patterns" / "mllm"

MUTANTS = {
    # a single Tile on the operand: tile order (h0, h1, h0, h1), the GQA head-order bug
    "repeat_without_unit_axis": ("repeat.qpat", "repeat_interleave", """
    t = qnn.Reshape(x) : shape [prod(s[:d]), s[d], 1, prod(s[d + 1:])]
    u = qnn.Tile(t) { multiples: [1, 1, n, 1] }
    y = qnn.Reshape(u)""", """
    t = qnn.Reshape(x) : shape [prod(s[:d]), 1, s[d], prod(s[d + 1:])]
    u = qnn.Tile(t) { multiples: [1, n, 1, 1] }
    y = qnn.Reshape(u)"""),
    # transpose flags dropped
    "matmul_drops_transpose": ("matmul.qpat", "matmul_transposed",
                               "emit y = qnn.MatMul(a, b) { transpose_in0: ta, transpose_in1: tb }",
                               "emit y = qnn.MatMul(a, b) { transpose_in0: false, transpose_in1: tb }"),
    # SiLU lowered to the wrong op
    "silu_wrong_op": ("elementwise.qpat", "silu",
                      "    s = qnn.Sigmoid(x) : encoding quant_unit()\n    y = qnn.ElementWiseMultiply(x, s)",
                      "    s = qnn.Tanh(x) : encoding quant_unit()\n    y = qnn.ElementWiseMultiply(x, s)"),
    # VisionRoPE with sin and cos swapped
    "vision_rope_swapped_tables": ("rope.qpat", "vision_rope",
                                   "    sn = qnn.Reshape(sin) : shape [1, s[1], 1, h]\n"
                                   "    cs = qnn.Reshape(cos) : shape [1, s[1], 1, h]",
                                   "    sn = qnn.Reshape(cos) : shape [1, s[1], 1, h]\n"
                                   "    cs = qnn.Reshape(sin) : shape [1, s[1], 1, h]"),
    # a Transpose with its dims not normalised: perm of the wrong dims
    "transpose_wrong_perm": ("shape.qpat", "transpose",
                             "-> qnn.Transpose(x) { perm: swap_perm(rank(x), a, b) }",
                             "-> qnn.Transpose(x) { perm: swap_perm(rank(x), 0, b) }"),
}


def _mutated_pack(tmp_path: Path, file: str, old: str, new: str) -> Path:
    dst = tmp_path / "mllm"
    shutil.copytree(PACK, dst)
    text = (dst / file).read_text()
    assert old in text, f"the mutant's source text is no longer in {file}"
    (dst / file).write_text(text.replace(old, new, 1))
    return dst


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_caught(tmp_path: Path, mutant: str) -> None:
    file, test_name, old, new = MUTANTS[mutant]
    rules = load_rules([_mutated_pack(tmp_path, file, old, new)])
    test = next(t for t in rules.ruleset.tests if t.name == test_name)  # a copy: a user folder, no pack
    with pytest.raises(RuleTestFailure, match="differs from the source semantics|emitted"):
        RuleTest(test, rules, file).run(examples=10)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_unmutated_rule_passes(mutant: str) -> None:
    file, test_name, _, _ = MUTANTS[mutant]
    rules = load_rules([PACK])
    test = next(t for t in rules.ruleset.tests if t.name == f"mllm.{test_name}")
    RuleTest(test, rules, file).run(examples=5)
