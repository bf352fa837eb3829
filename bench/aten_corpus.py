"""A corpus of small torch modules, one or a few ATen ops each with their argument variants, of the
kind a Qualcomm backend's operator tests use (in-place KV-cache updates and in-place activations
included): each is exported with `torch.export.export(strict=False)`, imported as exported and after
`run_decompositions()`, lowered for CPU and HTP, validated, run with the QNN reference kernels and
compared with torch (CPU: rtol 1e-4 of the output's peak; HTP: 2e-2, float16's). Outside the default
test run (it takes minutes); tests/frontends/test_torch_corpus.py runs a sample.

    python bench/aten_corpus.py [--backend cpu --backend htp] [--only NAME] [--json out.json]

prints one line per case that does not lower and match on some backend (with the reason) and the
totals: per backend, per path, and the better of the two paths per case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

nn = torch.nn
F = torch.nn.functional
TOL = {"cpu": 1e-4, "htp": 2e-2}


class Fn(nn.Module):
    """A module computing f(*inputs) (f may update its inputs in place)."""

    def __init__(self, f: Callable[..., Any]) -> None:
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


class WithBuffers(nn.Module):
    """State the program updates in place: f(self, *inputs) with named buffers."""

    def __init__(self, f: Callable[..., Any], **buffers: torch.Tensor) -> None:
        super().__init__()
        self.f = f
        for k, v in buffers.items():
            self.register_buffer(k, v.clone())

    def forward(self, *xs):
        return self.f(self, *xs)


Case = tuple[str, Callable[[], nn.Module], Callable[[torch.Generator], tuple]]


def _r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) * (hi - lo) + lo


def _ints(*shape: int, hi: int = 10, lo: int = -10, dtype=torch.int32) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def _nonzero_ints(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    def make(g):
        x = torch.randint(1, 6, shape, generator=g, dtype=torch.int32)
        return x * (torch.randint(0, 2, shape, generator=g, dtype=torch.int32) * 2 - 1)
    return make


def _bools(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) > 0.5


def _fn(name: str, f: Callable[..., Any], *makers: Callable[[torch.Generator], Any]) -> Case:
    return name, (lambda: Fn(f)), (lambda g: tuple(m(g) for m in makers))


def _mod(name: str, make: Callable[[], nn.Module], *makers: Callable[[torch.Generator], Any]) -> Case:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return make().eval()
    return name, build, (lambda g: tuple(m(g) for m in makers))


UNARY: dict[str, tuple[Callable, float, float]] = {
    "abs": (torch.abs, -2, 2), "neg": (torch.neg, -2, 2), "exp": (torch.exp, -2, 2),
    "log": (torch.log, 0.1, 4), "sqrt": (torch.sqrt, 0.0, 4), "rsqrt": (torch.rsqrt, 0.2, 4),
    "sin": (torch.sin, -3, 3), "cos": (torch.cos, -3, 3), "tan": (torch.tan, -1.2, 1.2),
    "tanh": (torch.tanh, -3, 3), "sigmoid": (torch.sigmoid, -4, 4), "relu": (torch.relu, -2, 2),
    "gelu": (F.gelu, -3, 3), "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), -3, 3),
    "silu": (F.silu, -3, 3), "floor": (torch.floor, -4, 4), "ceil": (torch.ceil, -4, 4),
    "round": (torch.round, -4, 4), "round_decimals": (lambda x: torch.round(x, decimals=1), -4, 4),
    "trunc": (torch.trunc, -4, 4), "sign": (torch.sign, -2, 2), "asin": (torch.asin, -0.95, 0.95),
    "acos": (torch.acos, -0.95, 0.95), "atan": (torch.atan, -4, 4), "sinh": (torch.sinh, -2, 2),
    "cosh": (torch.cosh, -2, 2), "asinh": (torch.asinh, -3, 3), "acosh": (torch.acosh, 1.0, 4),
    "atanh": (torch.atanh, -0.9, 0.9), "expm1": (torch.expm1, -2, 2), "log1p": (torch.log1p, 0.0, 4),
    "log2": (torch.log2, 0.1, 8), "log10": (torch.log10, 0.1, 8), "square": (torch.square, -3, 3),
    "reciprocal": (torch.reciprocal, 0.5, 3), "hardswish": (F.hardswish, -4, 4),
    "hardsigmoid": (F.hardsigmoid, -4, 4), "hardtanh": (F.hardtanh, -2, 2), "relu6": (F.relu6, -2, 8),
    "elu": (F.elu, -3, 3), "selu": (F.selu, -3, 3), "celu": (lambda x: F.celu(x, 0.5), -3, 3),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), -2, 2), "threshold": (lambda x: F.threshold(x, 0.5, -1.0), -2, 2),
    "clamp": (lambda x: torch.clamp(x, -0.5, 0.75), -2, 2), "clamp_min": (lambda x: torch.clamp_min(x, 0.3), -2, 2),
    "clamp_max": (lambda x: torch.clamp_max(x, 0.3), -2, 2), "softsign": (F.softsign, -3, 3),
    "mish": (F.mish, -3, 3), "logsigmoid": (F.logsigmoid, -3, 3), "isnan": (torch.isnan, -2, 2),
    "isinf": (torch.isinf, -2, 2), "pow2": (lambda x: x ** 2, -2, 2), "pow_half": (lambda x: x ** 0.5, 0.1, 4),
    "erf": (torch.erf, -2, 2), "fill": (lambda x: torch.fill(x, 1.5), -1, 1),
}

BINARY: dict[str, tuple[Callable, float, float, bool]] = {  # f, lo, hi, second operand nonzero-signed
    "add": (torch.add, -2, 2, False), "sub": (torch.sub, -2, 2, False), "mul": (torch.mul, -2, 2, False),
    "div": (torch.div, -2, 2, True), "maximum": (torch.maximum, -2, 2, False), "minimum": (torch.minimum, -2, 2, False),
    "max_other": (torch.max, -2, 2, False), "min_other": (torch.min, -2, 2, False),
    "pow": (lambda a, b: torch.pow(a.abs() + 0.5, b), -2, 2, False), "atan2": (torch.atan2, -2, 2, False),
    "remainder": (torch.remainder, -4, 4, True), "fmod": (torch.fmod, -4, 4, True),
    "floor_divide": (torch.floor_divide, -4, 4, True),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), -4, 4, True),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), -4, 4, True),
    "eq": (lambda a, b: torch.eq(a.round(), b.round()), -2, 2, False), "ne": (lambda a, b: a.round() != b.round(), -2, 2, False),
    "lt": (torch.lt, -2, 2, False), "le": (torch.le, -2, 2, False), "gt": (torch.gt, -2, 2, False),
    "ge": (torch.ge, -2, 2, False), "rsub": (lambda a, b: torch.rsub(a, b, alpha=2), -2, 2, False),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=0.5), -2, 2, False),
    "logical_xor": (torch.logical_xor, -2, 2, False), "copysign_like": (lambda a, b: a.abs() * torch.sign(b), -2, 2, True),
}


def _signed_nonzero(*shape: int, lo: float, hi: float) -> Callable[[torch.Generator], torch.Tensor]:
    def make(g):
        m = torch.rand(*shape, generator=g) * (hi - 0.5) + 0.5
        return m * (torch.randint(0, 2, shape, generator=g) * 2 - 1)
    return make


def cases() -> Iterator[Case]:
    for name, (f, lo, hi) in UNARY.items():
        for shape in ((2, 3, 4), (1, 16), (3, 1, 2, 5)):
            yield _fn(f"{name}[{'x'.join(map(str, shape))}]", f, _r(*shape, lo=lo, hi=hi))
    for name, (f, lo, hi, nz) in BINARY.items():
        second = (lambda *s: _signed_nonzero(*s, lo=lo, hi=hi)) if nz else (lambda *s: _r(*s, lo=lo, hi=hi))
        yield _fn(f"{name}[same]", f, _r(2, 3, 4, lo=lo, hi=hi), second(2, 3, 4))
        yield _fn(f"{name}[broadcast]", f, _r(2, 3, 4, lo=lo, hi=hi), second(3, 1))
        if name not in ("max_other", "min_other", "logical_xor", "eq", "ne"):
            yield _fn(f"{name}[scalar]", lambda a, f=f: f(a, torch.tensor(1.75)), _r(2, 5, lo=lo, hi=hi))
    # integers, booleans and mixed dtypes (type promotion)
    for name, f in {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "floor_divide": torch.floor_divide,
                    "remainder": torch.remainder, "fmod": torch.fmod, "div": torch.div,
                    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
                    "maximum": torch.maximum, "eq": torch.eq, "lt": torch.lt}.items():
        yield _fn(f"{name}[int32]", f, _ints(3, 4), _nonzero_ints(3, 4))
    for name, f in {"logical_and": torch.logical_and, "logical_or": torch.logical_or,
                    "logical_xor": torch.logical_xor, "bitwise_xor": torch.bitwise_xor,
                    "bitwise_and": torch.bitwise_and, "logical_not": lambda a, b: torch.logical_not(a) | b}.items():
        yield _fn(f"{name}[bool]", f, _bools(3, 4), _bools(3, 4))
    yield _fn("promote_add[int32+float]", lambda i, f: i + f, _ints(2, 3), _r(2, 3))
    yield _fn("promote_mul[float*int64]", lambda f, i: f * i, _r(2, 3), _ints(2, 3, dtype=torch.int64))
    yield _fn("promote_ne[bool,int]", lambda b, i: (b != i).float(), _bools(2, 3), _ints(2, 3, lo=0, hi=2))
    yield _fn("promote_where[int,float]", lambda c, i, f: torch.where(c, i, f), _bools(2, 3), _ints(2, 3), _r(2, 3))
    yield _fn("promote_lt[int,float]", lambda i, f: (i < f).float(), _ints(2, 3), _r(2, 3, lo=-10, hi=10))
    yield _fn("cast_to_int", lambda x: x.to(torch.int32) * 2, _r(3, 5, lo=-20, hi=20))
    yield _fn("cast_to_int64", lambda x: x.long() + 1, _r(3, 5, lo=-20, hi=20))
    yield _fn("cast_to_float", lambda i: i.float() * 0.5, _ints(3, 5))
    yield _fn("cast_to_bool", lambda x: x.bool().float(), _ints(3, 5, lo=-1, hi=2).__call__ and
              (lambda g: torch.randint(-1, 2, (3, 5), generator=g).float()))
    # reductions
    for d in (-1, 1):
        for name, f in {"sum": lambda x, d=d: x.sum(d), "mean": lambda x, d=d: x.mean(d, keepdim=True),
                        "amax": lambda x, d=d: x.amax(d), "amin": lambda x, d=d: x.amin(d),
                        "argmax": lambda x, d=d: x.argmax(d), "argmin": lambda x, d=d: x.argmin(d),
                        "max_dim": lambda x, d=d: x.max(d), "min_dim": lambda x, d=d: x.min(d, keepdim=True),
                        "prod": lambda x, d=d: x.prod(d), "var": lambda x, d=d: x.var(d),
                        "var_biased": lambda x, d=d: x.var(d, unbiased=False), "std": lambda x, d=d: x.std(d),
                        "norm2": lambda x, d=d: torch.linalg.vector_norm(x, dim=d),
                        "norm1": lambda x, d=d: torch.linalg.vector_norm(x, 1, dim=d),
                        "norm_inf": lambda x, d=d: torch.linalg.vector_norm(x, float("inf"), dim=d),
                        "softmax": lambda x, d=d: x.softmax(d), "log_softmax": lambda x, d=d: x.log_softmax(d),
                        "cumsum": lambda x, d=d: x.cumsum(d), "logsumexp": lambda x, d=d: x.logsumexp(d),
                        "any": lambda x, d=d: (x > 1).any(d).float(),
                        }.items():
            yield _fn(f"{name}[dim={d}]", f, _r(2, 5, 6, lo=0.5 if name == "prod" else -2,
                                                   hi=1.5 if name == "prod" else 2))
    yield _fn("max_all", torch.max, _r(3, 4))
    yield _fn("min_all", torch.min, _r(3, 4))
    yield _fn("argmax_flat", torch.argmax, _r(3, 4))
    yield _fn("mean_all", torch.mean, _r(3, 4))
    # orderings
    yield _fn("topk[last]", lambda x: torch.topk(x, 3), _r(3, 8))
    yield _fn("topk[dim0,smallest]", lambda x: torch.topk(x, 2, dim=0, largest=False), _r(5, 4))
    yield _fn("sort[asc]", lambda x: torch.sort(x), _r(3, 7))
    yield _fn("sort[desc,dim0]", lambda x: torch.sort(x, dim=0, descending=True), _r(6, 3))
    # shapes and indexing
    yield _fn("view", lambda x: x.view(4, 6) * 2, _r(2, 3, 4))
    yield _fn("permute", lambda x: x.permute(2, 0, 1) + 1, _r(2, 3, 4))
    yield _fn("transpose", lambda x: x.transpose(0, 2) + 1, _r(2, 3, 4))
    for dims in ((0,), (-1,), (0, 2)):
        yield _fn(f"flip{list(dims)}", lambda x, dims=dims: torch.flip(x, dims), _r(2, 3, 4))
    for reps in ((2, 1, 1), (1, 2, 3), (2, 1, 2, 1)):
        yield _fn(f"repeat{list(reps)}", lambda x, reps=reps: x.repeat(*reps), _r(2, 3, 4))
    for d in (0, 1, -1):
        yield _fn(f"stack[dim={d}]", lambda a, b, d=d: torch.stack([a, b], d), _r(2, 3), _r(2, 3))
    yield _fn("cat", lambda a, b: torch.cat([a, b], -1), _r(2, 3), _r(2, 5))
    yield _fn("concat", lambda a, b: torch.concat([a, b], 0), _r(2, 3), _r(1, 3))
    yield _fn("split", lambda x: torch.split(x, [2, 4], dim=1)[1] * 2, _r(2, 6))
    yield _fn("chunk", lambda x: torch.chunk(x, 3, dim=-1)[2] + 1, _r(2, 6))
    yield _fn("unbind", lambda x: torch.unbind(x, 1)[1] * 3, _r(2, 3, 4))
    yield _fn("squeeze", lambda x: x.squeeze(1) + 1, _r(2, 1, 4))
    yield _fn("unsqueeze", lambda x: x.unsqueeze(0) + 1, _r(2, 4))
    yield _fn("expand", lambda x: x.expand(3, 2, 4) + 0, _r(2, 1))
    yield _fn("roll", lambda x: torch.roll(x, 2, 1), _r(2, 6))
    yield _fn("narrow", lambda x: x.narrow(1, 1, 3) * 2, _r(2, 6))
    yield _fn("select", lambda x: x[:, 2] * 2, _r(3, 5))
    yield _fn("slice_step", lambda x: x[:, 1:6:2] * 2, _r(3, 8))
    yield _fn("index_select", lambda x: torch.index_select(x, 1, torch.tensor([3, 0, 0])), _r(3, 5))
    yield _fn("gather", lambda x, i: torch.gather(x, 1, i), _r(3, 5), lambda g: torch.randint(0, 5, (3, 4), generator=g))
    yield _fn("index[tensor]", lambda x, i: x[i], _r(6, 3), lambda g: torch.randint(0, 6, (4,), generator=g))
    for k in (0, 1, -1):
        yield _fn(f"triu[{k}]", lambda x, k=k: torch.triu(x, k), _r(2, 4, 5))
        yield _fn(f"tril[{k}]", lambda x, k=k: torch.tril(x, k), _r(4, 5))
    for off, d1, d2 in ((0, 0, 1), (1, 0, 1), (-1, 1, 2)):
        yield _fn(f"diagonal[{off},{d1},{d2}]", lambda x, o=off, a=d1, b=d2: torch.diagonal(x, o, a, b) * 2, _r(4, 5, 3))
    yield _fn("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), _r(1, 8, 3, 3))
    yield _fn("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), _r(1, 2, 4, 6))
    yield _fn("channel_shuffle", lambda x: F.channel_shuffle(x, 2), _r(1, 4, 3, 3))
    yield _fn("repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=1), _r(2, 3, 4))
    yield _fn("masked_fill", lambda x: x.masked_fill(x > 0.5, -1.0), _r(3, 4))
    yield _fn("where", lambda c, a, b: torch.where(c, a, b), _bools(3, 4), _r(3, 4), _r(3, 4))
    yield _fn("where_scalar", lambda a: torch.where(a > 0, a, 0.0), _r(3, 4))
    yield _fn("clamp_tensor", lambda x, lo: torch.clamp(x, min=lo), _r(3, 4), _r(4))
    yield _fn("unfold", lambda x: x.unfold(1, 3, 2) * 2, _r(2, 9))
    yield _fn("scatter_src", lambda x, s: x.scatter(1, torch.tensor([[0, 2], [1, 3]]), s), _r(2, 5), _r(2, 2))
    yield _fn("scatter_value", lambda x: x.scatter(1, torch.tensor([[0, 2], [1, 3]]), 9.0), _r(2, 5))
    yield _fn("scatter_add", lambda x, s: x.scatter_add(0, torch.tensor([[0, 1, 1], [2, 0, 0]]), s), _r(3, 3), _r(2, 3))
    yield _fn("scatter_reduce_amax", lambda x, s: x.scatter_reduce(0, torch.tensor([[0, 1, 1], [2, 0, 0]]), s, "amax"),
              _r(3, 3), _r(2, 3))
    yield _fn("select_scatter", lambda x, s: torch.select_scatter(x, s, 1, 2), _r(3, 4, 2), _r(3, 2))
    yield _fn("slice_scatter", lambda x, s: torch.slice_scatter(x, s, 1, 1, 3), _r(3, 5), _r(3, 2))
    yield _fn("index_put_fn", lambda x, v: torch.index_put(x, (torch.tensor([1, 3]),), v), _r(5, 3), _r(2, 3))
    yield _fn("index_put_accumulate", lambda x, v: torch.index_put(x, (torch.tensor([1, 1]),), v, accumulate=True),
              _r(5, 3), _r(2, 3))
    yield _fn("index_copy_fn", lambda x, v: x.index_copy(0, torch.tensor([4, 0]), v), _r(5, 3), _r(2, 3))
    yield _fn("einsum_bmm", lambda a, b: torch.einsum("bij,bjk->bik", a, b), _r(2, 3, 4), _r(2, 4, 5))
    # in-place updates of inputs (USER_INPUT_MUTATION)
    for name, f in {"relu_": lambda x: torch.relu_(x), "leaky_relu_": lambda x: F.leaky_relu_(x, 0.1),
                    "threshold_": lambda x: F.threshold_(x, 0.2, 0.0), "mul_": lambda x: x.mul_(2.0),
                    "add_": lambda x: x.add_(1.0), "clamp_": lambda x: x.clamp_(-0.5, 0.5),
                    "masked_fill_": lambda x: x.masked_fill_(x < 0, 0.0),
                    "index_fill_slice": lambda x: x.__setitem__((slice(None), 0), 5.0)}.items():
        yield _fn(f"inplace_{name}", lambda x, f=f: (f(x), x * 1.5)[1], _r(3, 4))
    # KV caches and other buffer updates (BUFFER_MUTATION)
    def kv_copy(dim: int, n: int) -> Case:
        shape = [1, 2, 8, 4]
        upd = list(shape)
        upd[dim] = n

        def f(m, k, pos, dim=dim):
            m.cache.index_copy_(dim, pos, k)
            return m.cache * 1.0
        return (f"kv_index_copy[dim={dim},n={n}]", lambda: WithBuffers(f, cache=torch.zeros(shape)),
                lambda g: (torch.randn(*upd, generator=g), torch.randperm(shape[dim], generator=g)[:n]))

    for dim, n in ((2, 1), (2, 3), (1, 1), (3, 2), (0, 1)):
        yield kv_copy(dim, n)

    def kv_assign(n: int, two: bool) -> Case:
        def f(m, k, v, pos):
            m.k_cache[:, :, pos] = k
            if two:
                m.v_cache[:, :, pos] = v
                return torch.cat([m.k_cache, m.v_cache], -1)
            return m.k_cache + v.sum()
        return (f"kv_index_put[n={n},two={two}]",
                lambda: WithBuffers(f, k_cache=torch.zeros(1, 2, 8, 4), v_cache=torch.zeros(1, 2, 8, 4)),
                lambda g: (torch.randn(1, 2, n, 4, generator=g), torch.randn(1, 2, n, 4, generator=g),
                           torch.randperm(8, generator=g)[:n]))

    for n in (1, 2, 5):
        for two in (False, True):
            yield kv_assign(n, two)

    def kv_slice(start: int) -> Case:
        def f(m, k):
            m.cache[:, start:start + 2] = k
            return m.cache + 0.0
        return (f"kv_slice_assign[{start}]", lambda: WithBuffers(f, cache=torch.zeros(2, 6, 3)),
                lambda g: (torch.randn(2, 2, 3, generator=g),))

    for start in (0, 2, 4):
        yield kv_slice(start)

    def counter() -> Case:
        def f(m, x):
            m.steps.add_(1.0)
            return x * m.steps
        return "buffer_add_", lambda: WithBuffers(f, steps=torch.zeros(1)), lambda g: (torch.randn(3, generator=g),)

    yield counter()

    def ring(dim: int) -> Case:
        def f(m, x):
            new = torch.cat([m.buf[:, 1:], x], dim=1)
            m.buf.copy_(new)
            return m.buf.mean(1)
        return f"ring_buffer_copy_[{dim}]", lambda: WithBuffers(f, buf=torch.zeros(2, 5, 3)), \
            lambda g: (torch.randn(2, 1, 3, generator=g),)

    yield ring(1)
    # modules
    yield _mod("linear", lambda: nn.Linear(8, 5), _r(3, 8))
    yield _mod("linear_nobias_3d", lambda: nn.Linear(8, 5, bias=False), _r(2, 3, 8))
    yield _mod("addmm_alpha_beta", lambda: Fn(lambda b, a, c: torch.addmm(b, a, c, beta=0.5, alpha=2.0)),
               _r(5), _r(3, 4), _r(4, 5))
    yield _mod("bmm", lambda: Fn(torch.bmm), _r(2, 3, 4), _r(2, 4, 5))
    yield _mod("matmul_bcast", lambda: Fn(torch.matmul), _r(2, 3, 4), _r(4, 5))
    yield _mod("conv1d", lambda: nn.Conv1d(3, 4, 3, padding=1), _r(1, 3, 10))
    yield _mod("conv2d", lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), _r(1, 3, 8, 8))
    yield _mod("conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, groups=4, padding=1), _r(1, 4, 6, 6))
    yield _mod("conv_transpose2d", lambda: nn.ConvTranspose2d(3, 2, 2, stride=2), _r(1, 3, 4, 4))
    yield _mod("batch_norm2d", lambda: nn.BatchNorm2d(3), _r(2, 3, 4, 4))
    yield _mod("batch_norm2d_noaffine", lambda: nn.BatchNorm2d(3, affine=False), _r(2, 3, 4, 4))
    yield _mod("batch_norm1d", lambda: nn.BatchNorm1d(4), _r(2, 4, 6))
    yield _mod("instance_norm2d", lambda: nn.InstanceNorm2d(3, affine=True), _r(2, 3, 4, 5))
    yield _mod("instance_norm1d", lambda: nn.InstanceNorm1d(3), _r(2, 3, 8))
    yield _mod("group_norm", lambda: nn.GroupNorm(2, 4), _r(2, 4, 3, 3))
    yield _mod("layer_norm", lambda: nn.LayerNorm(6), _r(2, 3, 6))
    yield _mod("rms_norm", lambda: nn.RMSNorm(6), _r(2, 3, 6))
    yield _mod("max_pool2d", lambda: nn.MaxPool2d(2), _r(1, 3, 6, 6))
    yield _mod("max_pool2d_pad", lambda: nn.MaxPool2d(3, 2, 1), _r(1, 3, 7, 7))
    yield _mod("avg_pool2d", lambda: nn.AvgPool2d(2), _r(1, 3, 6, 6))
    yield _mod("avg_pool3d", lambda: nn.AvgPool3d(2), _r(1, 2, 4, 4, 4))
    yield _mod("max_pool3d", lambda: nn.MaxPool3d(2), _r(1, 2, 4, 4, 4))
    yield _mod("adaptive_avg_pool2d", lambda: nn.AdaptiveAvgPool2d((2, 3)), _r(1, 3, 4, 6))
    yield _mod("adaptive_avg_pool2d_global", lambda: nn.AdaptiveAvgPool2d(1), _r(1, 3, 4, 6))
    yield _mod("adaptive_max_pool2d", lambda: nn.AdaptiveMaxPool2d((2, 3)), _r(1, 3, 4, 6))
    yield _mod("adaptive_avg_pool3d", lambda: nn.AdaptiveAvgPool3d((2, 1, 2)), _r(1, 2, 4, 4, 4))
    yield _mod("upsample_nearest", lambda: nn.Upsample(scale_factor=2, mode="nearest"), _r(1, 3, 4, 4))
    yield _mod("upsample_nearest_size", lambda: nn.Upsample(size=(6, 9), mode="nearest"), _r(1, 2, 3, 3))
    yield _mod("upsample_bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), _r(1, 3, 4, 4))
    yield _mod("upsample_bilinear_aligned", lambda: nn.Upsample(size=(7, 7), mode="bilinear", align_corners=True),
               _r(1, 2, 4, 4))
    yield _mod("upsample_bicubic", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), _r(1, 2, 4, 4))
    yield _mod("upsample_bicubic_aligned", lambda: nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True),
               _r(1, 2, 4, 4))
    yield _mod("reflection_pad2d", lambda: nn.ReflectionPad2d((1, 2, 2, 1)), _r(1, 2, 5, 5))
    yield _mod("reflection_pad1d", lambda: nn.ReflectionPad1d(2), _r(1, 2, 6))
    yield _mod("replication_pad2d", lambda: nn.ReplicationPad2d(1), _r(1, 2, 4, 4))
    yield _mod("zero_pad2d", lambda: nn.ZeroPad2d((1, 0, 2, 1)), _r(1, 2, 4, 4))
    yield _mod("prelu", lambda: nn.PReLU(3), _r(1, 3, 4, 4))
    yield _mod("prelu_single", lambda: nn.PReLU(), _r(2, 6))
    yield _mod("glu", lambda: nn.GLU(), _r(2, 8))
    yield _mod("glu_dim1", lambda: nn.GLU(1), _r(2, 6, 3))
    yield _mod("pixel_shuffle_mod", lambda: nn.PixelShuffle(3), _r(1, 9, 2, 2))
    yield _mod("log_softmax_mod", lambda: nn.LogSoftmax(1), _r(2, 5, 3))
    yield _mod("softmax_dim0", lambda: nn.Softmax(0), _r(4, 5))
    yield _mod("embedding", lambda: nn.Embedding(10, 4), lambda g: torch.randint(0, 10, (2, 5), generator=g))
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            yield _fn(f"grid_sample[{mode},{pad}]",
                      lambda x, gr, mode=mode, pad=pad: F.grid_sample(x, gr, mode=mode, padding_mode=pad,
                                                                      align_corners=False),
                      _r(1, 2, 5, 6), _r(1, 3, 4, 2, lo=-1.1, hi=1.1))
    yield _fn("sdpa_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
              _r(1, 2, 4, 8), _r(1, 2, 6, 8), _r(1, 2, 6, 8), lambda g: torch.randn(1, 1, 4, 6, generator=g))
    yield _fn("cdist", lambda a, b: torch.cdist(a, b), _r(2, 4, 3), _r(2, 5, 3))
    yield _fn("pdist", lambda a: F.pdist(a), _r(5, 3))


# ------------------------------------------------------------------------------------------- running
def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for e in x for t in _flat(e)]
    return []


def _close(got: np.ndarray, want: np.ndarray, tol: float) -> float | None:
    """The largest error relative to the output's peak, or None when it is within `tol`."""
    want = want.astype(np.float64)
    got = np.asarray(got, np.float64).reshape(want.shape) if got.size == want.size else None
    if got is None:
        return float("inf")
    peak = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-6)
    err = float(np.max(np.abs(got - want))) / peak if want.size else 0.0
    return None if err <= tol else err


