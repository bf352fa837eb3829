"""The shared tree walks (`ast.iter_nodes`, `ast.map_children`) every rewrite and search of a tree uses."""

from __future__ import annotations

import attrs
from hypothesis import given

from qlower.lang import ast
from tests.lang.strategies import exprs


def _by_hand(x) -> list:
    """Every node of `x`, parents first, walked field by field (what the five old walkers did)."""
    out = [x]
    for f in attrs.fields(type(x)):
        v = getattr(x, f.name)
        for i in v if isinstance(v, tuple) else (v,):
            if attrs.has(type(i)) and not isinstance(i, ast.Span):
                out.extend(_by_hand(i))
    return out


@given(exprs)
def test_iter_nodes_visits_every_node_once_parents_first(e) -> None:
    assert [id(n) for n in ast.iter_nodes(e)] == [id(n) for n in _by_hand(e)]
    assert list(ast.iter_nodes((e, None, e))) == [*_by_hand(e), *_by_hand(e)]


@given(exprs)
def test_map_children_keeps_a_node_fn_does_not_change_and_rebuilds_one_it_does(e) -> None:
    assert ast.map_children(e, lambda c: c) is e

    def rename(x):
        return attrs.evolve(x, id=x.id + "_") if isinstance(x, ast.Name) else ast.map_children(x, rename)

    got = rename(e)
    names = [n.id for n in ast.iter_nodes(e) if isinstance(n, ast.Name)]
    assert [n.id for n in ast.iter_nodes(got) if isinstance(n, ast.Name)] == [n + "_" for n in names]
    assert (got is e) == (not names)
