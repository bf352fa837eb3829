"""Writing files so that each is either complete or absent."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from qlower.diagnostics import QlowerError, error


def write_atomic(path: Path, payload: bytes) -> None:
    """Write a temporary file in the same folder, then rename: the file is complete or absent."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise QlowerError(error(f"cannot write {path}: {e.strerror or e}", code="io")) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
