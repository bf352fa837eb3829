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
