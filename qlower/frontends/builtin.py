"""The frontends qlower ships; each imports lazily so optional extras stay optional."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class Frontend:
    """Imports a model file into a Graph. `suffixes` pick it for `--frontend auto`."""

    name: str
    suffixes: tuple[str, ...]
    load: Callable[[Path], Any]
    # keyword options `load` also takes (e.g. "input_shapes": name → dims for symbolic inputs)
    options: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)


def _json(path: Path):
    from qlower.graph.io import load_graph

    return load_graph(path)


def _onnx(path: Path, *, input_shapes=None):
    from qlower.frontends.onnx_frontend import load_onnx  # raises a clear QlowerError without onnx

    return load_onnx(path, input_shapes=input_shapes)


def _torch(path: Path, *, trust_pickle: bool = False):
    from qlower.frontends.torch_frontend import load_exported  # raises a clear QlowerError without torch

    return load_exported(path, trust_pickle=trust_pickle)


def _hf(path: Path, *, chunk=None, context=None):
    from qlower.frontends.hf_checkpoint import DEFAULT_CHUNK, DEFAULT_CONTEXT, load_checkpoint

    return load_checkpoint(path, chunk=chunk or DEFAULT_CHUNK, context=context or DEFAULT_CONTEXT)


def builtin_frontends() -> tuple[Frontend, ...]:
    # "hf" reads a folder (config.json + *.safetensors), which `--frontend auto` picks for any folder
    return (Frontend("json", (".json",), _json), Frontend("onnx", (".onnx",), _onnx, options={"input_shapes"}),
            Frontend("torch", (".pt2",), _torch, options={"trust_pickle"}), Frontend("hf", ("/",), _hf, options={"chunk", "context"}))
