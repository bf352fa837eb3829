"""Where qlower keeps what it may recompute (parsed rule files, the editor's last diagnostics).

One folder per kind: `$QLOWER_CACHE_DIR/<kind>`, else `$XDG_CACHE_HOME/qlower/<kind>`, else
`~/.cache/qlower/<kind>`; `QLOWER_CACHE_DIR=` (empty) turns every store off. A folder is used only when
the current user owns it and no one else can write to it (as Python trusts its own `__pycache__`): a
store may hold pickles, and a planted entry must never be read. Stores only save time, so one that is
off or not private is skipped silently.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def private(p: Path) -> bool:
    """Owned by the current user, and writable by no one else."""
    try:
        st = p.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def cache_folder(kind: str) -> Path | None:
    """The user's folder for `kind`, created private if absent; None when turned off or not private."""
    if not hasattr(os, "getuid"):
        return None  # no owner to check the folder against
    configured = os.environ.get("QLOWER_CACHE_DIR")
    if configured is not None:
        if not configured.strip():
            return None
        root = Path(configured)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "qlower"
    folder = root / kind
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return folder if private(folder) and private(root) else None


def write_entry(folder: Path, name: str, data: bytes, *, keep: int, pattern: str) -> None:
    """Write `folder/name` whole or not at all (a temporary file renamed over it, so a reader never sees
    half an entry), then, past `keep` entries matching `pattern`, drop the older half. Raises OSError."""
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    entries = list(folder.glob(pattern))
    if len(entries) <= keep:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[: len(entries) // 2]:
        p.unlink(missing_ok=True)


def open_store(kind: str, make: Callable[[Path], T]) -> T | None:
    """`make(folder)` over the user's folder for `kind`; None when that folder is off or not private, or
    `make` fails to read it (OSError)."""
    folder = cache_folder(kind)
    if folder is None:
        return None
    try:
        return make(folder)
    except OSError:
        return None
