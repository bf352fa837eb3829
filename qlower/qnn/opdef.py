"""The op-definition registry: what every QNN op accepts, per backend.

Definitions come from OpDef XML in QNN's schema (``OpDefCollection``,
``OpDefList`` or ``SupplementalOpDefList`` roots; user files may also use the
older qlower extension elements described in ``opdefs/README.md``) plus
constraints files (``.json``, see ``qnn/constraints.py``): the files shipped in
``opdefs/`` and any custom op package files a user passes. XML is parsed with defusedxml and DTDs
are refused, so a hostile file cannot read local files or blow up memory; any
problem in a file becomes a diagnostic naming that file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import attrs
import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from qlower.diagnostics import Diagnostic, QlowerError, Span, did_you_mean, error
from qlower.qnn.backends import BACKENDS, MASTER_FILE, OPDEFS_DIR
from qlower.qnn.constraints import ALL_BACKENDS, Check, ConstraintSet, OpConstraints, load_constraints
from qlower.qnn.datatypes import DataType

SHIPPED_DIR = OPDEFS_DIR
SHIPPED_FILES = (MASTER_FILE, *(f"{b}.xml" for b in BACKENDS), "constraints.json")
QNN_PACKAGE = "qti.aisw"
ALL_CONFIGS = "All"
_MAX_FILE_BYTES = 32 * 1024 * 1024
_RANK = re.compile(r"SCALAR|ND|\dD")
_BOUNDED = re.compile(r"(?:in|out)\[(\d+)\.\.(\d+)\]")


def _proxy(value: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(value))


def _ndim(rank: str) -> int | None:
    return int(rank[0]) if rank[0].isdigit() else None


@attrs.frozen
class RankLimit:
    """Allowed tensor rank range; `config` is the backend configuration it belongs to."""

    config: str = ALL_CONFIGS
    min: int | None = None
    max: int | None = None

    def allows(self, rank: int) -> bool:
        return (self.min is None or rank >= self.min) and (self.max is None or rank <= self.max)

    def __str__(self) -> str:
        if self.min is not None and self.min == self.max:
            text = f"rank {self.min}"
        elif self.min is not None and self.max is not None:
            text = f"rank {self.min}..{self.max}"
        else:
            text = f"rank >= {self.min}" if self.min is not None else f"rank <= {self.max}"
        return text if self.config == ALL_CONFIGS else f"{text} ({self.config})"


@attrs.frozen
class IODef:
    """One input or output entry; a repeated entry (`in[0..m]`) binds several tensors."""

    name: str
    mandatory: bool
    datatypes: tuple[DataType, ...]  # fixed datatypes; empty when the backend decides
    rank: str = "ND"  # 0D..5D or ND
    repeated: bool = False
    is_static: bool = False
    backend_specific: bool = True  # backends may choose datatypes beyond `datatypes`
    max_repeat: int | None = None
    default: str | None = None
    rank_limits: tuple[RankLimit, ...] = ()

    @property
    def ndim(self) -> int | None:
        return _ndim(self.rank)


@attrs.frozen
class ParamDef:
    name: str
    mandatory: bool
    datatype: DataType | None  # None: backend specific (or not documented)
    rank: str = "SCALAR"  # SCALAR, 0D..5D or ND (scalar or tensor)
    default: str | None = None
    enum: tuple[str, ...] | None = None  # names in value order (value = index)
    rank_limits: tuple[RankLimit, ...] = ()
    datatypes: tuple[DataType, ...] = ()  # every concrete datatype listed (empty: backend specific)

    @property
    def is_scalar(self) -> bool:
        return self.rank == "SCALAR"

    @property
    def ndim(self) -> int | None:
        return _ndim(self.rank)


def _count_range(defs: Sequence[IODef]) -> tuple[int, int | None]:
    lo = sum(1 for d in defs if d.mandatory)
    hi: int | None = 0
    for d in defs:
        if d.repeated and d.max_repeat is None:
            hi = None
        elif hi is not None:
            hi += d.max_repeat if d.repeated and d.max_repeat else 1
    return lo, hi


@attrs.frozen
class OpDef:
    name: str
    package: str
    inputs: tuple[IODef, ...]
    outputs: tuple[IODef, ...]
    params: tuple[ParamDef, ...]

    def param(self, name: str) -> ParamDef | None:
        return next((p for p in self.params if p.name == name), None)

    def input_count_range(self) -> tuple[int, int | None]:
        return _count_range(self.inputs)

    def output_count_range(self) -> tuple[int, int | None]:
        return _count_range(self.outputs)


@attrs.frozen
class StaticRule:
    """An input must be static on a backend, optionally only for one datatype or encoding."""

    config: str = ALL_CONFIGS
    datatype: DataType | None = None
    encoding: str | None = None  # EncodingKind name, e.g. BW_AXIS_SCALE_OFFSET


@attrs.frozen
class TargetSupplement:
    """What a backend adds to one input, output or param of an op."""

    kind: str  # Input, Output or Parameter
    name: str
    datatypes: tuple[DataType, ...] = ()
    only_default: tuple[str, ...] = ()  # configs in which only the default is supported
    static: tuple[StaticRule, ...] = ()
    rank_limits: tuple[RankLimit, ...] = ()


@attrs.frozen
class DatatypeRow:
    """One allowed datatype combination; entries name master inputs/outputs/params."""

    config: str
    entries: tuple[tuple[str, frozenset[DataType]], ...]

    def get(self, name: str) -> frozenset[DataType] | None:
        return next((dts for n, dts in self.entries if n == name), None)


@attrs.frozen
class OpSupplement:
    op: str
    targets: tuple[TargetSupplement, ...] = ()
    rows: tuple[DatatypeRow, ...] = ()

    def target(self, name: str) -> TargetSupplement | None:
        return next((t for t in self.targets if t.name == name), None)


@attrs.frozen
class BackendSupport:
    """One backend's view of one package: which ops run there and how they are narrowed."""

    backend: str
    package: str
    supported: frozenset[str]
    supplements: Mapping[str, OpSupplement] = attrs.field(converter=_proxy, factory=dict, hash=False, repr=False)


