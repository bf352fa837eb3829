"""Checking a `.pt2` archive before torch loads it: no pickle from the file runs.

`torch.export.load` unpickles parts of an archive with `weights_only=False`
(code from the file runs): weights and constants whose config says
`use_pickle`, custom and opaque objects, and sample inputs or legacy state
dicts that torch's weights-only loader refuses (torch then retries without
it). AOTInductor parts are shared libraries it would load. This module reads
the archive's directory and configs with zipfile and json only and refuses
each of those, naming the member, unless the caller trusts the file; the
pickles torch does load then are ones its weights-only unpickler accepts,
which is torch's own safe subset.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qlower.diagnostics import QlowerError, error

_TRUST_HINT = ("only if you trust whoever made the file: `--trust-pickle` (trust_pickle=True in the API) lets "
               "torch run the archive's pickles, which can run any code")
_PICKLED_PREFIXES = ("custom_obj", "opaque_obj")  # constants torch unpickles without restriction
# members torch.load()s with a weights-only attempt first and an unrestricted retry
_WEIGHTS_ONLY_PARTS = ("data/sample_inputs/", "serialized_state_dict.pt", "serialized_constants.pt",
                       "serialized_example_inputs.pt")
_MAX_CONFIG = 64 << 20  # bytes of a weights/constants config read to check it
_MAX_RATIO = 200  # a compressed member may expand this much (torch writes members stored)


def _refuse(path: Path, message: str, hint: str | None = _TRUST_HINT) -> QlowerError:
    return QlowerError(error(message, subject=f"file {path}", hint=hint, code="unsafe-pt2"))


def check_archive(path: Path) -> None:
    """Raise a clear QlowerError when loading `path` with torch would run a pickle from it (or
    read a member bigger than it admits); return when it would not."""
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a zip archive"
        raise QlowerError(error(f"cannot load {path.name} as an exported program: {what}",
                                subject=f"file {path}", code="torch-import")) from None
    with z:
        infos = z.infolist()
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED and info.file_size > _MAX_RATIO * info.compress_size + (1 << 20):
                raise _refuse(path, f"member {info.filename} claims {info.file_size} bytes from "
                              f"{info.compress_size} compressed (torch.export.save stores members uncompressed)",
                              hint=None)
        for info in infos:
            part = info.filename.partition("/")[2]  # (members sit under one folder named after the archive)
            if part.startswith("data/aotinductor/"):
                raise _refuse(path, f"member {info.filename} is AOTInductor code (a shared library torch would "
                              "load); qlower imports exported programs only", hint=None)
            if part.startswith(("data/weights/", "data/constants/")) and part.endswith("_config.json"):
                _check_config(path, z, info)
            elif part.startswith(("data/weights/", "data/constants/")) and part.endswith(".pt"):
                _check_weights_only(path, z, info, "a legacy pickled state dict")
            elif part.startswith(_WEIGHTS_ONLY_PARTS[0]) or info.filename in _WEIGHTS_ONLY_PARTS[1:]:
                _check_weights_only(path, z, info, "pickled sample inputs" if "sample" in info.filename
                                    else "a pickled state dict")


def _check_config(path: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    if info.file_size > _MAX_CONFIG:
        raise _refuse(path, f"member {info.filename} is {info.file_size} bytes, too big for a payload config",
                      hint=None)
    try:
        doc = json.loads(z.read(info))
    except (ValueError, RecursionError, zipfile.BadZipFile, OSError, EOFError):
        raise _refuse(path, f"member {info.filename} is not a readable JSON payload config", hint=None) from None
    config = doc.get("config") if type(doc) is dict else None
    if type(config) is not dict:
        raise _refuse(path, f"member {info.filename} is not a payload config (no \"config\" object)", hint=None)
    for fqn, meta in config.items():
        if type(meta) is not dict:
            raise _refuse(path, f"member {info.filename}: entry {json.dumps(fqn)} is not an object", hint=None)
        name = meta.get("path_name")
        if meta.get("use_pickle") is not False and meta.get("use_pickle") is not None:
            raise _refuse(path, f"{info.filename}: {json.dumps(fqn)} is stored as a pickle (use_pickle), which "
                          "torch loads with weights_only=False and so can run code")
        if type(name) is str and name.startswith(_PICKLED_PREFIXES):
            raise _refuse(path, f"{info.filename}: {json.dumps(fqn)} is a custom or opaque object ({name}), "
                          "which torch unpickles without restriction")


def _check_weights_only(path: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo, what: str) -> None:
    """torch tries `weights_only=True` first and retries without: refuse what the first try refuses."""
    import torch

    if info.file_size == 0:
        return
    try:
        data = z.read(info)
        with quiet_torch():
            torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the weights-only unpickler refuses, however it says so
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if "Weights only load failed" in first or "Unsupported" in first or "global" in first.lower():
            first = "it needs objects beyond tensors and containers"
        raise _refuse(path, f"member {info.filename} holds {what} that torch's weights-only loader refuses "
                      f"({first}); torch would retry with weights_only=False and run it") from None


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Keep torch's loggers and warnings quiet while it loads a file: qlower reports the failure
    itself, in one line (torch logs tracebacks of bad archives before raising)."""
    loggers = [logging.getLogger(n) for n in ("torch", "torch.export", "torch._export", "torch.export.pt2_archive",
                                              "torch.export.pt2_archive._package", "torch._export.serde.serialize")]
    saved = [(lg, lg.disabled) for lg in loggers]
    try:
        for lg in loggers:
            lg.disabled = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, was in saved:
            lg.disabled = was


def load_pt2(path: Path, *, trust_pickle: bool = False) -> Any:
    """`torch.export.load(path)`, after `check_archive` unless `trust_pickle`; torch's own logging silenced."""
    import torch

    if not trust_pickle:
        check_archive(path)
    with quiet_torch():
        return torch.export.load(str(path))
