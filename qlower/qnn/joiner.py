"""A kind's text with names joined in, compiled once per kind.

The writers format each kind of tensor or node once, with stand-in names, and cut the
text at the stand-ins. What is left is constant text around argument slots; `compile_join`
turns that into one Python function per kind that joins a tensor's or node's names into
it with a single f-string: no slot loop, no list copy per line. On a
million-op graph that is most of what writing its text costs.

The generated source is made from the slot shapes alone (argument names and integer
positions); the constant text reaches the function as a default argument, never as code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# A slot: ("n",) the node's (or tensor's) name, ("i", k) input k's, ("o", k) output k's,
# ("s",) the names of `s` as a list of C or JSON strings without its brackets (`"a", "b"`).
Slot = tuple[str] | tuple[str, int]
_NAMES = {"n": "n", "s": "_quoted(s)"}
_AT = {"i": ("I", "a"), "o": ("O", "b")}  # an op's k-th input is I[a + k], its k-th output O[b + k]


def _quoted(s: tuple[str, ...]) -> str:
    if len(s) == 1:
        return f'"{s[0]}"'
    return '"' + '", "'.join(s) + '"' if s else ""


def compile_join(parts: Sequence[str | Slot]) -> Callable[..., str]:
    """`f(n, I, a, O, b, s)`: the constant parts (strings) with each slot replaced by its argument: `n`,
    input k `I[a + k]`, output k `O[b + k]` (a table's flat name lists and the op's offsets), `s`.

    The function is one f-string (CPython builds it straight from its pieces, about twice as fast
    as joining a tuple); the constant pieces are its default arguments."""
    consts: list[str] = []
    code: list[str] = []
    pending = ""
    for part in parts:
        if isinstance(part, str):
            pending += part
            continue
        if pending:
            code.append(f"{{C{len(consts)}}}")
            consts.append(pending)
            pending = ""
        what = part[0]
        if what in _AT:
            names, at = _AT[what]
            k = int(part[1])  # type: ignore[misc]
            code.append(f"{{{names}[{at} + {k}]}}" if k else f"{{{names}[{at}]}}")
        else:
            code.append(f"{{{_NAMES[what]}}}")
    if pending:
        code.append(f"{{C{len(consts)}}}")
        consts.append(pending)
    defaults = "".join(f", C{k}=C[{k}]" for k in range(len(consts)))
    body = f"f'{''.join(code)}'" if code else "''"
    return eval(f"lambda n, I, a, O, b, s{defaults}, _quoted=_quoted: {body}",  # noqa: S307 - see the module docstring
                {"__builtins__": {}, "C": tuple(consts), "_quoted": _quoted})


_NOT_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_\n]")
_DIGIT_FIRST = re.compile(r"\n[0-9]")
_NOT_PLAIN_JSON = re.compile(r'[^ !#-\[\]-~\n]')


def _joined(names: Sequence[str]) -> str | None:
    """The names joined by newlines, or None when a name is empty or holds a newline itself."""
    text = "\n".join(names)
    if text.count("\n") != len(names) - 1 or not text or text[0] == "\n" or text[-1] == "\n" or "\n\n" in text:
        return None
    return text


def all_identifiers(names: Sequence[str]) -> bool:
    """Whether every name is an ASCII C identifier (a few scans of the joined names, at C speed)."""
    if not names:
        return True
    text = _joined(names)
    return (text is not None and text.isascii() and _NOT_IDENT_CHAR.search(text) is None
            and not text[0].isdigit() and _DIGIT_FIRST.search(text) is None)


def all_plain_json(names: Sequence[str]) -> bool:
    """Whether every name is non-empty and its own JSON string body (printable ASCII, no `"` or backslash)."""
    if not names:
        return True
    text = _joined(names)
    return text is not None and _NOT_PLAIN_JSON.search(text) is None
