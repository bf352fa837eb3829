"""The semantic checker: a PDLL-style failure corpus plus a few direct checks.

Each file in `failures/` is bad .qpat with its expected findings in comments:

    # expect: <severity> <line>:<col> <exact message>
    # expect-hint: <exact hint of the finding just above>

The file must produce exactly the expected (severity, line, col, message) set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qlower.lang.checker import check
from qlower.lang.loader import check_paths
from qlower.lang.parser import parse
from qlower.lang.registry import MinimalRegistry
from qlower.lang.builtins import builtin_functions

FAILURES = Path(__file__).parent / "failures"
_EXPECT = re.compile(r"#\s*expect:\s*(error|warning|note)\s+(\d+):(\d+)\s+(.*?)\s*$")
_HINT = re.compile(r"#\s*expect-hint:\s*(.*?)\s*$")


def _expectations(text: str) -> tuple[set[tuple[str, int, int, str]], dict[tuple[str, int, int, str], str]]:
    found: set[tuple[str, int, int, str]] = set()
    hints: dict[tuple[str, int, int, str], str] = {}
    last = None
    for line in text.splitlines():
        if m := _EXPECT.search(line):
            last = (m[1], int(m[2]), int(m[3]), m[4])
            found.add(last)
        elif (h := _HINT.search(line)) and last is not None:
            hints[last] = h[1]
    return found, hints


def _key(d) -> tuple[str, int, int, str]:
    return (str(d.severity), d.span.line if d.span else 0, d.span.column if d.span else 0, d.message)


@pytest.mark.parametrize("path", sorted(FAILURES.glob("*.qpat")), ids=lambda p: p.stem)
def test_failure_corpus(path: Path) -> None:
    expected, hints = _expectations(path.read_text(encoding="utf-8"))
    assert expected, f"{path.name} states no expectations"
    diags, _ = check_paths([path], registry=MinimalRegistry(), packs_dir=FAILURES / "packs")
    got = {_key(d) for d in diags if d.span is None or Path(d.span.file) == path}
    assert sorted(got) == sorted(expected)
    by_key = {_key(d): d for d in diags}
    for key, hint in hints.items():
        assert by_key[key].hint == hint, key
    assert all(d.code for d in diags), [str(d) for d in diags if not d.code]


def test_corpus_covers_every_code() -> None:
    from qlower.lang.checker import CODES

    seen = set()
    for path in FAILURES.glob("*.qpat"):
        diags, _ = check_paths([path], registry=MinimalRegistry(), packs_dir=FAILURES / "packs")
        seen |= {d.code for d in diags}
    assert seen <= set(CODES)
    assert set(CODES) - seen == {"io", "empty-folder"}  # loader-level, see test_loader.py


# ----------------------------------------------------------- direct checks

VALID = """
op mllm.Sigmoid(x) -> y
op mllm.Mul(a, b) -> y commutative
op mllm.Linear(x, w, b?) -> y { transpose: bool = false, out: dtype = f32 }
op mllm.Concat(xs...) -> y { axis: int = -1 }
op mllm.View(x) -> y { shape: list[int] }
op mllm.Pad(x) -> y { mode: str = "constant", amount: list[int] = [] }

rule silu benefit 3 backends(htp, cpu) {
  match y = mllm.Mul(x, s = mllm.Sigmoid(x) shared) commutative
  require rank(x) >= 2 and dtype(x) == f32 and uses(s) >= 1
  emit {
    t = qnn.Sigmoid(x) : shape shape(x), dtype dtype(x), encoding encoding(x)
    y = qnn.ElementWiseMultiply(x, t)
  }
}

rule linear {
  match y = mllm.Linear(x, w: const [_o, i], _) { transpose: t, out: dt }
  require (dt == f32 or dt == "float16") and i % 4 == 0
  emit y = qnn.MatMul(x, w) { transpose_in1: not t } : dtype dt
}

rule linear_bias {
  match y = mllm.Linear(x, w, b) { transpose: false }
  emit {
    m = qnn.MatMul(x, w)
    y = qnn.ElementWiseAdd(m, b)
  }
}

rule concat {
  match y = mllm.Concat(first, rest...) { axis: a }
  require len(rest) > 0 and min(a, 0) <= 0
  emit y = qnn.Concat(first, rest...) { axis: normdim(a, rank(first)) }
}

rule add_either {
  match y = mllm.Mul(x, (mllm.Sigmoid(h) | mllm.View(h)))
  emit {
    s = qnn.Sigmoid(h)
    y = qnn.ElementWiseMultiply(x, s)
  }
}

rule dag_mul {
  match y = mllm.Mul(a, b)
  match b = mllm.Sigmoid(a)
  emit y = qnn.ElementWiseMultiply(a, b)
}

rule identity_view {
  match y = mllm.View(x) { shape: s }
  require s == shape(x)
  emit y = x
}

rule view {
  match y = mllm.View(x) { shape: s }
  emit y = qnn.Reshape(x) : shape resolve_shape(s, numel(x))
}