@attrs.frozen
class OpDefRegistry:
    """Immutable set of op definitions and backend supplements, keyed by package."""

    ops: Mapping[tuple[str, str], OpDef] = attrs.field(converter=_proxy, hash=False, repr=False)
    support: Mapping[tuple[str, str], BackendSupport] = attrs.field(converter=_proxy, hash=False, repr=False)
    backends: tuple[str, ...] = BACKENDS
    universal_packages: frozenset[str] = frozenset()  # packages without supplements: run anywhere
    # constraints files: (package, backend or "all", op) -> rows and documented constraints
    constraints: Mapping[tuple[str, str, str], OpConstraints] = attrs.field(converter=_proxy, factory=dict,
                                                                            hash=False, repr=False)
    dialect: str = "qnn"  # rules name these ops `qnn.Name` (the engine's target dialect)

    @classmethod
    def load(cls, extra_paths: Sequence[Path | str] = ()) -> OpDefRegistry:
        """The shipped QNN definitions plus user OpDef files (custom op packages)."""
        return cls.from_files([SHIPPED_DIR / f for f in SHIPPED_FILES] + [Path(p) for p in extra_paths])

    @classmethod
    def from_files(cls, paths: Iterable[Path | str]) -> OpDefRegistry:
        """A registry from exactly these OpDef files (no shipped definitions unless listed)."""
        return _Builder().build([Path(p) for p in paths])

    def packages(self) -> tuple[str, ...]:
        return tuple(sorted({pkg for pkg, _ in self.ops}))

    def op(self, name: str, package: str | None = None) -> OpDef | None:
        if package is not None:
            return self.ops.get((package, name))
        found = self.ops.get((QNN_PACKAGE, name))
        if found is None:
            others = [d for (pkg, n), d in self.ops.items() if n == name]
            found = others[0] if len(others) == 1 else None
        return found

    def names(self, package: str | None = None) -> tuple[str, ...]:
        return tuple(sorted({n for pkg, n in self.ops if package is None or pkg == package}))

    def backend_support(self, backend: str, package: str = QNN_PACKAGE) -> BackendSupport | None:
        return self.support.get((package, backend.lower()))

    def supported(self, name: str, backend: str, package: str | None = None) -> bool:
        opdef = self.op(name, package)
        if opdef is None:
            return False
        if opdef.package in self.universal_packages:
            return True
        bs = self.backend_support(backend, opdef.package)
        return bs is not None and name in bs.supported

    def supplement(self, name: str, backend: str, package: str | None = None) -> OpSupplement | None:
        opdef = self.op(name, package)
        bs = self.backend_support(backend, opdef.package) if opdef else None
        return bs.supplements.get(name) if bs else None

    def checks(self, name: str, backend: str, package: str | None = None) -> tuple[Check, ...]:
        """The structured checks of the constraints files for an op on a backend (master ones included)."""
        opdef = self.op(name, package)
        if opdef is None:
            return ()
        b = backend.lower()
        found = []
        for key in (ALL_BACKENDS, b):
            oc = self.constraints.get((opdef.package, key, name))
            if oc is not None:
                found.extend(c for c in oc.checks if b not in c.except_backends)
        return tuple(found)

    def param(self, op: str, pname: str, package: str | None = None) -> ParamDef | None:
        opdef = self.op(op, package)
        return opdef.param(pname) if opdef else None

    def input_count_range(self, op: str, package: str | None = None) -> tuple[int, int | None]:
        return self._require(op, package).input_count_range()

    def output_count_range(self, op: str, package: str | None = None) -> tuple[int, int | None]:
        return self._require(op, package).output_count_range()

    def enum_value(self, op: str, pname: str, enum_name: str) -> int | None:
        """The numeric value of an enum name (case-insensitive), or None."""
        pd = self.param(op, pname)
        if pd is None or pd.enum is None:
            return None
        upper = [e.upper() for e in pd.enum]
        return upper.index(enum_name.upper()) if enum_name.upper() in upper else None

    def enum_name(self, op: str, pname: str, value: int) -> str | None:
        pd = self.param(op, pname)
        if pd is None or pd.enum is None or not 0 <= value < len(pd.enum):
            return None
        return pd.enum[value]

    def _require(self, op: str, package: str | None) -> OpDef:
        opdef = self.op(op, package)
        if opdef is None:
            raise QlowerError(unknown_op(op, self.names()))
        return opdef


