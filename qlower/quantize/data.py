"""Calibration data: an `.npz` file or a folder of them, keyed by graph input name, read one file at a
time; for a checkpoint's LLM graph a file may hold only token ids, prefilled chunk by chunk."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error


def _fail(message: str, path: Path, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=str(path), hint=hint, code="calibration"))


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if not files:
            raise _fail(f"{path} holds no .npz files", path)
        return files
    if not path.is_file():
        raise _fail(f"no such file or folder: {path}", path)
    return [path]


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise _fail(f"{path} is not a readable .npz file: {exc}", path) from None


class CalibrationData:
    """The input sets in `path`, one file read at a time. With `llm` (the checkpoint's LlmConfig), a file
    holding only `input_ids` ([T] or [N, T] token ids) stands for N prefills of T tokens each."""

    def __init__(self, path: str | Path, llm: Any = None) -> None:
        self.path, self.llm = Path(path), llm
        self.files = _files(self.path)
        self._current: Any = None

    def __iter__(self) -> Iterator[Mapping[str, np.ndarray]]:
        for file in self.files:
            arrays = _read(file)
            if self.llm is not None and set(arrays) == {"input_ids"}:
                from qlower.frontends.llm import Prefill

                ids = arrays["input_ids"]
                if ids.dtype.kind not in "iu":
                    raise _fail(f"{file}: input_ids must be integer token ids, got {ids.dtype}", file)
                for row in ids.reshape(-1, ids.shape[-1]) if ids.ndim > 1 else [ids]:
                    try:
                        self._current = Prefill(self.llm, row)
                    except ValueError as exc:
                        raise _fail(f"{file}: input_ids: {exc}", file) from None
                    for feed in self._current:
                        yield feed
                self._current = None
            else:
                self._current = None
                yield _Named(arrays, file)

    def observe(self, outputs: Mapping[str, Any]) -> None:
        if self._current is not None:
            self._current.observe(outputs)


class _Named(dict):
    """An input set that remembers its file (for error messages)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], file: Path) -> None:
        super().__init__(arrays)
        self.file = file


def first_inputs(graph: Any, data: CalibrationData, path: Path) -> None:
    """The first calibration input set in the quantized graph's stored form, written where
    `qlower lower --verify` looks for inputs (`<model>_inputs.npz`)."""
    from qlower.graph.quantize import quantize_real

    feed = next(iter(data))
    arrays = {}
    for v in graph.inputs:
        x = np.asarray(feed[v.name])
        arrays[v.name] = quantize_real(x, v.quant, v.dtype) if v.quant is not None else x.astype(v.dtype)
    tmp = path.with_suffix(".part.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