def run_case(case: Case, backends: tuple[str, ...], rules: Any, seed: int = 0) -> dict[str, dict[str, str]]:
    """{backend: {path: "ok" | reason}} for one case, path "exported" or "core"."""
    import qlower
    from qlower.diagnostics import QlowerError
    from qlower.frontends.torch_frontend import STATE_SUFFIX, load_exported
    from qlower.reference.interpreter import run_dequantized

    name, build, make_inputs = case
    args = make_inputs(torch.Generator().manual_seed(seed))
    out: dict[str, dict[str, str]] = {b: {} for b in backends}
    try:
        with torch.no_grad():
            ref_mod = build()
            ref_args = tuple(a.clone() for a in args)
            want_user = _flat(ref_mod(*ref_args))
            ep0 = torch.export.export(build(), tuple(a.clone() for a in args), strict=False)
    except Exception as exc:  # noqa: BLE001 - the corpus reports, it does not stop
        for b in backends:
            out[b] = {"exported": f"export: {str(exc).splitlines()[0][:160]}", "core": "export"}
        return out
    for path in ("exported", "core"):
        try:
            ep = ep0.run_decompositions() if path == "core" else ep0.run_decompositions({})
            sig = ep.graph_signature  # functional: the in-place updates are outputs here
            graph = load_exported(ep)
        except QlowerError as exc:
            for b in backends:
                out[b][path] = f"import: {exc.diagnostics[0].message[:200]}"
            continue
        except Exception as exc:  # noqa: BLE001
            for b in backends:
                out[b][path] = f"import crash: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            continue
        # what the runtime feeds: the user's inputs, then each state's value at export
        feeds: dict[str, np.ndarray] = {}
        user = [v for v in graph.inputs if not v.name.endswith(STATE_SUFFIX)]
        state_vals = {"".join(c if c.isalnum() or c == "_" else "_" for c in t): build().get_buffer(t)
                      for t in sig.buffers_to_mutate.values()}
        for v, a in zip(user, args):
            feeds[v.name] = a.numpy().astype(np.int32) if a.dtype == torch.int64 else a.numpy()
        for v in graph.inputs:
            if v.name in state_vals:
                feeds[v.name] = state_vals[v.name].numpy()
        want = [t.numpy() for t in want_user]
        want_state = {}
        for t in sig.buffers_to_mutate.values():
            want_state["".join(c if c.isalnum() or c == "_" else "_" for c in t) + STATE_SUFFIX] = \
                ref_mod.get_buffer(t).numpy()
        for i, t in enumerate(sig.user_inputs_to_mutate.values()):
            want_state[t + STATE_SUFFIX] = ref_args[list(sig.user_inputs).index(t)].numpy()
        for b in backends:
            try:
                # each backend lowers its own copy: lowering the same Graph for CPU and then HTP can
                # pick rules the first lowering decided (seen with acos), an engine issue of its own
                result = qlower.lower(graph.copy(), rules, backend=b)
                result.raise_for_errors()
            except QlowerError as exc:
                d = exc.diagnostics[0]
                out[b][path] = f"lower: {(d.subject + ': ') if d.subject else ''}{d.message.splitlines()[0][:220]}"
                continue
            try:
                got = run_dequantized(result.qnn, feeds)
            except Exception as exc:  # noqa: BLE001
                out[b][path] = f"run: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                continue
            names = list(result.qnn.outputs)
            bad = []
            for n, w in zip(names, want):
                err = _close(got[n], w, TOL[b])
                if err is not None:
                    bad.append(f"{n} off by {err:.3g} of its peak")
            for n, w in want_state.items():
                if n in got:
                    err = _close(got[n], w, TOL[b])
                    if err is not None:
                        bad.append(f"state {n} off by {err:.3g}")
                else:
                    bad.append(f"state {n} is not an output")
            out[b][path] = "ok" if not bad else "wrong: " + "; ".join(bad)[:220]
    return out


