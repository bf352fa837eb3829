"""Converter-IR node types in `_net.json` and the QNN ops they stand for.

The QNN converters write some nodes under their IR type (`Eltwise_Binary`,
`Pool`, `Reduce`, ...) and name the QNN op through a type param; the `.cpp`
they write next to it uses the QNN op. The table is data (ir_types.json, every
rule citing where it was seen), so a new converter spelling is a data change.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

_TABLE = Path(__file__).with_name("ir_types.json")


@attrs.frozen
class IrRule:
    """One way an IR type names its QNN op: through `param`'s value, or as the fixed `qnn_op`."""

    ir_type: str
    param: str
    qnn_op: str | None  # None: the param's string value is the QNN op name
    source: str

    @property
    def keeps_param(self) -> bool:
        """A fixed-op rule's param is that op's own param (`operation`); a value rule's param is meta."""
        return self.qnn_op is not None


@attrs.frozen
class IrTypes:
    rules: Mapping[str, tuple[IrRule, ...]]
    meta_params: frozenset[str]

    def rule_for(self, node_type: str, params: Mapping[str, Any]) -> IrRule | None:
        """The rule naming this node's QNN op; None when `node_type` is not an IR type or no rule's param is set."""
        return next((r for r in self.rules.get(node_type, ()) if r.param in params), None)

    def is_ir_type(self, node_type: str) -> bool:
        return node_type in self.rules


def parse(doc: Any, where: str = "ir_types.json") -> IrTypes:
    """Check and build the table; ValueError names the entry at fault (the shipped file is checked by a test)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("ir_types"), dict) \
            or not isinstance(doc.get("meta_params"), dict):
        raise ValueError(f"{where}: needs `ir_types` and `meta_params` objects")
    for name, source in doc["meta_params"].items():
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"{where}: meta param {name} needs a `source`")
    rules: dict[str, tuple[IrRule, ...]] = {}
    for ir_type, entries in doc["ir_types"].items():
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{where}: {ir_type} needs a non-empty list of rules")
        out = []
        for i, e in enumerate(entries):
            at = f"{where}: {ir_type}[{i}]"
            if not isinstance(e, dict) or set(e) - {"param", "qnn_op", "op_from_value", "source"}:
                raise ValueError(f"{at}: keys are param, qnn_op or op_from_value, source")
            if not isinstance(e.get("param"), str) or not isinstance(e.get("source"), str) or not e["source"].strip():
                raise ValueError(f"{at}: needs `param` and a `source`")
            fixed, from_value = e.get("qnn_op"), e.get("op_from_value") is True
            if (fixed is None) == (not from_value) or (fixed is not None and not isinstance(fixed, str)):
                raise ValueError(f"{at}: give exactly one of `qnn_op` (a name) or `op_from_value: true`")
            out.append(IrRule(ir_type, e["param"], fixed, e["source"]))
        rules[ir_type] = tuple(out)
    return IrTypes(rules, frozenset(doc["meta_params"]))


@functools.cache
def shipped() -> IrTypes:
    """The table qlower ships (read once; immutable)."""
    return parse(json.loads(_TABLE.read_text(encoding="utf-8")))
