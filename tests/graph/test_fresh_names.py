"""Fresh names: the smallest free `base_i`, however names come and go (the hints are only a cache)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph.core import Graph

BASES = ["x", "x_1", "y", "a_0"]


def naive(base: str, taken) -> str:
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "rename"]), st.sampled_from(BASES),
                          st.integers(0, 50)), max_size=80))
def test_fresh_names_are_the_smallest_free_suffix(steps):
    g = Graph()
    live = []
    for kind, base, k in steps:
        if kind == "add":
            want = naive(base, {v.name for v in g.values})
            assert g.fresh_value_name(base) == want
            live.append(g.add_value(want, "float32", [1]))
        elif kind == "remove" and live:
            g.remove_value(live.pop(k % len(live)))
        elif kind == "rename" and live:
            v = live[k % len(live)]
            g.rename_value(v, naive(f"r{k}", {u.name for u in g.values}))
