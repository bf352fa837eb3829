"""Confinement: every file a model refers to lies inside the model's folder, is a regular file, and
a file that fails to parse is never quoted. Each class through the API and the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import qlower
from qlower.api import load_model
from qlower.diagnostics import QlowerError
from hostile import (SECRET, external, fifo, graph_doc, npz_of, onnx_add_model, secret_beside, write_graph)


def _refused(path: Path, *needles: str) -> QlowerError:
    with pytest.raises(QlowerError) as e:
        load_model(path)
    text = str(e.value)
    assert SECRET.decode()[:12] not in text
    for n in needles:
        assert n in text, text
    return e.value


def _no_leak(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file() and not f.is_symlink() and f.name != "secret.txt":
            assert SECRET not in f.read_bytes(), f


# ---------------------------------------------------------------- ONNX external data
def _onnx_cases(root: Path) -> dict[str, Path]:
    secret = secret_beside(root)
    out = {}
    d = root / "abs"
    out["absolute"] = onnx_add_model(d, external("W", str(secret.resolve())))
    out["dotdot"] = onnx_add_model(root / "dotdot", external("W", "../secret.txt"))
    d = root / "link"
    d.mkdir()
    os.symlink(secret.resolve(), d / "w.bin")
    out["symlink"] = onnx_add_model(d, external("W", "w.bin"))
    d = root / "fifo"
    d.mkdir()
    fifo(d / "w.bin")
    out["fifo"] = onnx_add_model(d, external("W", "w.bin"))
    out["folder"] = onnx_add_model(root / "dot", external("W", "."))
    return out


EXPECTED = {"absolute": "absolute paths are refused", "dotdot": "outside the model's folder",
            "symlink": "outside the model's folder", "fifo": "not a regular file", "folder": "not a regular file"}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_onnx_external_data_stays_in_the_model_folder(tmp_path, cli, case):
    model = _onnx_cases(tmp_path)[case]
    _refused(model, "initializer W", EXPECTED[case])
    got = cli("lower", model, "-o", model.parent / "out", "-q")
    got.clean_failure()
    assert EXPECTED[case] in got.err and SECRET.decode()[:12] not in got.err
    assert not (model.parent / "out").exists() or not any((model.parent / "out").iterdir())
    _no_leak(tmp_path)


def test_onnx_external_data_inside_the_folder_still_loads(tmp_path):
    """The rule refuses what leaves the folder, not external data as such (a link inside is fine)."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "data").mkdir()
    np.arange(4, dtype=np.float32).tofile(d / "data" / "w.bin")
    os.symlink("data/w.bin", d / "alias.bin")
    for loc in ("data/w.bin", "alias.bin", "data/../data/w.bin"):
        g = load_model(onnx_add_model(d, external("W", loc)))
        np.testing.assert_array_equal(np.asarray(g.value("W").data), np.arange(4, dtype=np.float32))


# ---------------------------------------------------------------- qlower-graph/1 references
def _graph_cases(root: Path) -> dict[str, tuple[Path, str]]:
    secret = secret_beside(root)
    (root / "outside.npy").write_bytes(b"")
    np.save(root / "outside.npy", np.ones(4, np.float32))
    npz_of(root / "outside.npz", w=np.ones(4, np.float32))
    save_file({"w": np.ones(4, np.float32)}, str(root / "outside.safetensors"))
    out = {}
    d = root / "m"
    d.mkdir()
    os.symlink(root / "outside.npy", d / "link.npy")
    fifo(d / "pipe.npy")
    cases = {
        "npy-absolute": ({"npy": str((root / "outside.npy").resolve())}, "absolute paths are refused"),
        "npy-dotdot": ({"npy": "../outside.npy"}, "outside the model's folder"),
        "npy-symlink": ({"npy": "link.npy"}, "outside the model's folder"),
        "npy-fifo": ({"npy": "pipe.npy"}, "not a regular file"),
        "npy-secret": ({"npy": str(secret)}, "absolute paths are refused"),
        "npz-dotdot": ({"npz": "../outside.npz", "key": "w"}, "outside the model's folder"),
        "safetensors-dotdot": ({"safetensors": "../outside.safetensors", "key": "w"}, "outside the model's folder"),
    }
    for name, (ref, why) in cases.items():
        out[name] = (write_graph(d, graph_doc(data=ref), f"{name}.json"), why)
    scale = {"scale": {"npy": "../outside.npy"}, "zero_point": None, "axis": 0}
    out["quant-scale-dotdot"] = (write_graph(d, graph_doc(data=[1, 2, 3, 4], dtype="int8", quant=scale),
                                             "quant.json"), "outside the model's folder")
    return out


GRAPH_CASES = ["npy-absolute", "npy-dotdot", "npy-symlink", "npy-fifo", "npy-secret", "npz-dotdot",
               "safetensors-dotdot", "quant-scale-dotdot"]


@pytest.mark.parametrize("case", GRAPH_CASES)
def test_graph_references_stay_in_the_model_folder(tmp_path, cli, case):
    model, why = _graph_cases(tmp_path)[case]
    _refused(model, "refused", why)
    got = cli("lower", model, "-o", tmp_path / "out", "-q")
    got.clean_failure()
    assert why in got.err
    _no_leak(tmp_path)


# ---------------------------------------------------------------- never echo a file that failed to parse
def test_a_weight_file_that_fails_to_parse_is_not_quoted(tmp_path, cli):
    d = tmp_path / "m"
    d.mkdir()
    for name in ("w.npy", "w.npz", "w.safetensors"):
        (d / name).write_bytes(SECRET * 8)
    refs = {"npy": {"npy": "w.npy"}, "npz": {"npz": "w.npz", "key": "w"},
            "st": {"safetensors": "w.safetensors", "key": "w"}}
    for kind, ref in refs.items():
        model = write_graph(d, graph_doc(data=ref), f"{kind}.json")
        _refused(model)
        got = cli("lower", model, "-o", d / "out", "-q")
        got.clean_failure()
        assert SECRET.decode()[:12] not in got.err


def test_a_safetensors_header_that_is_not_json_is_not_quoted(tmp_path):
    from hostile import safetensors_raw

    d = tmp_path / "m"
    d.mkdir()
    safetensors_raw(d / "w.safetensors", '"' + SECRET.decode() + '"', b"")
    _refused(write_graph(d, graph_doc(data={"safetensors": "w.safetensors", "key": "w"})), "not the JSON")


def test_rule_import_of_a_non_rule_file_is_refused_unquoted(tmp_path, cli):
    secret = secret_beside(tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    for i, target in enumerate([str(secret), "../secret.txt"]):
        f = rules / f"r{i}.qpat"
        f.write_text(f'import "{target}"\n')
        with pytest.raises(QlowerError) as e:
            qlower.load_rules([f])
        assert "refused" in str(e.value) and SECRET.decode()[:12] not in str(e.value)
    got = cli("check", f)
    assert got.code == 1 and "refused" in got.err and SECRET.decode()[:12] not in got.err + got.out


def test_a_packs_path_import_stays_in_the_pack(tmp_path):
    from qlower.lang.loader import load_rules

    secret_beside(tmp_path)
    (tmp_path / "other.qpat").write_text("")
    pack = tmp_path / "packs" / "evil"
    pack.mkdir(parents=True)
    (pack / "ops.qpat").write_text('import "../../other.qpat"\n')
    user = tmp_path / "main.qpat"
    user.write_text("import evil\n")
    with pytest.raises(QlowerError) as e:
        load_rules([user], packs={"evil": pack}, packs_dir=tmp_path / "packs")
    assert "outside the pack's folder" in str(e.value)
