"""Built-in .qpat functions for the limits of backends and dtypes: the lowest-rank form of data
movement, for backends whose ops stop at rank 4 (HTP's Tile, Cast, ...), where adjacent dims
that move together merge; and the range of an integer dtype. Part of the built-in table
(`builtin_functions`).
"""

from __future__ import annotations

import numpy as np

from qlower.lang.functions import EvalError, Function, _dtype


def _tile_collapse(shape: list[int], multiples: list[int]) -> list[list[int]]:
    """[shape, multiples] of the smallest-rank Tile that does what tiling `shape` by `multiples` does.

    A dim that is not repeated (multiple 1) merges into the dim before it: tiling [a, b] by
    [m, 1] repeats whole rows of b, the same as tiling [a·b] by [m]. Unit dims that are not
    repeated vanish.
    """
    if len(shape) != len(multiples):
        raise EvalError(f"shape {shape} and multiples {multiples} have different ranks")
    dims: list[int] = []
    reps: list[int] = []
    for n, m in zip(shape, multiples):
        n, m = int(n), int(m)
        if m < 1:
            raise EvalError(f"tile multiple {m} is not positive")
        if m == 1 and dims:
            dims[-1] *= n
        elif m == 1 and n == 1:
            continue
        else:
            dims.append(n)
            reps.append(m)
    return [dims or [1], reps or [1]]


def _broadcast_collapse(shape: list[int], target: list[int]) -> list[list[int]]:
    """[shape, multiples] of the smallest-rank Tile that broadcasts `shape` to `target`.

    `shape` may have fewer dims than `target` (numpy broadcasting aligns the trailing dims).
    """
    if len(shape) > len(target):
        raise EvalError(f"shape {shape} has more dims than {target}")
    lifted = [1] * (len(target) - len(shape)) + [int(s) for s in shape]
    reps = []
    for s, t in zip(lifted, target):
        if s != t and s != 1:
            raise EvalError(f"shape {shape} does not broadcast to {target}")
        reps.append(int(t) if s != t else 1)
    return _tile_collapse(lifted, reps)


def _batch_collapse(a: list[int], b: list[int]) -> list[list[int]]:
    """The batch dims of two broadcasting operands (a matrix product's leading dims), merged.

    Leading dims align from the right (numpy broadcasting). Adjacent dims merge when they
    broadcast the same way (equal in both, or 1 in the same operand); dims that are 1 in both
    vanish. Returns [a's dims, b's dims], of equal length.
    """
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + [int(x) for x in a]
    b = [1] * (n - len(b)) + [int(x) for x in b]
    out_a: list[int] = []
    out_b: list[int] = []
    kinds: list[str] = []
    for x, y in zip(a, b):
        if x == 1 and y == 1:
            continue
        kind = "eq" if x == y else "a1" if x == 1 else "b1" if y == 1 else None
        if kind is None:
            raise EvalError(f"batch dims {a} and {b} do not broadcast")
        if kinds and kinds[-1] == kind:
            out_a[-1] *= x
            out_b[-1] *= y
        else:
            out_a.append(x)
            out_b.append(y)
            kinds.append(kind)
    return [out_a, out_b]


def _int_range(dtype: str) -> list[int]:
    """[min, max] of an integer dtype (bool: [0, 1])."""
    dt = np.dtype(_dtype(dtype))
    if dt.kind == "b":
        return [0, 1]
    if dt.kind not in "iu":
        raise EvalError(f"{dt.name} is not an integer dtype")
    info = np.iinfo(dt)
    return [int(info.min), int(info.max)]


def _all_finite(t) -> bool:
    return bool(np.all(np.isfinite(np.asarray(t, dtype=np.float64))))


def _transpose_collapse(shape: list[int], perm: list[int]) -> list[list[int]]:
    """[shape, perm] of the lowest-rank Transpose that moves the same data as `perm` on `shape`.

    Unit dims vanish, and input dims that stay next to each other, in order, in the output
    merge: DepthToSpace/SpaceToDepth spelled out as a rank-6 reshape and transpose need rank 4.
    """
    if sorted(int(p) for p in perm) != list(range(len(shape))):
        raise EvalError(f"{perm} is not a permutation of the dims of {shape}")
    keep = [i for i, n in enumerate(shape) if int(n) != 1]
    order = [keep.index(int(p)) for p in perm if int(shape[int(p)]) != 1]
    groups: list[list[int]] = []
    for p in order:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    dims = [int(np.prod([int(shape[keep[i]]) for i in groups[g]])) for g in by_input]
    new_perm = [by_input.index(g) for g in range(len(groups))]
    return [dims or [1], new_perm or [0]]


LIMIT_FUNCTIONS: tuple[Function, ...] = (
    Function("batch_collapse", ("list[int]", "list[int]"), "list[list[int]]", _batch_collapse,
             doc="[a, b] batch dims of two broadcasting operands with adjacent dims that broadcast alike merged"),
    Function("all_finite", ("tensor",), "bool", _all_finite, doc="static data has no inf or NaN"),
    Function("int_range", ("dtype",), "list[int]", _int_range, doc="[min, max] of an integer dtype"),
    Function("tile_collapse", ("list[int]", "list[int]"), "list[list[int]]", _tile_collapse,
             doc="[shape, multiples] of the lowest-rank Tile equal to tiling shape by multiples"),
    Function("transpose_collapse", ("list[int]", "list[int]"), "list[list[int]]", _transpose_collapse,
             doc="[shape, perm] of the lowest-rank Transpose equal to transposing shape by perm"),
    Function("broadcast_collapse", ("list[int]", "list[int]"), "list[list[int]]", _broadcast_collapse,
             doc="[shape, multiples] of the lowest-rank Tile that broadcasts shape to target"),
)