rule pad_reflect {
  match y = mllm.Pad(_x) { mode: "reflect" }
  fail "reflect padding is not supported"
}

rule pad {
  match y = mllm.Pad(x) { mode: m, amount: a }
  emit {
    z = tensor(full([1], 0.5, f32)) : dtype f32, encoding quant(0.1, 0)
    p = qnn.Pad(x) { scheme: "edge" if m == "edge" else "CONSTANT", pad_amount: [a[0:2], a[2:4]] }
    y = qnn.ElementWiseAdd(p, z)
  }
}

rule sigmoid_f16 {
  match y = mllm.Sigmoid(x: f16 [n, ...])
  require n > 1
  emit {
    c = mllm.View(x) { shape: [-1] }
    y = mllm.Sigmoid(c)
  }
}

test silu backends(htp) {
  input x: u8[1, 2..8, 16] : encoding quant(0.05, 128)
  graph {
    s = mllm.Sigmoid(x)
    y = mllm.Mul(x, s)
  }
  expect ops qnn.Sigmoid, qnn.ElementWiseMultiply
  expect close atol 1e-3 rtol 0.01 steps 10
}

test linear_no_bias for linear {
  input x: f32[2, 3]
  const w: f32[4, 3] = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 2, 3]]
  graph y = mllm.Linear(x, w, _) { transpose: true, out: f16 }
  expect rule linear
  expect ops qnn.MatMul
}

test pad_reflect {
  input x: f32[2, 3]
  graph y = mllm.Pad(x) { mode: "reflect", amount: [0, 1, 0, 1] }
  expect error "not supported"
}
"""


def _check(text: str, registry=None, sources=True):
    from qlower.diagnostics import SourceCache

    cache = SourceCache()
    cache.add("v.qpat", text)
    return check([parse(text, "v.qpat")], registry=registry or MinimalRegistry(), functions=builtin_functions(),
                 sources=cache if sources else None)


def test_valid_rules_have_no_findings() -> None:
    diags = _check(VALID)
    assert [str(d) for d in diags] == []


def test_valid_rules_against_the_shipped_registry() -> None:
    from qlower.qnn.opdef import OpDefRegistry

    registry = OpDefRegistry.load()
    assert [str(d) for d in _check(VALID, registry)] == []


def test_without_sources_spans_fall_back_to_nodes() -> None:
    text = "op mllm.T(x) -> y\nrule t {\n  match y = mllm.T(x)\n  emit y = qnn.Sigmod(x)\n}\n"
    (d,) = _check(text, sources=False)
    assert (d.code, d.span.line, d.span.column) == ("unknown-target-op", 4, 8)  # the emit item, not the op name
    (d,) = _check(text)
    assert (d.span.line, d.span.column, d.span.end_column) == (4, 12, 22)


def test_findings_are_ordered_by_position() -> None:
    text = "rule b {\n  match y = mllm.B(x)\n  emit y = x\n}\nrule a {\n  match y = mllm.A(x)\n  emit y = x\n}\n"
    diags = _check(text)
    assert [(d.code, d.span.line) for d in diags] == [("unknown-op", 2), ("unknown-op", 6)]


def test_plugin_functions_are_known() -> None:
    from qlower.lang.functions import Function

    text = "op mllm.T(x) -> y\nrule t {\n  match y = mllm.T(x)\n  require ok(x, 2)\n  emit y = x\n}\n"
    functions = builtin_functions().extend([Function("ok", ("value", "int"), "bool", lambda v, n: True)])
    assert check([parse(text)], registry=MinimalRegistry(), functions=functions) == []
    (d,) = check([parse(text)], registry=MinimalRegistry(), functions=builtin_functions())
    assert d.code == "unknown-function"


def test_generated_modules_never_crash_the_checker() -> None:
    from hypothesis import HealthCheck, given, settings

    from tests.lang import strategies as S

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(S.modules, S.modules)
    def run(a, b) -> None:
        for d in check([a, b], registry=MinimalRegistry(), functions=builtin_functions()):
            assert d.code and d.message

    run()


def test_mutated_sources_never_crash_the_checker() -> None:
    """Lines dropped or duplicated at random: whatever still parses must check without raising."""
    import random

    from qlower.diagnostics import QlowerError, SourceCache

    rng = random.Random(7)
    texts = [VALID] + [p.read_text(encoding="utf-8") for p in sorted(FAILURES.glob("*.qpat"))]
    checked = 0
    for text in texts:
        lines = text.split("\n")
        for _ in range(10):
            mutated = list(lines)
            i = rng.randrange(len(mutated))
            if rng.random() < 0.5:
                del mutated[i]
            else:
                mutated.insert(rng.randrange(len(mutated)), mutated[i])
            source = "\n".join(mutated)
            try:
                module = parse(source, "m.qpat")
            except QlowerError:
                continue
            cache = SourceCache()
            cache.add("m.qpat", source)
            check([module], registry=MinimalRegistry(), functions=builtin_functions(), sources=cache)
            checked += 1
    assert checked > 50
