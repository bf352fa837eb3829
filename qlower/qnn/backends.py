"""The QNN backends qlower targets: one list, which the OpDef supplements, the checker, the API and the CLI share.

Each backend has a supplement file `<backend>.xml` beside `master.xml` in qlower/qnn/opdefs.
"""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("cpu", "gpu", "htp", "dsp", "lpai")


def runs_float_in_float16(backend: str | None) -> bool:
    """HTP's float path is FLOAT_16: a float32 graph lowered for it is retyped (qlower.qnn.precision)."""
    return backend == "htp"
