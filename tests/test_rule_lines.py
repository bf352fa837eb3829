"""tools/rule_lines.py: rule lines per pack and per root op type, against a base git revision."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[1] / "tools" / "rule_lines.py"
_spec = importlib.util.spec_from_file_location("rule_lines", _PATH)
rule_lines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rule_lines)

# Each snippet with the rule lines it must count (code lines of rules, maps and fragments).
RULE_COMMENTS = ('''# Doc comment: not counted.
rule neg {
  # a comment inside: not counted

  match y = demo.Neg(x)   # trailing comment: the line counts
  emit y = qnn.ElementWiseNeg(x)
}
''', 4)
RULE_STRINGS = ('''rule odd {
  match y = demo.Odd(x)
  fail "braces { and } and # in a string {"
}
''', 4)
MAP_ONE = ("map demo.Abs(x) -> qnn.ElementWiseAbs(x) tested f32[2, 3]\n", 1)
MAP_MULTI = ('''map rmin: demo.ReduceMin(x) { dim: d } -> qnn.ReduceMin(x) {
  axes: [d],
  keep_dims: true,
}
''', 4)
ALT = ('''rule minmax {
  match y = demo.Max | demo.Min(a, b)
  let k = ["MAXIMUM", "MINIMUM"][index_of(["demo.Max", "demo.Min"], optype(y))]
  emit y = qnn.ElementWiseBinary(a, b) { operation: k }
}
''', 5)
FRAGMENT = ('''fragment to_nhwc(x) -> xt {
  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
}
''', 3)
NOT_COUNTED = ('''op demo.Neg(x) -> y
compute i8 as i32 for qnn.ElementWiseNeg
test neg {
  input x: f32[2]
  graph y = demo.Neg(x)
  expect ops qnn.ElementWiseNeg
}
''', 0)
SNIPPETS = [RULE_COMMENTS, RULE_STRINGS, MAP_ONE, MAP_MULTI, ALT, FRAGMENT, NOT_COUNTED]


@pytest.mark.parametrize(("text", "lines"), SNIPPETS)
def test_each_item_kind_counts_its_code_lines(text, lines):
    assert rule_lines.rule_lines(text) == lines


def test_items_name_their_root_op_types():
    got = {i.name: (i.kind, i.roots, i.lines)
           for text, _ in SNIPPETS for i in rule_lines.items(text)}
    assert got == {
        "neg": ("rule", ("demo.Neg",), 4),
        "odd": ("rule", ("demo.Odd",), 4),
        "abs": ("map", ("demo.Abs",), 1),
        "rmin": ("map", ("demo.ReduceMin",), 4),
        "minmax": ("rule", ("demo.Max", "demo.Min"), 5),
        "to_nhwc": ("fragment", (), 3),
    }


def test_alternatives_split_evenly_and_fragments_stand_apart():
    pack = rule_lines.pack_lines([("a.qpat", ALT[0] + FRAGMENT[0]), ("b.qpat", RULE_COMMENTS[0] + MAP_ONE[0])])
    assert pack.by_op == {"demo.Max": 2.5, "demo.Min": 2.5, "demo.Neg": 4.0, "demo.Abs": 1.0}
    assert pack.items_by_op == {"demo.Max": 1, "demo.Min": 1, "demo.Neg": 1, "demo.Abs": 1}
    assert pack.fragments == 3
    assert pack.total == 13


# Two one-op rules of a demo dialect: the base pack of the comparison tests.
MAX_MIN = '''
rule max {
  match y = demo.Max(a, b)
  emit y = qnn.ElementWiseMaximum(a, b)
}

rule min {
  match y = demo.Min(a, b)
  emit y = qnn.ElementWiseMinimum(a, b)
}
'''


def test_comparison_splits_base_and_new_op_types():
    then = rule_lines.pack_lines([("t.qpat", RULE_COMMENTS[0] + MAX_MIN)])
    now = rule_lines.pack_lines([("n.qpat", ALT[0] + FRAGMENT[0] + MAP_ONE[0])])
    c = rule_lines.Comparison(then, now)
    assert c.base_ops == ("demo.Max", "demo.Min", "demo.Neg")
    assert c.new_ops == ("demo.Abs",)
    assert (c.base_then, c.base_now) == (12, 5)  # Neg dropped (0 now), Max and Min merged
    assert c.new_now == 1
    assert (then.total, now.total) == (12, 9)


_FILLER = st.sampled_from(["", "# a comment", "   ", "#"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SNIPPETS), st.lists(_FILLER, max_size=3)), max_size=6))
def test_total_is_the_sum_of_items_whatever_lies_between(parts):
    """Blank and comment lines between items never count, and the per-op split adds up to the total."""
    text = "".join(snippet + "\n".join(fill) + "\n" for (snippet, _), fill in parts)
    assert rule_lines.rule_lines(text) == sum(n for (_, n), _ in parts)
    pack = rule_lines.pack_lines([("f.qpat", text)])
    assert pack.total == pytest.approx(rule_lines.rule_lines(text))


def test_syntax_error_is_located():
    with pytest.raises(rule_lines.QlowerError) as err:
        rule_lines.rule_lines("rule broken {\n  match y = \n}\n")
    assert "<string>:" in str(err.value)


# --- the command, on a pack folder in a scratch git repository ------------------------------

def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed (rule_lines.py --base reads revisions with git)")
    root = tmp_path / "patterns"
    (root / "demo").mkdir(parents=True)
    (root / "demo" / "ops.qpat").write_text(RULE_COMMENTS[0] + MAX_MIN)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "base")
    (root / "demo" / "ops.qpat").write_text(RULE_COMMENTS[0] + ALT[0] + FRAGMENT[0])
    (root / "demo" / "more.qpat").write_text(MAP_ONE[0] + MAP_MULTI[0])
    (root / "extra").mkdir()
    (root / "extra" / "x.qpat").write_text(RULE_STRINGS[0])
    return root


def test_totals_per_pack(repo, capsys):
    assert rule_lines.main(["rule_lines.py", str(repo)]) == 0
    assert capsys.readouterr().out.splitlines() == ["demo\t17", "extra\t4", "total\t21"]


def test_base_comparison(repo, capsys):
    assert rule_lines.main(["rule_lines.py", str(repo), "--base", "HEAD", "--by-op"]) == 0
    out = capsys.readouterr().out
    demo = out.split("\ndemo\n")[1].split("\nextra\n")[0].splitlines()
    assert [line.split() for line in demo[:4]] == [
        "(a) op types lowered at base 3 ops then 12 now 9".split(),
        "(b) op types new since base 2 ops then 0 now 5".split(),
        "fragments then 0 now 3".split(),
        "(c) total then 12 now 17".split(),
    ]
    rows = {line.split()[0]: line.split()[1:] for line in demo[5:]}
    assert rows == {"demo.Neg": ["4", "4", "1"], "demo.ReduceMin": ["-", "4", "1"],
                    "demo.Max": ["4", "2.5", "1"], "demo.Min": ["4", "2.5", "1"],
                    "demo.Abs": ["-", "1", "1"]}
    extra = out.split("\nextra\n")[1].splitlines()
    assert extra[1].split()[-1] == "4" and extra[0].split()[-1] == "0"  # all new: nothing at base


def test_only_named_packs(repo, capsys):
    assert rule_lines.main(["rule_lines.py", str(repo), "--pack", "extra"]) == 0
    assert capsys.readouterr().out.splitlines() == ["extra\t4", "total\t4"]


@pytest.mark.parametrize(("args", "message"), [
    (["--base", "no-such-rev"], "no-such-rev"),
    (["--pack", "nope"], "no pack nope"),
])
def test_user_errors_exit_1(repo, capsys, args, message):
    assert rule_lines.main(["rule_lines.py", str(repo), *args]) == 1
    assert message in capsys.readouterr().err


def test_syntax_error_in_a_pack_exits_1_with_its_location(repo, capsys):
    (repo / "extra" / "bad.qpat").write_text("rule r {\n  match y = \n}\n")
    assert rule_lines.main(["rule_lines.py", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "bad.qpat:" in err and "Traceback" not in err


def test_shipped_packs_roots_match_the_loaded_rules():
    """Every rule the loader sees in a shipped pack is counted under its root's op types."""
    from qlower.lang.parser import parse
    root = Path(__file__).resolve().parents[1] / "patterns"
    for f in sorted(root.rglob("*.qpat")):
        text = f.read_text(encoding="utf-8")
        rules = parse(text, str(f)).rules
        counted = [(i.name, i.roots) for i in rule_lines.items(text, str(f)) if i.kind in ("rule", "map")]  # fragments and defs have no root
        assert counted == [(r.name, r.matches[0].pattern.op_types) for r in rules], f
