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
from pathlib import Path


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
