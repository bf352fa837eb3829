"""The `aten` dialect: how ATen overloads become qlower ops, and their reference semantics.

The source semantics of an `aten.*` op are ATen's own: the kernel calls
`torch.ops.aten.<name>.<overload>` on torch tensors made from the numpy
operands, with the attributes as arguments. Nothing is re-implemented per op;
the op's schema drives both the importer (`qlower.frontends.torch_frontend`)
and the kernels, so the two always agree on this mapping:

* Tensor, Tensor? and Tensor[] arguments are operands, in schema order (a
  Tensor[] spreads into variadic operands). For Tensor?[] (the indices of
  `index`) only the present tensors are operands; the attribute
  `<arg>_pos` lists their positions in the list.
* A Scalar argument is a constant operand when another overload of the same
  op takes a Tensor under that name (`mul.Scalar` → `aten.mul(x, c)`,
  `pow.Tensor_Scalar`, `where.ScalarOther`); so is a number passed where the
  schema wants a Tensor (`add.Tensor(x, 1)`). The importer gives it shape [1]
  (0-d next to 0-d tensors) and the dtype ATen's promotion would; kernels pass
  such one-element operands back to ATen as numbers. Other Scalars (`alpha`,
  `fill_value`, `arange` bounds) are attributes.
* Every other argument is an attribute named as in the schema; dtypes are
  dtype names. Device, layout, memory format, pin_memory and non_blocking are
  dropped: they do not change values.
* Functional overloads of one op share the type `aten.<name>` when they agree
  on operands, result count and attribute kinds, and one's required attributes
  include the other's (`view(size)` and `view(dtype)` do not). Overloads that disagree form
  their own groups: the largest group (ties: the one with `default`, then
  `Tensor`) keeps `aten.<name>`, the others are `aten.<name>_<overload>`
  (`aten.squeeze_dims`, `aten.max_dim`, `aten.repeat_interleave_self_int`).
* int64 becomes int32 and float64/bfloat16 become float32: QNN computes in
  neither. Kernels widen int32 operands to int64 before calling ATen (as the
  exported model computed) and narrow results to the declared dtypes.
* Ops that draw random numbers have no reference semantics, except without
  dropout (`dropout_p` or `p` 0, `train` false).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.graph.types import canonical_dtype
from qlower.reference.spec import Kernel, KernelError, OutSpec

DROPPED_TYPES = ("Device", "Layout", "MemoryFormat")
DROPPED_NAMES = frozenset({"pin_memory", "non_blocking"})
NARROWED = {"int64": "int32", "float64": "float32", "bfloat16": "float32"}
NO_DEFAULT: Any = object()

_ATTR_KINDS = {"int": "int", "SymInt": "int", "float": "float", "bool": "bool", "str": "str", "number": "number",
               "List[int]": "list[int]", "List[SymInt]": "list[int]", "List[float]": "list[float]",
               "List[bool]": "list[bool]", "ScalarType": "dtype"}
_OPERAND_KINDS = {"Tensor": "tensor", "List[Tensor]": "list", "List[Optional[Tensor]]": "optional_list"}


def dtype_name(torch_dtype: Any) -> str:
    """A torch dtype as the numpy dtype name the aten dialect uses (int64 → int32, ...)."""
    name = str(torch_dtype).removeprefix("torch.")
    name = {"bool": "bool", "half": "float16", "float": "float32", "double": "float64", "long": "int64",
            "int": "int32"}.get(name, name)
    return NARROWED.get(name, name)


@attrs.frozen
class Arg:
    """One schema argument: an operand (`tensor`, `list`, `optional_list`, `scalar`), an attribute, or dropped."""

    name: str
    role: str  # "operand" | "attr" | "dropped"
    kind: str
    optional: bool
    default: Any = NO_DEFAULT


@attrs.frozen
class Signature:
    overload: str
    args: tuple[Arg, ...]
    results: int | None  # None: a Tensor[] result (any number)
    scalar_typed: tuple[str, ...]  # scalar operands this overload takes as Python numbers
    random: bool

    @property
    def operands(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "operand")

    @property
    def attrs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "attr")

    def pos_attr(self) -> str | None:
        return next((f"{a.name}_pos" for a in self.operands if a.kind == "optional_list"), None)


def _strip_optional(t: str) -> tuple[str, bool]:
    return (t[len("Optional["):-1], True) if t.startswith("Optional[") else (t, False)


def _signature(overload: str, schema: Any, tensor_names: frozenset[str], random: bool) -> Signature | None:
    """The dialect form of one functional overload, or None when it is not expressible."""
    if schema.is_mutable or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return None
    rets = [str(r.type) for r in schema.returns]
    if not rets or any(r not in ("Tensor", "List[Tensor]") for r in rets) or ("List[Tensor]" in rets and len(rets) > 1):
        return None
    args, scalar_typed = [], []
    for a in schema.arguments:
        t, optional = _strip_optional(str(a.type))
        real, _ = _strip_optional(str(a.real_type))
        default = a.default_value if a.has_default_value() else NO_DEFAULT
        if real in DROPPED_TYPES or a.name in DROPPED_NAMES:
            args.append(Arg(a.name, "dropped", real, optional, default))
        elif t in _OPERAND_KINDS:
            args.append(Arg(a.name, "operand", _OPERAND_KINDS[t], optional or t.startswith("List[Opt"), default))
        elif t == "number" and a.name in tensor_names:
            args.append(Arg(a.name, "operand", "scalar", optional, default))
            scalar_typed.append(a.name)
        elif real in _ATTR_KINDS:
            args.append(Arg(a.name, "attr", _ATTR_KINDS[real], optional, default))
        else:
            return None  # Generator, Dimname, Storage...: not part of the dialect
    return Signature(overload, tuple(args), None if rets == ["List[Tensor]"] else len(rets), tuple(scalar_typed),
                     random)


def _compatible(a: Signature, b: Signature) -> bool:
    if a.results != b.results:
        return False
    if [(x.name, x.kind == "list" or x.kind == "optional_list") for x in a.operands] != \
            [(x.name, x.kind == "list" or x.kind == "optional_list") for x in b.operands]:
        return False
    kinds = {x.name: x.kind for x in a.attrs}
    for x in b.attrs:
        k = kinds.get(x.name)
        if k is not None and k != x.kind and "number" not in (k, x.kind):
            return False
    names_a = {x.name for x in a.operands}
    if any(x.name in names_a for x in b.attrs) or any(x.name in kinds for x in b.operands):
        return False
    need_a, need_b = _required(a), _required(b)
    return need_a <= need_b or need_b <= need_a  # view.default(size) and view.dtype(dtype) do not mix


def _required(sig: Signature) -> set[str]:
    return {x.name for x in sig.attrs if not x.optional and x.default is NO_DEFAULT}


@attrs.frozen
class OpForm:
    """One `aten.*` op type: the overloads of an ATen op that share it."""

    type_name: str
    packet: str
    signatures: tuple[Signature, ...]


def _forms(packet_name: str) -> list[OpForm]:
    import torch

    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return []
    overloads = [(o, getattr(packet, o)) for o in packet.overloads()]
    tensor_names = frozenset(a.name for _, ov in overloads for a in ov._schema.arguments
                             if _strip_optional(str(a.type))[0] == "Tensor")
    order = sorted(overloads, key=lambda p: (p[0] != "default", p[0] != "Tensor"))
    groups: list[list[Signature]] = []
    for name, ov in order:
        sig = _signature(name, ov._schema, tensor_names, torch.Tag.nondeterministic_seeded in ov.tags)
        if sig is None:
            continue
        group = next((g for g in groups if all(_compatible(s, sig) and _compatible(sig, s) for s in g)), None)
        if group is None:
            groups.append([sig])
        else:
            group.append(sig)
    if not groups:
        return []
    primary = max(range(len(groups)), key=lambda i: (len(groups[i]), -i))
    return [OpForm(packet_name if i == primary else f"{packet_name}_{g[0].overload}", packet_name, tuple(g))
            for i, g in enumerate(groups)]


class AtenOps:
    """Resolves op types and overloads (memoized per instance; torch is imported on first use)."""

    def __init__(self) -> None:
        self._forms: dict[str, list[OpForm]] = {}

    def forms(self, packet: str) -> list[OpForm]:
        if packet not in self._forms:
            self._forms[packet] = _forms(packet)
        return self._forms[packet]

    def form_of_overload(self, packet: str, overload: str) -> tuple[OpForm, Signature] | None:
        for form in self.forms(packet):
            for sig in form.signatures:
                if sig.overload == overload:
                    return form, sig
        return None

    def form(self, type_name: str) -> OpForm | None:
        """`mean` → mean's primary form; `squeeze_dims` → the form named after squeeze.dims."""
        cuts = [len(type_name)] + [m.start() for m in re.finditer("_", type_name)][::-1]
        for cut in cuts:
            for form in self.forms(type_name[:cut]) if cut > 0 else ():
                if form.type_name == type_name:
                    return form
        return None


