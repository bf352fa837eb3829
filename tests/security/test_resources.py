"""Bounded resources: small hostile files neither hang qlower nor make it allocate what they claim.
The probes run in one child process limited to 3 GB of address space, each to a timeout
(conftest.run_bounded); each must end with qlower's own error, or succeed where the file is fine."""

from __future__ import annotations

import gzip
import io
import os
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from probe import run_bounded
from hostile import fifo, graph_doc, npy_with_header, npz_deflated_claiming, write_graph
from qlower.cli.main import main

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only (FIFOs, setrlimit)")


def _lowered(root: Path) -> Path:
    model = write_graph(root / "m", graph_doc(data=[1, 2, 3, 4]))
    assert main(["lower", str(model), "-o", str(root / "out"), "-q"]) == 0
    return root / "out" / "g_net.json"


def _bin_with_huge_member(net: Path, folder: Path) -> Path:
    """The run's artifacts again, in `folder`, their .bin led by an unreferenced 4 GiB member (sparse)."""
    folder.mkdir()
    for f in net.parent.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    bin_ = folder / "g.bin"
    with tarfile.open(net.with_name("g.bin")) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    huge = tarfile.TarInfo("junk.raw")
    huge.size = 4 << 30
    with open(bin_, "wb") as f:
        f.write(huge.tobuf(tarfile.PAX_FORMAT))
        f.seek(huge.size, os.SEEK_CUR)  # a sparse file: the 4 GiB cost no disk
        with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as t:
            for m, data in members:
                t.addfile(m, io.BytesIO(data))
    return folder / net.name


def _probes(root: Path) -> dict[str, list]:
    p: dict[str, list] = {}
    d = root / "npz"
    npz_deflated_claiming(d.mkdir() or d / "w.npz", "w", (100_000, 100_000))
    p["npz-37gib"] = ["lower", write_graph(d, graph_doc(data={"npz": "w.npz", "key": "w"})), "-o", d / "out", "-q"]
    d = root / "npyhead"
    d.mkdir()
    npy_with_header(d / "w.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "4, " * 3_000_000 + ")}\n")
    p["npy-12mb-header"] = ["lower", write_graph(d, graph_doc(data={"npy": "w.npy"})), "-o", d / "out", "-q"]
    d = root / "st"
    d.mkdir()
    (d / "w.safetensors").write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    p["safetensors-header"] = ["lower", write_graph(d, graph_doc(data={"safetensors": "w.safetensors", "key": "w"})),
                               "-o", d / "out", "-q"]
    d = root / "fifo"
    d.mkdir()
    p["fifo-model"] = ["lower", fifo(d / "g.json"), "-q"]
    p["fifo-onnx-model"] = ["lower", fifo(d / "m.onnx"), "-q"]
    fifo(d / "w.npy")
    p["fifo-weight"] = ["lower", write_graph(d, graph_doc(data={"npy": "w.npy"}), "w.json"), "-q"]
    p["fifo-inputs"] = ["lower", write_graph(d, graph_doc(data=[1, 2, 3, 4]), "ok.json"), "-q", "--verify",
                        "--inputs", fifo(d / "in.npz")]
    net = _lowered(root / "run")
    np.savez(root / "in.npz", x=np.ones(4, np.float32))
    p["bin-4gib-member"] = ["run", _bin_with_huge_member(net, root / "huge"), "--inputs", root / "in.npz",
                            "-o", root / "huge.npz"]
    gz = root / "gz"
    gz.mkdir()
    for f in net.parent.iterdir():
        (gz / f.name).write_bytes(gzip.compress(f.read_bytes()) if f.suffix == ".bin" else f.read_bytes())
    p["bin-gzip"] = ["run", gz / net.name, "--inputs", root / "in.npz", "-o", root / "gz.npz"]
    npz_deflated_claiming(root / "big_in.npz", "x", (100_000, 100_000))
    p["run-input-37gib"] = ["run", net, "--inputs", root / "big_in.npz", "-o", root / "o.npz"]
    doc = graph_doc()
    for t in ("x", "y"):
        doc["tensors"][t]["shape"] = [100_000, 100_000]
    del doc["tensors"]["w"]
    doc["nodes"][0]["inputs"] = ["x", "x"]
    p["verify-huge-input"] = ["lower", write_graph(root / "huge_in", doc), "-o", root / "huge_in" / "out", "-q",
                              "--verify"]
    return p


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("resources")
    probes = _probes(root)
    return dict(zip(probes, run_bounded(list(probes.values())))), root


EXPECTED = {"npz-37gib": "declares float32[100000, 100000]", "npy-12mb-header": "not a valid .npy header",
            "safetensors-header": "not a valid safetensors file", "fifo-model": "not a regular file",
            "fifo-onnx-model": "not a regular file", "fifo-weight": "not a regular file",
            "fifo-inputs": "not a regular file", "bin-gzip": "is compressed",
            "run-input-37gib": "declares float32[100000, 100000]", "verify-huge-input": "--max-input-bytes"}


@pytest.mark.parametrize("probe", sorted(EXPECTED))
def test_hostile_file_is_refused_within_bounds(outcomes, probe):
    got = outcomes[0][probe]
    got.clean_failure()
    assert EXPECTED[probe] in got.err, got.err


def test_bin_with_an_unreferenced_4_gib_member_is_read_without_it(outcomes):
    got, root = outcomes[0]["bin-4gib-member"], outcomes[1]
    assert got.code == 0, got.err
    with np.load(root / "huge.npz") as z:
        np.testing.assert_allclose(z["y"], [2, 3, 4, 5])
