"""pytest plugin (entry point `pytest11`): every .qpat test block is a test item.

`pytest patterns/` collects `patterns/mllm/repeat.qpat::repeat_interleave`
and so on; a failure shows the rule, the backend, the (shrunk) inputs and
the max error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.diagnostics import QlowerError


def pytest_collect_file(parent, file_path: Path):
    if file_path.suffix == ".qpat":
        return QpatFile.from_parent(parent, path=file_path)
    return None


class QpatFile(pytest.File):
    def collect(self):
        from qlower.api import load_rules  # this module is an entry point, above the API
        from qlower.plugins import installed
        from qlower.verify.runner import load_for

        cache = self.config.stash.setdefault(_CACHE, {})
        try:
            rules = load_for(self.path, load_rules, (), cache, list(installed().packs.values()))
        except QlowerError as exc:
            raise self.CollectError(f"{self.path}: the rule set does not load:\n{exc.render()}") from None
        for t in rules.ruleset.tests:
            if Path(t.span.file).resolve() == self.path.resolve():
                yield QpatTest.from_parent(self, name=t.name, test=t, rules=rules)

    class CollectError(Exception):
        pass


class QpatTest(pytest.Item):
    def __init__(self, *, test, rules, **kw) -> None:
        super().__init__(**kw)
        self.test = test
        self.rules = rules

    def runtest(self) -> None:
        from qlower.verify.runner import default_examples
        from qlower.verify.testcase import RuleTest, missing_semantics, missing_semantics_reason

        missing = missing_semantics(self.test, self.rules)
        if missing:
            pytest.skip(missing_semantics_reason(missing))
        RuleTest(self.test, self.rules, str(self.path)).run(default_examples())

    def repr_failure(self, excinfo, style=None):
        from qlower.verify.testcase import RuleTestFailure

        if isinstance(excinfo.value, (RuleTestFailure, QlowerError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        line = self.test.span.line - 1 if self.test.span else 0
        return self.path, line, f"qpat test {self.name}"


_CACHE = pytest.StashKey[dict]()