def _bound_of(name: str) -> int | None:
    """How many tensors a repeated entry named like `in[0..3]` binds (QNN's naming); None if unbounded."""
    m = _BOUNDED.fullmatch(name.strip())
    return int(m.group(2)) - int(m.group(1)) + 1 if m and int(m.group(2)) > int(m.group(1)) else None


def unknown_op(name: str, known: Iterable[str], subject: str | None = None) -> Diagnostic:
    return error(f"unknown QNN op `{name}`", subject=subject, hint=did_you_mean(name, known), code="unknown-op")


# ---------------------------------------------------------------- XML loading


class _FileError(Exception):
    """A whole file could not be read or parsed."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _parse_file(path: Path) -> Element:
    """The root element of an OpDef file, parsed safely (no DTDs, bounded size)."""
    where = str(path)
    try:
        if path.exists() and not path.is_file():  # (a FIFO would block the read forever)
            raise _FileError(error("cannot read OpDef file: not a regular file", subject=where, code="opdef-file"))
        with path.open("rb") as fh:
            data = fh.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _FileError(error(f"cannot read OpDef file: {exc.strerror or exc}", subject=where, code="opdef-file"))
    if len(data) > _MAX_FILE_BYTES:
        raise _FileError(error("OpDef file is larger than 32 MiB", subject=where, code="opdef-file"))
    try:
        return SafeET.fromstring(data, forbid_dtd=True)
    except DefusedXmlException:
        raise _FileError(error("refusing OpDef XML with a DTD or entity declarations (not needed by OpDef files; "
                               "they can read local files or exhaust memory)", subject=where, code="opdef-file"))
    except ParseError as exc:
        line, col = getattr(exc, "position", (1, 0))
        raise _FileError(error(f"malformed OpDef XML: {exc}", span=Span.point(where, line, col + 1),
                               code="opdef-file"))


class _Reader:
    """Reads the elements of one file, turning every schema problem into a diagnostic."""

    def __init__(self, path: Path, diags: list[Diagnostic]) -> None:
        self.path = str(path)
        self.diags = diags

    def fail(self, where: str, message: str) -> None:
        self.diags.append(error(f"{where}: {message}", subject=self.path, code="opdef-file"))

    @staticmethod
    def text(el: Element, tag: str) -> str | None:
        child = el.find(tag)
        return child.text.strip() if child is not None and child.text and child.text.strip() else None

    def flag(self, el: Element | None, where: str, default: bool = False) -> bool:
        if el is None:
            return default
        value = (el.text or "").strip().lower()
        if value in ("true", "1"):
            return True
        if value in ("false", "0"):
            return False
        self.fail(where, f"<{el.tag}> must be true or false, not {value!r}")
        return default

    def int_attr(self, el: Element, name: str, where: str) -> int | None:
        value = el.get(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            self.fail(where, f"<{el.tag} {name}=...> must be an integer, not {value!r}")
            return None

    def datatype(self, text: str, where: str) -> DataType | None:
        try:
            return DataType.parse(text)
        except (KeyError, ValueError):
            self.fail(where, f"unknown datatype {text!r}")
            return None

    def datatypes(self, el: Element, where: str) -> tuple[tuple[DataType, ...], bool]:
        """Concrete datatypes listed under `el`, and whether BACKEND_SPECIFIC is among them."""
        found, backend_specific = [], False
        for child in el.findall("Datatype"):
            text = (child.text or "").strip()
            if text == "BACKEND_SPECIFIC":
                backend_specific = True
            elif (dt := self.datatype(text, where)) is not None:
                found.append(dt)
        return tuple(found), backend_specific

    def rank(self, el: Element, where: str) -> str:
        shape = el.find("Shape")
        rank = self.text(shape, "Rank") if shape is not None else None
        if rank is None:
            return "ND"
        if not _RANK.fullmatch(rank):
            self.fail(where, f"unknown rank {rank!r} (expected SCALAR, 0D..9D or ND)")
            return "ND"
        return rank

    def rank_limits(self, el: Element, where: str) -> tuple[RankLimit, ...]:
        return tuple(
            RankLimit(r.get("config", ALL_CONFIGS), self.int_attr(r, "min", where), self.int_attr(r, "max", where))
            for r in el.findall("RankLimit")
        )

    def io(self, el: Element, where: str) -> IODef | None:
        name = self.text(el, "Name")
        if name is None:
            self.fail(where, f"<{el.tag}> without <Name>")
            return None
        where = f"{where}, {el.tag} {name}"
        mandatory = el.find("Mandatory")
        if mandatory is None:
            self.fail(where, "missing <Mandatory>")
        dts, backend_specific = self.datatypes(el, where)
        if not dts and not backend_specific:
            self.fail(where, "needs at least one <Datatype> (or BACKEND_SPECIFIC)")
        repeated = el.find("Repeated")
        return IODef(
            name=name, mandatory=self.flag(mandatory, where), datatypes=dts, rank=self.rank(el, where),
            repeated=self.flag(repeated, where), is_static=self.flag(el.find("IsStaticTensor"), where),
            backend_specific=backend_specific or not dts,
            max_repeat=self.int_attr(repeated, "max", where) if repeated is not None and repeated.get("max")
            else _bound_of(name),
            default=self.text(el, "Default"), rank_limits=self.rank_limits(el, where),
        )

    def param(self, el: Element, where: str) -> ParamDef | None:
        name = self.text(el, "Name")
        if name is None:
            self.fail(where, "<Parameter> without <Name>")
            return None
        where = f"{where}, Parameter {name}"
        dts, backend_specific = self.datatypes(el, where)
        enum_el = el.find("Enumeration")
        enum = tuple((e.text or "").strip() for e in enum_el.findall("Enum")) if enum_el is not None else None
        return ParamDef(
            name=name, mandatory=self.flag(el.find("Mandatory"), where),
            datatype=dts[0] if len(dts) == 1 and not backend_specific else None,
            rank=self.rank(el, where), default=self.text(el, "Default"), enum=enum or None,
            rank_limits=self.rank_limits(el, where),
            datatypes=() if backend_specific else dts,
        )

    def opdef(self, el: Element, package: str) -> OpDef | None:
        name = self.text(el, "Name")
        if name is None:
            self.fail(f"package {package}", "<OpDef> without <Name>")
            return None
        where = f"OpDef {name}"
        ins = [self.io(c, where) for c in el.findall("Input")]
        outs = [self.io(c, where) for c in el.findall("Output")]
        params = [self.param(c, where) for c in el.findall("Parameter")]
        for group in (ins, outs, params):
            names = [d.name for d in group if d is not None]
            for dup in sorted({n for n in names if names.count(n) > 1}):
                self.fail(where, f"`{dup}` is defined twice")
        return OpDef(name, package, tuple(d for d in ins if d), tuple(d for d in outs if d),
                     tuple(p for p in params if p))

    def target(self, el: Element, where: str) -> TargetSupplement | None:
        name = self.text(el, "Name")
        if name is None:
            self.fail(where, f"<{el.tag}> without <Name>")
            return None
        where = f"{where}, {el.tag} {name}"
        only = [o.get("config", ALL_CONFIGS) for o in el.findall("OnlyDefaultSupported") if self.flag(o, where)]
        static = []
        for s in el.findall("IsStaticTensor"):
            if self.flag(s, where):
                dt = s.get("datatype")
                static.append(StaticRule(s.get("config", ALL_CONFIGS), self.datatype(dt, where) if dt else None,
                                         s.get("encoding")))
        return TargetSupplement(el.tag, name, self.datatypes(el, where)[0], tuple(only), tuple(static),
                                self.rank_limits(el, where))

    def supplement(self, el: Element, where: str) -> OpSupplement | None:
        name = self.text(el, "Name")
        if name is None:
            self.fail(where, "<SupplementalOpDef> without <Name>")
            return None
        where = f"{where}, SupplementalOpDef {name}"
        targets = [self.target(c, where) for c in el if c.tag in ("Input", "Output", "Parameter")]
        rows = []
        for comb in el.findall("DatatypeCombination"):
            entries = []
            for c in comb:
                if c.get("name") is None:
                    self.fail(where, f"<DatatypeCombination> child <{c.tag}> needs a name attribute")
                    continue
                entries.append((c.get("name"), frozenset(self.datatypes(c, where)[0])))
            rows.append(DatatypeRow(comb.get("config", ALL_CONFIGS), tuple(entries)))
        return OpSupplement(name, tuple(t for t in targets if t), tuple(rows))


class _Builder:
    """Merges the collections of several files, checking conflicts and references."""

    def __init__(self) -> None:
        self.diags: list[Diagnostic] = []
        self.ops: dict[tuple[str, str], tuple[OpDef, str]] = {}
        self.supported: dict[tuple[str, str], set[str]] = {}
        self.supplements: dict[tuple[str, str, str], tuple[OpSupplement, str]] = {}
        self.constraints: dict[tuple[str, str, str], tuple[OpConstraints, str]] = {}

    def build(self, paths: Sequence[Path]) -> OpDefRegistry:
        for path in paths:
            if path.suffix.lower() == ".json":
                cs, problems = load_constraints(path)
                self.diags.extend(problems)
                if cs is not None:
                    self._add_constraints(cs, str(path))
                continue
            try:
                self._load(path, _parse_file(path))
            except _FileError as exc:
                self.diags.append(exc.diagnostic)
        self._check_references()
        self._merge_rows()
        if self.diags:
            raise QlowerError(self.diags)
        supp_pkgs = {pkg for pkg, _ in self.supported}
        backends = BACKENDS + tuple(sorted({b for _, b in self.supported} - set(BACKENDS)))
        support = {}
        for (pkg, backend), names in self.supported.items():
            supps = {op: s for (p, b, op), (s, _) in self.supplements.items() if (p, b) == (pkg, backend)}
            support[(pkg, backend)] = BackendSupport(backend, pkg, frozenset(names), supps)
        return OpDefRegistry(
            ops={k: d for k, (d, _) in self.ops.items()}, support=support, backends=backends,
            universal_packages=frozenset({pkg for pkg, _ in self.ops} - supp_pkgs),
            constraints={k: c for k, (c, _) in self.constraints.items()},
        )

    def _add_constraints(self, cs: ConstraintSet, path: str) -> None:
        for (op, backend), oc in cs.ops.items():
            key = (cs.package, backend, op)
            old = self.constraints.get(key)
            if old is not None and old[0] != oc:
                self.diags.append(error(f"constraints of {op} on {backend} conflict with those in {old[1]}",
                                        subject=path, code="constraints-file"))
            elif old is None:
                self.constraints[key] = (oc, path)

    def _merge_rows(self) -> None:
        """Datatype rows of the constraints files join the backend supplements' rows."""
        for (pkg, backend, op), (oc, _) in sorted(self.constraints.items()):
            if not oc.rows or backend == ALL_BACKENDS:
                continue
            rows = tuple(DatatypeRow(config, entries) for config, entries in oc.rows)
            old = self.supplements.get((pkg, backend, op))
            supp = old[0] if old else OpSupplement(op)
            self.supplements[(pkg, backend, op)] = (attrs.evolve(supp, rows=supp.rows + rows),
                                                    old[1] if old else "")

    def _load(self, path: Path, root: Element) -> None:
        reader = _Reader(path, self.diags)
        if root.tag in ("OpDefList", "SupplementalOpDefList", "SupplementalOpDefSpecification"):
            # QNN's own layout for its native ops: no package attribute, the package is QNN's
            package = QNN_PACKAGE
            oplists = [root] if root.tag == "OpDefList" else []
            slists = [root] if root.tag == "SupplementalOpDefList" else root.findall("SupplementalOpDefList")
        elif root.tag == "OpDefCollection":
            package = root.get("PackageName")
            if not package:
                reader.fail("OpDefCollection", "missing PackageName attribute")
                return
            oplists, slists = root.findall("OpDefList"), root.findall("SupplementalOpDefList")
        else:
            reader.fail("root", f"expected <OpDefCollection>, <OpDefList> or <SupplementalOpDefList>, "
                                f"found <{root.tag}>")
            return
        for oplist in oplists:
            for el in oplist.findall("OpDef"):
                if (d := reader.opdef(el, package)) is not None:
                    self._add_op(d, str(path), reader)
                    # an op package's OpDef may name its backends itself (QNN's CustomOpDefType)
                    for be in el.findall("SupportedBackend"):
                        if (be.text or "").strip():
                            self.supported.setdefault((package, be.text.strip().lower()), set()).add(d.name)
        for slist in slists:
            backend = (slist.get("Backend") or "").strip().lower()
            if not backend:
                reader.fail("SupplementalOpDefList", "missing Backend attribute")
                continue
            names = self.supported.setdefault((package, backend), set())
            listed = slist.find("SupportedOps")
            supps = [s for el in slist.findall("SupplementalOpDef")
                     if (s := reader.supplement(el, f"{backend.upper()} supplement")) is not None]
            if listed is not None:
                names.update((n.text or "").strip() for n in listed.findall("OpName"))
            else:
                names.update(s.op for s in supps)
            for s in supps:
                self._add_supplement(package, backend, s, str(path), reader)

    def _add_op(self, d: OpDef, path: str, reader: _Reader) -> None:
        old = self.ops.get((d.package, d.name))
        if old is not None and old[0] != d:
            reader.fail(f"OpDef {d.name}", f"conflicts with the definition of {d.package}.{d.name} in {old[1]}")
        elif old is None:
            self.ops[(d.package, d.name)] = (d, path)

    def _add_supplement(self, pkg: str, backend: str, s: OpSupplement, path: str, reader: _Reader) -> None:
        old = self.supplements.get((pkg, backend, s.op))
        if old is not None and old[0] != s:
            reader.fail(f"{backend.upper()} supplement {s.op}", f"conflicts with the supplement in {old[1]}")
        elif old is None:
            self.supplements[(pkg, backend, s.op)] = (s, path)

    def _check_references(self) -> None:
        """Supplements may only name ops of their package, and those ops' inputs/outputs/params."""
        for (pkg, backend), names in self.supported.items():
            for name in sorted(names - {n for p, n in self.ops if p == pkg}):
                self.diags.append(error(f"{backend.upper()} lists unknown op `{name}` of package {pkg} as supported",
                                        hint=did_you_mean(name, [n for p, n in self.ops if p == pkg]),
                                        code="opdef-file"))
        for (pkg, backend, op), (s, path) in sorted(self.supplements.items()):
            d = self.ops.get((pkg, op))
            if d is None:
                continue  # reported above when listed; an unlisted supplement is harmless
            known = {io.name for io in d[0].inputs + d[0].outputs} | {p.name for p in d[0].params}
            named = [t.name for t in s.targets] + [n for r in s.rows for n, _ in r.entries]
            for name in sorted(set(named) - known):
                self.diags.append(error(f"{backend.upper()} supplement of {op} names unknown entry `{name}`",
                                        subject=path, hint=did_you_mean(name, known), code="opdef-file"))
        for (pkg, backend, op), (oc, path) in sorted(self.constraints.items()):
            d = self.ops.get((pkg, op))
            if d is None:
                self.diags.append(error(f"constraints name unknown op `{op}` of package {pkg}", subject=path,
                                        code="constraints-file"))
                continue
            known = {io.name for io in d[0].inputs + d[0].outputs} | {p.name for p in d[0].params}
            named = {n for _, entries in oc.rows for n, _ in entries}
            named |= {x for c in oc.checks for x in (c.target, c.get("as"), c.get("same_as")) if x}
            named |= {n for c in oc.checks for k in ("require", "if") if c.get(k) is not None for n in c.get(k).names}
            named |= {n for c in oc.checks for k in ("require", "if") if c.get(k) is not None for n in c.get(k).slots
                      if ".." in n}
            for name in sorted(named - known):
                self.diags.append(error(f"constraints of {op} on {backend} name unknown entry `{name}`",
                                        subject=path, hint=did_you_mean(name, known), code="constraints-file"))


# ---------------------------------------------------------------- describe
