"""The npz reader's own central-directory parser agrees with zipfile and numpy."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unittest import mock

from qlower.graph import npz as npz_module
from qlower.graph.npz import _members, _Npz

names = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="/\\"),
                min_size=1, max_size=12)
arrays = st.sampled_from(["float32", "int8", ">i2", "bool", "float64"]).flatmap(
    lambda dt: st.lists(st.integers(-100, 100), max_size=12).map(lambda xs: np.array(xs).astype(dt)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(names, arrays, min_size=0, max_size=6), st.booleans())
def test_members_and_arrays_match_zipfile_and_numpy(tmp_path: Path, content, compressed) -> None:
    path = tmp_path / "a.npz"
    (np.savez_compressed if compressed else np.savez)(path, **content)
    buf = path.read_bytes()
    ours = _members(buf)
    assert ours is not None
    with zipfile.ZipFile(io.BytesIO(buf)) as z:
        theirs = {i.filename[:-4]: (i.filename, i.compress_type, i.header_offset, i.file_size)
                  for i in z.infolist()}
    assert {k: tuple(m) for k, m in ours.items()} == theirs
    with mock.patch.object(npz_module, "_members_at_once", lambda *a: None):  # entry by entry
        assert _members(buf) == ours
    npz = _Npz.open(path)
    with np.load(path) as ref:
        assert sorted(npz.keys()) == sorted(ref.files)
        for k in ref.files:
            got, want = npz.get(k), ref[k]
            assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def test_anything_unusual_is_left_to_zipfile(tmp_path: Path) -> None:
    assert _members(b"not a zip archive at all") is None
    path = tmp_path / "a.npz"
    np.savez(path, w=np.arange(4))
    buf = bytearray(path.read_bytes())
    buf[buf.rfind(b"PK\x01\x02") + 8] |= 1  # the member claims to be encrypted
    assert _members(bytes(buf)) is None


def test_a_name_holding_the_directory_signature_is_read_entry_by_entry(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, **{"w\x01PK\x01\x02x": np.arange(3), "v": np.ones(2)})
    buf = path.read_bytes()
    assert set(_members(buf)) == {"w\x01PK\x01\x02x", "v"}
    assert _Npz.open(path).get("w\x01PK\x01\x02x").tolist() == [0, 1, 2]
