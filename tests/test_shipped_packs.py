"""The shipped rule packs are clean: they check without findings and are canonically formatted."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.cli.main import main

PATTERNS = Path(__file__).resolve().parents[1] / "patterns"
PACKS = sorted(p for p in PATTERNS.iterdir() if p.is_dir())


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_pack_checks_clean(pack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(pack)]) == 0
    out = capsys.readouterr()
    assert "0 error(s), 0 warning(s)" in out.out, out.err


@pytest.mark.parametrize("pack", PACKS, ids=lambda p: p.name)
def test_pack_is_formatted(pack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fmt", "--check", str(pack)]) == 0, capsys.readouterr().out


def test_every_rule_has_a_test() -> None:
    from qlower.api import load_rules

    for pack in PACKS:
        rules = load_rules([pack])
        tested = {t.rule_name for t in rules.ruleset.tests}
        for t in rules.ruleset.tests:
            tested.update(e.text for e in t.body if getattr(e, "kind", None) == "rule")
        untested = sorted(r.name for r in rules.ruleset.rules if r.name not in tested)
        assert not untested, f"{pack.name}: rules without a test block: {untested}"


def test_htp_rank_rules_root_on_exactly_the_ops_the_op_data_limits_to_rank_4() -> None:
    """patterns/qnn/htp_rank.qpat names its ops by hand (a rule's root types are static); the fact it
    relies on lives in the op data. Each rooted op must run on HTP and take rank 4 at most there,
    so the list and the data cannot drift apart."""
    from qlower.lang import ast
    from qlower.lang.parser import parse
    from qlower.qnn.opdef import OpDefRegistry

    registry = OpDefRegistry.load()
    path = PATTERNS / "qnn" / "htp_rank.qpat"
    roots = {t for item in parse(path.read_text(encoding="utf-8"), str(path)).items
             if isinstance(item, ast.Rule) for m in item.matches for t in m.pattern.op_types}
    assert len(roots) > 30
    for root in sorted(roots):
        name = root.removeprefix("qnn.")
        limits = [c.fields["max"] for c in registry.checks(name, "htp")
                  if c.kind == "rank" and c.target == "in[0]" and c.fields.get("max") is not None]
        assert registry.supported(name, "htp"), f"{root} does not run on HTP"
        assert min(limits, default=None) == 4, f"{root}: HTP's rank limit in the op data is {limits or 'none'}, not 4"
