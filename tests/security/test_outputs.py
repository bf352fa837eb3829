"""Outputs never replace inputs, and a killed run leaves no temporaries behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qlower._files import refuse_overwrite, temporary_name, write_atomic
from qlower.diagnostics import QlowerError
from hostile import graph_doc, write_graph


@pytest.fixture
def model(tmp_path) -> Path:
    return write_graph(tmp_path / "m", graph_doc(data=[1, 2, 3, 4]))


@pytest.mark.parametrize("flag", ["--report", "--timings", "--html"])
def test_lower_outputs_never_replace_the_model(model, cli, flag):
    before = model.read_bytes()
    got = cli("lower", model, "-o", model.parent / "out", "-q", flag, model)
    got.clean_failure()
    assert "it is the input" in got.err
    assert model.read_bytes() == before


def test_a_hard_link_to_the_model_is_the_model(model, cli):
    os.link(model, model.parent / "alias.json")
    got = cli("lower", model, "-o", model.parent / "out", "-q", "--report", model.parent / "alias.json")
    got.clean_failure()
    assert "it is the input" in got.err


def test_artifacts_never_replace_a_weight_file(tmp_path, cli):
    """ONNX external data named like an artifact (`m.bin`) is not overwritten by the `.bin`."""
    from hostile import external, onnx_add_model

    d = tmp_path / "m"
    d.mkdir()
    np.arange(4, dtype=np.float32).tofile(d / "m.bin")
    model = onnx_add_model(d, external("W", "m.bin"))
    before = (d / "m.bin").read_bytes()
    got = cli("lower", model, "-q")
    got.clean_failure()
    assert "refusing to write" in got.err and (d / "m.bin").read_bytes() == before


def test_run_output_never_replaces_its_inputs(model, cli, tmp_path):
    assert cli("lower", model, "-o", tmp_path / "out", "-q").code == 0
    net = tmp_path / "out" / "g_net.json"
    np.savez(tmp_path / "in.npz", x=np.ones(4, np.float32))
    for target in (net, tmp_path / "out" / "g.bin", tmp_path / "in.npz"):
        before = target.read_bytes()
        got = cli("run", net, "--inputs", tmp_path / "in.npz", "-o", target)
        got.clean_failure()
        assert "it is the input" in got.err and target.read_bytes() == before


def test_an_output_symlink_is_replaced_not_followed(model, cli):
    """(What held before and must keep holding.) A link at the output path is replaced by the file."""
    link = model.parent / "report.json"
    os.symlink(model, link)
    before = model.read_bytes()
    got = cli("lower", model, "-o", model.parent / "out", "-q", "--report", link)
    # the link names the model: refused as the model itself, nothing written through it
    assert got.code == 1 and model.read_bytes() == before
    other = model.parent / "other.txt"
    other.write_text("keep")
    link2 = model.parent / "report2.json"
    os.symlink(other, link2)
    assert cli("lower", model, "-o", model.parent / "out", "-q", "--report", link2).code == 0
    assert other.read_text() == "keep" and not link2.is_symlink()


def test_refuse_overwrite_law(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("a")
    b.write_text("b")
    refuse_overwrite([b, tmp_path / "new", None, "-"], [a])  # different files: fine
    with pytest.raises(QlowerError, match="it is the input"):
        refuse_overwrite([tmp_path / "." / "a"], [a])


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_a_killed_run_are_removed(model, cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    dead = _dead_pid()
    stale = [out / f".g_net.json.{dead}.abcd1234.tmp", out / f".g.bin.{dead}.k_3jx9q2.tmp",
             out / f".report.json.{dead}.0123abcd.tmp"]
    live = out / f".g.cpp.{os.getpid()}.abcd1234.tmp"  # a run still going (this one): kept
    foreign = out / ".g.bin.notapid.tmp"  # not ours: kept
    for f in [*stale, live, foreign]:
        f.write_bytes(b"partial")
    assert cli("lower", model, "-o", out, "-q", "--report", out / "report.json").code == 0
    assert not any(f.exists() for f in stale)
    assert live.exists() and foreign.exists()


def test_a_killed_write_leaves_nothing(tmp_path):
    """write_atomic in a child killed mid-write: no file under the final name, and what it left is
    gone after the next write there."""
    code = ("import os, signal, sys; from pathlib import Path; import qlower._files as f\n"
            "real = os.fsync\n"
            "def die(fd):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "os.fsync = die\n"
            "f.write_atomic(Path(sys.argv[1]), b'x' * 100000)\n")
    target = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", code, str(target)], env=env)
    assert not target.exists()
    write_atomic(target, b"{}")
    assert target.read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_temporary_names_carry_the_pid():
    name = temporary_name("g.bin")
    assert name.startswith(f".g.bin.{os.getpid()}.") and name.endswith(".tmp")
