"""Turn one documented constraint (a bullet of the SDK's OpDef HTML) into qlower checks.

``classify`` returns the structured checks a constraint states (see the constraints file schema
in ``qlower/qnn/opdefs/README.md``) or, when qlower does not model it, the reason category. The
patterns cover the phrasings the SDK 2.25 documentation uses; anything else falls through to a
"not modelled" category, so nothing is silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

NOT_MODELLED = {
    "quantization": "states a quantization-encoding requirement (scale, offset, symmetry, axis, bit width); "
                    "qlower validates datatypes and shapes, not encoding parameters",
    "dynamic-shape": "about dynamic dimensions; qlower graphs have static shapes, so it holds trivially",
    "sparse": "about sparse tensors, which qlower graphs do not represent",
    "tensor-data": "depends on the values inside a tensor (indices, uniqueness, sums); validation reads "
                   "datatypes and shapes only",
    "shape-relation": "a relation between dimensions of several tensors or params; checked by qlower's shape "
                      "inference where the op has a shape rule, not as a constraint",
    "value-relation": "a relation between several params or a param and dimensions that the constraint "
                      "schema has no form for",
    "description": "descriptive text in the Constraints column, not a constraint",
    "conditional": "applies under a condition on another param or on the input size that the constraint "
                   "schema has no form for",
    "category-datatypes": "datatype lists per operation category (numerical/comparison/logical) whose "
                          "category membership the documentation does not define",
    "empty": "the documentation's bullet is empty",
    "unmapped-target": "names an input, output or param the master definition does not have",
    "duplicate-config": "the supplement lists this configuration in two table rows with conflicting limits; "
                        "qlower keeps the first row's",
    "other": "free-text constraint qlower does not interpret",
}

_FLOAT = ["QNN_DATATYPE_FLOAT_16", "QNN_DATATYPE_FLOAT_32"]
_ORDINAL = {"first": "in[0]", "second": "in[1]", "third": "in[2]"}
_ALIASES = {"RELUMINMX": "RELU_MIN_MAX", "SQUAREROOT": "SQRT"}


def _nums(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _rank_range(values: Sequence[int]) -> dict[str, Any]:
    vals = sorted(set(values))
    if vals == list(range(vals[0], vals[-1] + 1)):
        return {"min": vals[0], "max": vals[-1]}
    return {"ranks": vals}


class Classifier:
    """Classifies the constraints of one op; knows its enum names to resolve operation lists."""

    def __init__(self, op: str, enums: Mapping[str, Sequence[str]], datatypes: Sequence[str]) -> None:
        self.op = op
        self.enums = enums
        self.datatypes = set(datatypes)

    # -------------------------------------------------------------- helpers

    def operation(self, name: str) -> str | None:
        """An `operation` enum name from the documentation's spelling (Rsqrt, ElementWiseAdd, RELUMINMAX)."""
        names = self.enums.get("operation") or []
        key = re.sub(r"^ElementWise", "", name.strip(), flags=re.I)
        key = re.sub(r"[^A-Za-z]", "", key).upper()
        key = _ALIASES.get(key, key)
        for n in names:
            if n.replace("_", "") == key.replace("_", ""):
                return n
        return None

    def operations(self, text: str) -> list[str] | None:
        parts = [p for p in re.split(r",|\band\b", text) if p.strip()]
        ops = [self.operation(p) for p in parts]
        return None if not ops or any(o is None for o in ops) else sorted(set(ops), key=ops.index)

    def dts(self, text: str) -> list[str] | None:
        out = []
        for p in (x.strip() for x in text.split(",")):
            if not p:
                continue
            name = p if p.startswith("QNN_DATATYPE_") else f"QNN_DATATYPE_{p}"
            if name not in self.datatypes:
                return None
            out.append(name)
        return out

    # -------------------------------------------------------------- main

    def classify(self, text: str, target: str, kind: str = "constraint") -> tuple[list[dict[str, Any]], str | None]:
        """(checks, None) when modelled, ([], category) when not, (checks, category) when partly modelled."""
        t = re.sub(r"\s+", " ", text).strip()
        if kind == "support":
            m = re.fullmatch(r"Param (\S+) only supports default value", t)
            if m:
                return [{"kind": "only_default", "target": m.group(1)}], None
            return [], "other"
        if not t:
            return [], "empty"
        for fn in (self.count, self.rank, self.static, self.defaults, self.operations_check, self.datatypes_check,
                   self.same, self.value):
            found = fn(t, target)
            if found:
                rest = self.category(t) if fn == self.static and "quantiz" in t.lower() else None
                return found, rest
        return [], self.category(t)

    def category(self, t: str) -> str:
        low = t.lower()
        if re.search(r"dynamic", low):
            return "dynamic-shape"
        if re.search(r"quantiz|encoding|symmetric|scale|offset|bw_|per-channel|\bbit\b|\d+bit|uf\d|scaleoffset", low):
            return "quantization"
        if re.search(r"sparse|data format", low):
            return "sparse"
        if re.search(r"numerical supports", low):
            return "category-datatypes"
        if re.search(r"ind(ex|ices)|unique|duplicat|sum of|out of range|non-zero values|zero size", low):
            return "tensor-data"
        if re.search(r"\\\(|weights|bias|state|specifies|^optional$|^the input", low) and not low.startswith(("shape", "value")):
            return "description"
        if re.search(r"must be set to|when mode|for within|if rank|squeezeable|only default n-1|if n =|for n >"
                     r"|can only be used|for m|if true|only supports dilation|stride", low):
            return "conditional"
        if low.startswith("shape") or re.search(r"dimension|divisible|broadcast|batch|shape\(", low):
            return "shape-relation"
        if low.startswith("value") or re.search(r"<=|>=|must be <|max_|min_", low):
            return "value-relation"
        return "other"

    # -------------------------------------------------------------- counts

    def count(self, t: str, target: str) -> list[dict[str, Any]]:
        """`Number: m >= 1` on an entry `in[a..m]`: at least 1 - a + 1 tensors bound to it."""
        m = re.fullmatch(r"Number: (m|M) >= (\d+)", t)
        r = re.fullmatch(r"(?:in|out)\[(\d+)\.\.(m|M)\]", target)
        if m and r and m.group(1) == r.group(2):
            return [{"kind": "count", "target": target, "min": int(m.group(2)) - int(r.group(1)) + 1}]
        return []

    # -------------------------------------------------------------- rank

    def rank(self, t: str, target: str) -> list[dict[str, Any]]:
        s = re.sub(r"^(Shape|Datatype):\s*", "", t).rstrip(".").strip()
        low = s.lower()
        if not re.search(r"\brank\b|\bN less than|\d+D\b|\bn >", s, re.I):
            return []

        def chk(tgt: str = target, **kw: Any) -> dict[str, Any]:
            return {"kind": "rank", "target": tgt, **kw}

        m = re.fullmatch(r"max supported (first|second|third) input rank is (\d+)", low)
        if m:
            return [chk(_ORDINAL[m.group(1)], max=int(m.group(2)))]
        m = re.fullmatch(r"max supported (?:input |output |index |sparse input |sparse output )?rank is (\d+)"
                         r"(?:\. except for (.+) which support max (?:input|output) rank of (\d+)"
                         r"|\.? ?\(except (\w+) supports rank (\d+)\))?", low)
        if m:
            base = int(m.group(1))
            names, other = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
            if names is None:
                return [chk(max=base)]
            ops = self.operations(names)
            if ops is None:
                return []
            return [chk(max=base, when={"except_operations": ops}), chk(max=int(other), when={"operations": ops})]
        m = re.fullmatch(r"supports (?:input|output) of rank between (\d+) and (\d+)"
                         r"(?:\. except for (.+) which support (?:input|output) rank between (\d+) and (\d+))?", low)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if m.group(3) is None:
                return [chk(min=a, max=b)]
            ops = self.operations(m.group(3))
            if ops is None:
                return []
            return [chk(min=a, max=b, when={"except_operations": ops}),
                    chk(min=int(m.group(4)), max=int(m.group(5)), when={"operations": ops})]
        m = re.fullmatch(r"supported (?:input|output) rank: all: between (\d+) and (\d+)\. (.+): between (\d+) and (\d+)", low)
        if m:
            ops = self.operations(m.group(3))
            if ops is None:
                return []
            return [chk(min=int(m.group(1)), max=int(m.group(2)), when={"except_operations": ops}),
                    chk(min=int(m.group(4)), max=int(m.group(5)), when={"operations": ops})]
        m = re.fullmatch(r"ops that support (?:input|output) rank (\d+): (.+)\. ops that support (?:input|output) rank (\d+): (.+)", s, re.I)
        if m:
            a, b = self.operations(m.group(2)), self.operations(m.group(4))
            if a is None or b is None:
                return []
            return [chk(max=int(m.group(1)), when={"operations": a}), chk(max=int(m.group(3)), when={"operations": b})]
        m = re.fullmatch(r"qnn_datatype_(\w+?)[’']s max supported input rank is (\d+); other data type[’']s max supported "
                         r"input rank is (\d+)", low)
        if m:
            dt = f"QNN_DATATYPE_{m.group(1).upper()}"
            return [chk(max=int(m.group(2)), when={"datatypes": [dt]}),
                    chk(max=int(m.group(3)), when={"except_datatypes": [dt]})]
        m = re.fullmatch(r"instancenorms of input rank = (\d+) are supported\. if input rank < \1 then support is only "
                         r"possible if the outermost dimension is of size 1", low)
        if m:
            return [chk(min=int(m.group(1)), max=int(m.group(1)), lower_if_leading_one=True)]
        m = re.fullmatch(r"rank\(in\[(\d+)\]\) must equal (\d+) or (\d+)", low)
        if m:
            return [chk(f"in[{m.group(1)}]", **_rank_range([int(m.group(2)), int(m.group(3))]))]
        m = re.fullmatch(r"min supported input rank is (\d+), max supported (input|output) rank is (\d+)", low)
        if m:
            if m.group(2) == "output":
                return [chk("in[0]", min=int(m.group(1))), chk("out[0]", max=int(m.group(3)))]
            return [chk(min=int(m.group(1)), max=int(m.group(3)))]
        simple = [
            (r"(?:only supports )?rank ?>= ?(\d+)", lambda v: {"min": v[0]}),
            (r"(?:rank|rank n|n) > (\d+)", lambda v: {"min": v[0] + 1}),
            (r"rank ?<= ?(\d+)", lambda v: {"max": v[0]}),
            (r"n less than or equal to (\d+)", lambda v: {"max": v[0]}),
            (r"(?:supports |only supports (?:input of )?)?rank in (?:range )?\[(\d+), ?(\d+)\]", lambda v: {"min": v[0], "max": v[1]}),
            (r"(?:only supports )?input of rank in range \[(\d+), ?(\d+)\]", lambda v: {"min": v[0], "max": v[1]}),
            (r"supports rank in range \[(\d+), (\d+)\]", lambda v: {"min": v[0], "max": v[1]}),
            (r"rank must be ((?:\d+, )*\d+,? or \d+)", lambda v: _rank_range(v)),
            (r"rank must be (\d+) or less", lambda v: {"max": v[0]}),
            (r"(?:input |output |onput |weight )?rank must be (\d+)", lambda v: {"min": v[0], "max": v[0]}),
            (r"(?:only supports (?:input of )?)?rank = (\d+)", lambda v: {"min": v[0], "max": v[0]}),
            (r"supports input of rank between (\d+) and (\d+)", lambda v: {"min": v[0], "max": v[1]}),
            (r"supports input of rank greater than (\d+)", lambda v: {"min": v[0] + 1}),
            (r"supports input of rank equal (\d+)", lambda v: {"min": v[0], "max": v[0]}),
            (r"supports input of (\d)d", lambda v: {"min": v[0], "max": v[0]}),
            (r"does not support filter rank greater than (\d+)", lambda v: {"max": v[0]}),
        ]
        for pattern, make in simple:
            m = re.fullmatch(pattern, low)
            if m:
                return [chk(**make(_nums(" ".join(m.groups()))))]
        return []

    # -------------------------------------------------------------- static, defaults

    def static(self, t: str, target: str) -> list[dict[str, Any]]:
        if re.fullmatch(r"(?i)input must be static\.?", t):
            return [{"kind": "static", "target": target}]
        m = re.search(r"If datatype is (QNN_DATATYPE_\w+), then input must be static", t)
        if m:
            return [{"kind": "static", "target": target, "when": {"datatypes": [m.group(1)]}}]
        # compound quantization bullets: the static part is modelled, the rest is not (see `partial`)
        m = re.match(r"(QNN_DATATYPE_\w+) data is supported if .*must be static in this case", t)
        if m:
            return [{"kind": "static", "target": target, "when": {"datatypes": [m.group(1)]}}]
        m = re.search(r"must be static (?:when|if) using QNN_QUANTIZATION_ENCODING_(\w+)", t)
        if m:
            return [{"kind": "static", "target": target, "encoding": m.group(1)}]
        return []

    def defaults(self, t: str, target: str) -> list[dict[str, Any]]:
        low = t.lower().rstrip(".")
        if re.fullmatch(r"only support default (value [\d.]+f?|mode \w+|region \w+)|only default n-1 supported"
                        r"|reset only supports default|reset for internal states\. only supports default", low):
            return [{"kind": "only_default", "target": target}]
        if low in ("this input is not supported", "unsupported"):
            return [{"kind": "absent", "target": target}]
        if re.fullmatch(r"(cell to (input|forget|output) weights|layernorm) not (currently )?supported", low) \
                and target.startswith("in["):
            return [{"kind": "absent", "target": target}]
        m = re.fullmatch(r"must have operation set to (.+) for this parameter to be valid", low)
        if m:
            ops = self.operations(re.sub(r"\bor\b", ",", m.group(1)))
            return [{"kind": "absent", "target": target, "when": {"except_operations": ops}}] if ops else []
        m = re.fullmatch(r"must be provided when operation is set to (\w+)", low)
        if m and (ops := self.operations(m.group(1))):
            return [{"kind": "required", "target": target, "when": {"operations": ops}}]
        return []

    # -------------------------------------------------------------- operations and datatypes

    def operations_check(self, t: str, target: str) -> list[dict[str, Any]]:
        m = re.fullmatch(r"(?:Value: )?(?:Unsupported operations: )?(.+?)(?: not supported)?\.?", t)
        low = t.lower()
        if low.startswith("unsupported operations:") or (low.startswith("value:") and low.endswith("not supported")):
            body = re.sub(r"(?i)^(value: |unsupported operations: )", "", t).rstrip(".")
            body = re.sub(r"(?i) not supported$", "", body)
            ops = self.operations(body)
            return [{"kind": "operation", "forbidden": ops}] if ops else []
        m = re.fullmatch(r"Supported operations: (.+)", t)
        if m and (ops := self.operations(m.group(1))):
            return [{"kind": "operation", "allowed": ops}]
        return []

    def datatypes_check(self, t: str, target: str) -> list[dict[str, Any]]:
        m = re.fullmatch(r"Supported datatypes: (.+)", t)
        if m:
            body = m.group(1).rstrip(".")
            m4 = re.fullmatch(r"Transpose (\d)D: (.+)\. Transpose (\d)D: (.+)", body)
            if m4:
                a, b = self.dts(m4.group(2)), self.dts(m4.group(4))
                if a is None or b is None:
                    return []
                r1, r2 = int(m4.group(1)), int(m4.group(3))
                return [{"kind": "datatype", "target": target, "allowed": a, "when": {"max_rank": r1}},
                        {"kind": "datatype", "target": target, "allowed": b, "when": {"min_rank": r2}}]
            checks = []
            for part in re.split(r"\.\s+(?=[A-Z_]+:)", body):
                name, _, rest = part.partition(":")
                op = self.operation(name)
                if op is None:
                    return []
                rest = rest.strip().rstrip(".")
                allowed = [] if rest.lower() == "not supported" else self.dts(rest)
                if allowed is None:
                    return []
                checks.append({"kind": "datatype", "target": target, "allowed": allowed, "when": {"operations": [op]}})
            return checks
        m = re.fullmatch(r"Datatype: (QNN_DATATYPE_\w+)", t)
        if m and m.group(1) in self.datatypes:
            return [{"kind": "datatype", "target": target, "allowed": [m.group(1)]}]
        m = re.fullmatch(r"Datatype: Int32 cases with rank is (\d) are not supported", t)
        if m:
            return [{"kind": "datatype", "target": target, "forbidden": ["QNN_DATATYPE_INT_32"],
                     "when": {"min_rank": int(m.group(1)), "max_rank": int(m.group(1))}}]
        if t == "Datatype: Does not support floating point data types":
            return [{"kind": "datatype", "target": target, "forbidden": _FLOAT}]
        m = re.fullmatch(r"Datatype: (\w+) and (\w+) data types only supported when operation param is (\w+)", t)
        if m and (dts := self.dts(f"{m.group(1)}, {m.group(2)}")) and (ops := self.operations(m.group(3))):
            return [{"kind": "datatype", "target": target, "forbidden": dts, "when": {"except_operations": ops}}]
        return []

    def same(self, t: str, target: str) -> list[dict[str, Any]]:
        low = t.lower().rstrip(".")
        m = re.fullmatch(r"(?:datatype: )?(?:out\[0\] must be )?same datatypes? as ((?:in|out)\[\d+\])", low)
        if m:
            return [{"kind": "same_datatype", "target": target, "as": m.group(1)}]
        m = re.fullmatch(r"(?:shape: |datatype: )?(?:same rank as|rank must be equal to) ((?:in|out)\[\d+\])", low)
        if m:
            return [{"kind": "same_rank", "target": target, "as": m.group(1)}]
        m = re.fullmatch(r"(?:shape: )?same (?:shape )?as ((?:in|out)\[\d+\])", low)
        if m:
            return [{"kind": "same_shape", "target": target, "as": m.group(1)}]
        return []

    # -------------------------------------------------------------- values

    def _bound(self, text: str) -> int | str | None:
        s = text.replace(" ", "").lower()
        if re.fullmatch(r"-?\d+", s):
            return int(s)
        s = re.sub(r"rank\(in\[0\]\)|rank", "n", s)
        m = re.fullmatch(r"n(?:-(\d+))?", s)
        if m:
            return "N" if m.group(1) is None else f"N-{m.group(1)}"
        return None

    def enum_value(self, name: str) -> int | None:
        for values in self.enums.values():
            upper = [v.upper() for v in values]
            if name.upper() in upper:
                return upper.index(name.upper())
        return None

    def value(self, t: str, target: str) -> list[dict[str, Any]]:
        s = re.sub(r"^(Value: )+", "", t).rstrip(".").strip()
        low = s.lower()

        def chk(**kw: Any) -> list[dict[str, Any]]:
            return [{"kind": "value", "target": target, **kw}]

        m = re.fullmatch(r"(?:must be |should be |value should be )?in range \[(.+?),(.+?)([\])])(?: where n is the rank of the input tensor)?", low)
        if m:
            lo, hi = self._bound(m.group(1)), self._bound(m.group(2))
            if lo is None or hi is None:
                return []
            return chk(min=lo, max=hi) if m.group(3) == "]" else chk(min=lo, max_exclusive=hi)
        m = re.fullmatch(r"(?:must be|strides must be|dilations must be|sizes must be|rates must be|elements must be"
                         r"|values must be|beta must be)\s*(>=|>)\s*(-?\d+)", low)
        if m:
            return chk(min=int(m.group(2))) if m.group(1) == ">=" else chk(min_exclusive=int(m.group(2)))
        m = re.fullmatch(r"beta provided for (\w+) must be > (\d+)", low)
        if m and (ops := self.operations(m.group(1))):
            return [{"kind": "value", "target": "beta", "min_exclusive": int(m.group(2)), "when": {"operations": ops}}]
        m = re.fullmatch(r"value <= \(rank\(in\[0\]\)\)", low)
        if m:
            return chk(max="N")
        if low in ("must be false",) or re.fullmatch(r"support only \w+ as false|\w+ must be equal to false", low):
            tgt = target
            m2 = re.fullmatch(r"support only (\w+) as false|(\w+) must be equal to false", low)
            if m2:
                tgt = m2.group(1) or m2.group(2)
            return [{"kind": "value", "target": tgt, "equals": False}]
        m = re.fullmatch(r"only support value of (n-1|rank-1)", low)
        if m:
            return chk(equals="N-1")
        m = re.fullmatch(r"(?:only support axes equal to|group must be equal to|only support beta =) (\d+)", low)
        if m:
            tgt = "group" if low.startswith("group") else ("beta" if "beta" in low else target)
            return [{"kind": "value", "target": tgt, "equals": int(m.group(1))}]
        m = re.fullmatch(r"support only (\w+) (?:for direction|output order)", low)
        if m and (v := self.enum_value(m.group(1))) is not None:
            return chk(one_of=[v])
        m = re.fullmatch(r"(?i:only supports?) (?:mode |region |schemes? )?([A-Z_, ]+)", s)
        if m:
            vals = [self.enum_value(v.strip()) for v in m.group(1).split(",") if v.strip()]
            if vals and None not in vals:
                return chk(one_of=vals)
        m = re.fullmatch(r"(?:only supports |values: )?((?:[A-Z_]+ = \d+, )*[A-Z_]+ = \d+)", s, re.I)
        if m:  # the values the backend supports, by name and number (e.g. "FLOOR = 0")
            return chk(one_of=_nums(m.group(1)))
        m = re.fullmatch(r"(\w+) must be in range \[(.+?),(.+?)\]", low)
        if m and (lo := self._bound(m.group(2))) is not None and (hi := self._bound(m.group(3))) is not None:
            return [{"kind": "value", "target": m.group(1), "min": lo, "max": hi}]
        m = re.fullmatch(r"(\w+)\[(\d+)\] and \1\[(\d+)\] should be equal", low)
        if m:
            return [{"kind": "value", "target": m.group(1), "equal_elements": [int(m.group(2)), int(m.group(3))]}]
        if low == "only supports normalization on channel":
            return chk(equals="N-1")
        m = re.fullmatch(r"does not support value (\d+) \((\w+)\)", low)
        if m:
            return chk(not_one_of=[int(m.group(1))])
        return []