def main(argv: list[str] | None = None) -> int:
    import warnings

    import qlower

    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", choices=["cpu", "htp"], help="default: cpu and htp")
    ap.add_argument("--only", action="append", help="run the cases whose name contains this")
    ap.add_argument("--json", help="write every case's result here")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument("--shard", default="1/1", help="K/N: run every N-th case from the K-th (parallel runs)")
    ap.add_argument("--shuffle", type=int, help="run the cases in an order drawn with this seed (a partial run is then a uniform sample)")
    a = ap.parse_args(argv)
    backends = tuple(a.backend or ("cpu", "htp"))
    all_cases = list(cases())
    if a.list:
        print("\n".join(c[0] for c in all_cases), f"\n{len(all_cases)} cases")
        return 0
    chosen = [c for c in all_cases if not a.only or any(s in c[0] for s in a.only)]
    if a.shuffle is not None:
        import random

        random.Random(a.shuffle).shuffle(chosen)
    k, n_shards = (int(p) for p in a.shard.split("/"))
    chosen = chosen[k - 1::n_shards]
    rules = qlower.load_rules(packs=["aten"])
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    for case in chosen:
        results[case[0]] = run_case(case, backends, rules)
        if a.json:  # as it goes, so that a long run can be read before it ends
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
        for b in backends:
            r = results[case[0]][b]
            if "ok" not in r.values():
                print(f"{b:4} {case[0]}: {r.get('exported')} | core: {r.get('core')}", flush=True)
    n = len(chosen)
    print(f"\n{n} cases in {time.perf_counter() - t0:.0f} s")
    for b in backends:
        best = sum(1 for r in results.values() if "ok" in r[b].values())
        per = {p: sum(1 for r in results.values() if r[b].get(p) == "ok") for p in ("exported", "core")}
        print(f"{b}: {best}/{n} lower and match ({100 * best / n:.1f}%), exported {per['exported']}, "
              f"after run_decompositions() {per['core']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