def _fits(sig: Signature, n_operands: int, attrs_: Mapping[str, Any]) -> bool:
    singles = [a for a in sig.operands if a.kind not in ("list", "optional_list")]
    has_list = len(singles) < len(sig.operands)
    if (not has_list and n_operands > len(singles)) or (has_list and n_operands < len(singles)):
        return False
    if any(a.role == "dropped" and not a.optional and a.default is NO_DEFAULT for a in sig.args):
        return False  # e.g. to.device: cannot be called without its device
    names = {a.name: a for a in sig.attrs}
    extra = {a.name for a in sig.args if a.role == "dropped"} | {sig.pos_attr()}
    for k, v in attrs_.items():
        if k not in names and k not in extra and v is not None:
            return False
    return all(a.optional or a.default is not NO_DEFAULT or attrs_.get(a.name) is not None for a in sig.attrs)


def _draws_nothing(sig: Signature, attrs_: Mapping[str, Any]) -> bool:
    """Ops tagged random (dropout, sdpa) are deterministic without dropout or outside training."""
    values = {a.name: attrs_.get(a.name, a.default) for a in sig.attrs}
    return values.get("dropout_p", values.get("p")) == 0 or values.get("train") is False


def _scalar_fit(sig: Signature, kwargs: Mapping[str, Any]) -> bool:
    """Whether the one-element operands in this overload's Scalar positions can be passed as numbers:
    the exported program passed numbers there, and ATen treats numbers and tensors differently
    (masked_fill only takes a 0-d value tensor). The other operands must keep the result's shape."""
    if not sig.scalar_typed:
        return False
    others = [t for k, t in kwargs.items() if k not in sig.scalar_typed and hasattr(t, "dim")]
    return all(kwargs[k] is None or kwargs[k].numel() == 1 for k in sig.scalar_typed) \
        and any(t.dim() >= 1 for t in others)


