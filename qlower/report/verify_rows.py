"""Reading per-op verification rows for the report's verification panel.

The rows come from the verification debugger's JSON (a list of objects, or an
object holding that list under `rows` or `ops`); each row is shown as is, the
`VERIFY_COLUMNS` first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qlower.diagnostics import QlowerError, error


def _debug_row(op: dict[str, Any]) -> dict[str, Any]:
    """One op of `qlower debug`'s JSON (qlower-debug/1) as a panel row."""
    local, cumulative = op.get("local") or {}, op.get("cumulative") or {}
    rule = op.get("rule")
    return {"source_op": op.get("node"), "type": op.get("op"),
            "rule": f"{rule} ({op['location']})" if rule and op.get("location") else rule,
            "local_error": local.get("error"), "cumulative_error": cumulative.get("error"),
            "tolerance": local.get("bound", cumulative.get("bound")), "verdict": op.get("verdict"),
            "note": op.get("note")}


def rows_of(doc: Any, where: str) -> list[dict[str, Any]]:
    """The row list inside a verification JSON document; QlowerError when it has none."""
    if isinstance(doc, dict) and str(doc.get("format", "")).startswith("qlower-debug/") \
            and isinstance(doc.get("ops"), list):
        return [_debug_row(op) for op in doc["ops"] if isinstance(op, dict)]
    if isinstance(doc, dict):
        doc = next((doc[k] for k in ("rows", "ops") if isinstance(doc.get(k), list)), doc)
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise QlowerError(error(f"{where}: expected a list of row objects (or {{\"rows\": [...]}})",
                                code="verify-table"))
    return [dict(r) for r in doc]


def load_verification(path: str | Path) -> list[dict[str, Any]]:
    """Rows from a JSON file; unreadable or malformed files are the user's error."""
    p = Path(path)
    try:
        if not p.is_file():  # (a FIFO would block the read forever)
            raise QlowerError(error(f"cannot read {p}: not a regular file", code="io"))
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise QlowerError(error(f"cannot read {p}: {exc.strerror or exc}", code="io")) from None
    except UnicodeDecodeError as exc:
        raise QlowerError(error(f"{p}: not valid JSON: not UTF-8 (byte {exc.start})", code="verify-table")) from None
    except json.JSONDecodeError as exc:
        raise QlowerError(error(f"{p}: not valid JSON: {exc}", code="verify-table")) from None
    except RecursionError:
        raise QlowerError(error(f"{p}: not valid JSON: nested too deeply", code="verify-table")) from None
    return rows_of(doc, str(p))
