"""Built-in .qpat functions that lower the rank of data movement, for backends whose ops stop
at rank 4 (HTP's Tile, Cast, elementwise ops...): adjacent dims that move together merge.
Part of the built-in table (`builtin_functions`).
"""

from __future__ import annotations

from qlower.rewrite.functions import EvalError, Function


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


RANK_FUNCTIONS: tuple[Function, ...] = (
    Function("tile_collapse", ("list[int]", "list[int]"), "list[list[int]]", _tile_collapse,
             doc="[shape, multiples] of the lowest-rank Tile equal to tiling shape by multiples"),
    Function("broadcast_collapse", ("list[int]", "list[int]"), "list[list[int]]", _broadcast_collapse,
             doc="[shape, multiples] of the lowest-rank Tile that broadcasts shape to target"),
)