def _to_torch(x: np.ndarray | None):
    import torch

    if x is None:
        return None
    t = torch.from_numpy(np.array(x, order="C"))  # a private, writable, C-ordered copy (views need one)
    return t.to(torch.int64) if t.dtype == torch.int32 else t


def _to_numpy(t: Any, spec: OutSpec, op: str) -> np.ndarray:
    import torch

    if t is None:  # an output the call's mask left undefined (the *_backward ops)
        raise KernelError(f"{op}: a result is undefined")
    if t.dtype == torch.bfloat16:
        t = t.float()
    y = t.detach().cpu().numpy()
    if spec.shape is None:
        return y.astype(NARROWED.get(y.dtype.name, y.dtype.name))
    if y.shape != tuple(spec.shape):
        raise KernelError(f"{op}: result has shape {list(y.shape)} but is declared {list(spec.shape)}")
    return y.astype(np.float32 if spec.encoding is not None else spec.dtype)


def _arguments(sig: Signature, inputs: Sequence[np.ndarray | None], attrs_: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    kwargs: dict[str, Any] = {}
    singles = sum(1 for a in sig.operands if a.kind not in ("list", "optional_list"))
    list_len = max(0, len(inputs) - singles)
    it = iter(list(inputs) + [None] * max(0, singles - len(inputs)))
    for a in sig.operands:
        if a.kind in ("list", "optional_list"):
            items = [_to_torch(next(it)) for _ in range(list_len)]
            pos = attrs_.get(f"{a.name}_pos")
            if a.kind == "optional_list" and pos is not None:
                full: list[Any] = [None] * (max(pos) + 1 if pos else 0)
                for p, t in zip(pos, items):
                    full[p] = t
                items = full
            kwargs[a.name] = items
        else:
            t = _to_torch(next(it))
            if t is None and not a.optional:
                raise KernelError(f"operand `{a.name}` is required but was omitted")
            kwargs[a.name] = t
    for a in sig.attrs:
        v = attrs_.get(a.name)
        if v is None and not a.optional:
            continue  # the schema default applies
        if a.kind == "dtype" and v is not None:
            v = getattr(torch, canonical_dtype(str(v)) or str(v))
        kwargs[a.name] = v
    return kwargs


def aten_kernel(type_name: str, ops: AtenOps) -> Kernel:
    """The reference kernel of `aten.<type_name>`: the matching ATen overload, called on torch tensors."""

    def kernel(inputs: Sequence[np.ndarray | None], attrs_: Mapping[str, Any], outs: Sequence[OutSpec]):
        try:
            import torch
        except ImportError:
            raise KernelError(f"aten.{type_name} needs torch (pip install qlower[torch])") from None
        form = ops.form(type_name)
        if form is None:
            raise KernelError(f"aten.{type_name} is not an ATen op in torch {torch.__version__}")
        n = len(inputs)
        while n and inputs[n - 1] is None:
            n -= 1
        fits = [s for s in form.signatures if _fits(s, n, attrs_)]
        if not fits:
            raise KernelError(f"aten.{type_name}: no overload takes {n} operand(s) and attributes {sorted(attrs_)}")
        try:
            calls = [(s, _arguments(s, inputs, attrs_)) for s in fits]
        except KernelError as exc:
            raise KernelError(f"aten.{type_name}: {exc}") from None
        # numbers where the program (most likely) passed numbers, else tensors everywhere
        scalar = [c for c in calls if _scalar_fit(*c)]
        sig, kwargs = max(scalar, key=lambda c: len(c[0].scalar_typed)) if scalar else \
            min(calls, key=lambda c: len(c[0].scalar_typed))
        for k in sig.scalar_typed:
            if kwargs[k] is not None:
                if kwargs[k].numel() != 1:
                    raise KernelError(f"aten.{type_name}: operand `{k}` must hold one number")
                kwargs[k] = kwargs[k].item()
        if sig.random and not _draws_nothing(sig, attrs_):
            raise KernelError(f"aten.{type_name} draws random numbers; it has no reference semantics")
        try:
            result = getattr(getattr(torch.ops.aten, form.packet), sig.overload)(**kwargs)
        except Exception as exc:  # ATen reports bad arguments as RuntimeError, ValueError, IndexError...
            raise KernelError(f"aten.{type_name}.{sig.overload}: {str(exc).splitlines()[0]}") from None
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(outs) != len(results):
            raise KernelError(f"aten.{type_name}: computes {len(results)} result(s), {len(outs)} declared")
        return [_to_numpy(t, spec, f"aten.{type_name}") for t, spec in zip(results, outs)]

    return kernel


def _quantize_encoded(inputs: Sequence[np.ndarray | None], attrs_: Mapping[str, Any],
                      outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """The real value of a quantize the frontend kept: dequantize(quantize(x)) on the result's encoding."""
    from qlower.reference.quant import dequantize, quantize

    enc, dtype = outs[0].encoding, outs[0].dtype
    if enc is None:
        raise KernelError("aten.quantize_encoded: the result has no encoding")
    return [dequantize(quantize(np.asarray(inputs[0], np.float64), enc, dtype), enc, dtype)]


def _dequantize_encoded(inputs: Sequence[np.ndarray | None], attrs_: Mapping[str, Any],
                        outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """A dequantize is the identity on real values (its operand arrives dequantized)."""
    return [np.asarray(inputs[0]).astype(outs[0].dtype)]


# Ops of the aten dialect that are not ATen's: the quantize/dequantize ops that
# qlower.frontends.torch_quant keeps where a pt2e program enters and leaves fixed point.
ENCODED_KERNELS: Mapping[str, Kernel] = {"quantize_encoded": _quantize_encoded,
                                         "dequantize_encoded": _dequantize_encoded}


class AtenKernels(Mapping[str, Kernel]):
    """Kernels for the given op types, or for every ATen op when `names` is None (importing torch to list them)."""

    def __init__(self, names: Iterable[str] | None = None) -> None:
        self._ops = AtenOps()
        self._names = None if names is None else tuple(sorted(set(names)))
        self._made: dict[str, Kernel] = {}

    @property
    def available(self) -> bool:
        """Whether torch (the extra qlower[torch]) is installed, without importing it."""
        import importlib.util

        return importlib.util.find_spec("torch") is not None

    def __getitem__(self, name: str) -> Kernel:
        if name not in self._made:
            if self._names is not None and name not in self._names:
                raise KeyError(name)
            if name in ENCODED_KERNELS:  # qlower's own ops of the dialect (pt2e quantize/dequantize)
                self._made[name] = ENCODED_KERNELS[name]
                return self._made[name]
            if self._names is None and self._ops.form(name) is None:
                raise KeyError(name)
            self._made[name] = aten_kernel(name, self._ops)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        if self._names is None:
            import torch

            return iter(sorted(f.type_name for p in dir(torch.ops.aten) if not p.startswith("__")
                               for f in self._ops.forms(p)))
        return iter(self._names)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_DECL = re.compile(r"^\s*op\s+aten\.(\w+)\s*\(", re.MULTILINE)


def declared_aten_ops(pack: Path) -> list[str]:
    """The op types a rule pack folder declares in the aten dialect (read without torch)."""
    if not pack.is_dir():
        return []
    return sorted({m.group(1) for f in sorted(pack.glob("*.qpat")) for m in _DECL.finditer(f.read_text())})
