"""`qlower` imports its API on first use: what a bare `import qlower` reached before, it still reaches."""

from __future__ import annotations


def test_a_bare_import_of_qlower_still_reaches_its_api_and_subpackages():
    import subprocess
    import sys

    code = ("import qlower; print(qlower.lower.__module__, qlower.api.load_model.__name__, "
            "qlower.graph.Graph.__name__, hasattr(qlower, 'no_such_thing'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["qlower.api", "load_model", "Graph", "False"]
