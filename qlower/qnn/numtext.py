"""Long runs of numbers as artifact text, formatted with numpy rather than one Python number at a time.

A 4-bit LLM's block encodings hold tens of millions of scales, which `_net.json` and the `.cpp` write
as lists. The text of each distinct value is made once, by the writers' own rule for one number
(`str` of an int; a float in `repr` form, NaN and the infinities as the artifact spells them), and the
run is laid out from those texts by array indexing: each element's text, with what follows it, is a
row of a fixed-width byte table, and the rows' used bytes are gathered into one buffer. The output is
the bytes `", ".join(fmt(x) for x in values)` writes, for any values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

CHUNK = 1 << 20  # elements laid out at a time (a few MB of scratch)
SMALL = 64  # runs no longer than this are joined in Python (numpy's set-up costs more)


def json_float(x: float) -> str:
    """A float as `json` writes it (allow_nan: NaN, Infinity, -Infinity)."""
    if x != x:
        return "NaN"
    if x == float("inf"):
        return "Infinity"
    if x == float("-inf"):
        return "-Infinity"
    return float.__repr__(x)


def c_float(x: float) -> str:
    """A float as a C `float` literal (`repr` with an `f`; NAN, INFINITY, -INFINITY)."""
    if x != x:
        return "NAN"
    if x in (float("inf"), float("-inf")):
        return "INFINITY" if x > 0 else "-INFINITY"
    return repr(x) + "f"


_SEQ = range(SMALL + 1)  # the codes of a short run: each value its own text


class Coded:
    """Values as codes into a table of distinct texts: `texts[codes[i]]` is value i's text."""

    __slots__ = ("codes", "texts")

    def __init__(self, codes: np.ndarray, texts: list[str]) -> None:
        self.codes, self.texts = codes, texts


def floats(values: np.ndarray, fmt: Callable[[float], str]) -> Coded:
    """Float64 values by their distinct bit patterns (-0.0 and each NaN keep their own text)."""
    a = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    if a.size <= SMALL:
        return Coded(_SEQ[:a.size], [fmt(x) for x in a.tolist()])
    bits, codes = np.unique(a.view(np.int64), return_inverse=True)
    return Coded(codes.reshape(-1), [fmt(x) for x in bits.view(np.float64).tolist()])


def ints(values: np.ndarray) -> Coded:
    """Integer values, written as `str` writes them."""
    a = np.asarray(values).reshape(-1)
    if a.size <= SMALL:
        return Coded(_SEQ[:a.size], [str(v) for v in a.tolist()])
    lo, hi = int(a.min()), int(a.max())
    if 0 <= lo and hi < 1 << 16:  # small and non-negative: the value is its code
        return Coded(a, [str(v) for v in range(hi + 1)])
    if hi - lo < max(1 << 16, 4 * a.size):  # a small range: the value less the least is its code
        return Coded(np.subtract(a, lo, dtype=np.intp), [str(v) for v in range(lo, hi + 1)])
    uniq, codes = np.unique(a, return_inverse=True)
    return Coded(codes.reshape(-1), [str(v) for v in uniq.tolist()])


def _table(texts: Sequence[str]) -> np.ndarray:
    """Texts as a fixed-width uint8 table, NUL padded (no number's text has a NUL)."""
    raw = [t.encode("utf-8") for t in texts]
    width = max(1, max(map(len, raw), default=1))
    return np.frombuffer(b"".join(r.ljust(width, b"\0") for r in raw), np.uint8).reshape(len(raw), width)


_WORD = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _gather(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    width = table.shape[1]
    word = _WORD.get(width)
    if word is not None:  # a row is one machine word: a 1-D take
        return np.take(table.view(word).reshape(-1), codes).view(np.uint8).reshape(-1, width)
    return np.take(table, codes, axis=0)


def lay_out(fields: Sequence[Coded], n: int) -> bytes:
    """Element i is `fields[0].texts[c0[i]] + fields[1].texts[c1[i]] + ...`; the elements in order.
    Each element is its fields' padded rows side by side; the padding is then deleted (bytes.translate)."""
    tables = [_table(f.texts) for f in fields]
    width = sum(t.shape[1] for t in tables)
    out: list[bytes] = []
    for a in range(0, n, CHUNK):
        b = min(n, a + CHUNK)
        if len(fields) == 1:
            block = _gather(tables[0], fields[0].codes[a:b])
        else:
            block = np.empty((b - a, width), np.uint8)
            at = 0
            for f, table in zip(fields, tables):
                block[:, at:at + table.shape[1]] = _gather(table, f.codes[a:b])
                at += table.shape[1]
        out.append(block.tobytes().translate(None, b"\0"))
    return b"".join(out)


def join(values: Coded, sep: str = ", ") -> str:
    """`sep.join(values.texts[c] for c in values.codes)`."""
    return join_fields([values], ("", ""), sep, len(values.codes))


def join_fields(fields: Sequence[Coded], glue: Sequence[str], sep: str, n: int) -> str:
    """n elements joined by `sep`, element i being `glue[0] + t0 + glue[1] + t1 + ... + glue[k]` where
    `tj` is field j's text for i (`glue` has one entry more than `fields`)."""
    if n == 0:
        return ""
    if n <= SMALL:
        return sep.join([glue[0] + "".join([f.texts[f.codes[i]] + g for f, g in zip(fields, glue[1:])])
                         for i in range(n)])
    last = len(fields) - 1  # glue folded into the tables: the first field's texts carry what precedes
    folded = [Coded(f.codes, [(glue[0] if j == 0 else "") + t + glue[j + 1] + (sep if j == last else "")
                              for t in f.texts]) for j, f in enumerate(fields)]
    text = lay_out(folded, n).decode("utf-8")
    return text[:len(text) - len(sep)] if sep else text


def rows(values: Coded, shape: tuple[int, int], fmt_row: tuple[str, str, str] = ("[", ", ", "]"),
         sep: str = ", ") -> str:
    """A 2-D run as rows: each row `open + sep_in.join(texts) + close`, the rows joined by `sep`."""
    opening, inner, closing = fmt_row
    nrows, ncols = shape
    if nrows == 0:
        return ""
    if ncols == 0:
        return sep.join([opening + closing] * nrows)
    codes = np.asarray(values.codes).reshape(nrows, ncols)
    k = len(values.texts)
    # one table of the texts twice: as a row's inner element (then `inner`) and as its last (then
    # `close + sep + open`); the run is then one layout
    last = np.zeros((nrows, ncols), np.intp)
    last[:, -1] = k
    texts = [t + inner for t in values.texts] + [t + closing + sep + opening for t in values.texts]
    text = lay_out([Coded((codes + last).reshape(-1), texts)], nrows * ncols).decode("utf-8")
    return opening + text[:len(text) - len(sep + opening)]
