"""Rule and test names under pack namespaces: a pack's rule `add` is `mllm.add` everywhere else.

A user's own files have the empty namespace, so their names stay as written.
"""

from __future__ import annotations

from collections.abc import Container


def qualify(namespace: str, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name


def resolve_rule(name: str, namespace: str, known: Container[str]) -> str | None:
    """The rule a reference from `namespace` means: its own namespace's first, then the name as written
    (a user file naming `mllm.gelu`, or a pack naming a user's rule)."""
    own = qualify(namespace, name)
    if own in known:
        return own
    return name if name in known else None
