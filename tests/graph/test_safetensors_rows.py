"""Rows of a safetensors tensor read straight into the array equal what the safetensors package reads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import save_file

from qlower.graph.lazy import SafetensorsSource

_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "uint16", "bool"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_DTYPES), st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_rows_are_what_the_package_reads(tmp_path_factory, dtype, shape, data) -> None:
    path = tmp_path_factory.mktemp("st") / "w.safetensors"
    rng = np.random.default_rng(len(shape) * 7 + shape[0])
    arr = (rng.random(shape) * 100).astype(dtype)
    save_file({"a": np.zeros(3, np.float32), "w": arr}, str(path))  # (w is not the file's first tensor)
    i = data.draw(st.integers(0, shape[0] - 1))  # (the package refuses an empty slice at the end)
    j = data.draw(st.integers(i + 1, shape[0]))
    with safe_open(str(path), framework="numpy") as f:
        want = f.get_slice("w")[i:j]
    got = SafetensorsSource(path, "w").rows(i, j)
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def test_a_file_cut_short_is_an_os_error(tmp_path) -> None:
    path = tmp_path / "w.safetensors"
    save_file({"w": np.arange(100, dtype=np.int32).reshape(10, 10)}, str(path))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(OSError, match="cut short"):
        SafetensorsSource(path, "w").rows(0, 10)


def test_a_header_whose_shape_outruns_its_data_is_refused(tmp_path) -> None:
    """A shape bigger than the tensor's data span would read the next tensor's bytes as this one's."""
    import json
    import struct

    path = tmp_path / "w.safetensors"
    save_file({"w": np.arange(12, dtype=np.int32).reshape(3, 4), "z": np.ones(8, np.int32)}, str(path))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    head["w"]["shape"] = [5, 4]  # 80 bytes from a 48-byte span: it would run into z
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (n - len(text)) if len(text) <= n else b""
    assert len(text) == n
    path.write_bytes(raw[:8] + text + raw[8 + n:])
    with pytest.raises(OSError, match="data offsets span 48 bytes"):
        SafetensorsSource(path, "w").rows(0, 5)
