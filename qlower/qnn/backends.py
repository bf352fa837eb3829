"""The QNN backends qlower targets, and the one backend-specific policy: one place, which the OpDef
registry, the checker, the API, the CLI and the tools share.

The list is the OpDef data's: one backend per supplement file `<backend>.xml` beside `master.xml`
in qlower/qnn/opdefs (QNN's `<SupplementalOpDefList Backend="...">`), so adding a supplement adds a
backend and nothing else names them. Sorted by name; read once, at import, from the package folder.
"""

from __future__ import annotations

from pathlib import Path

OPDEFS_DIR = Path(__file__).parent / "opdefs"
MASTER_FILE = "master.xml"

BACKENDS: tuple[str, ...] = tuple(sorted(p.stem for p in OPDEFS_DIR.glob("*.xml") if p.name != MASTER_FILE))

# Backends whose float path is FLOAT_16: a float32 graph lowered for them is retyped (qlower.qnn.precision).
FLOAT16_BACKENDS: frozenset[str] = frozenset({"htp"})


def runs_float_in_float16(backend: str | None) -> bool:
    """HTP's float path is FLOAT_16: a float32 graph lowered for it is retyped (qlower.qnn.precision)."""
    return backend in FLOAT16_BACKENDS
