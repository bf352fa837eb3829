"""`.pt2` archives: no pickle from the file runs unless the user trusts it, and torch's logger
prints nothing (qlower's one-line error is all)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from qlower.api import load_model  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from hostile import evil_pickle  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x))


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "net.pt2"
    torch.export.save(torch.export.export(_Net(), (torch.randn(2, 4),)), str(path))
    return path


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the archive with members changed (None drops one) and members added."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        prefix = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            data = change(info.filename.partition("/")[2], zin.read(info))
            if data is not None:
                zout.writestr(info.filename, data)
        for name, data in change.__dict__.get("added", {}).items():
            zout.writestr(f"{prefix}/{name}", data)
    return dst


def _evil(kind: str, clean: Path, folder: Path, marker: Path) -> Path:
    evil = evil_pickle(marker)

    def change(part: str, data: bytes):
        if kind == "use-pickle-weight":
            if part.endswith("model_weights_config.json"):
                doc = json.loads(data)
                first = next(iter(doc["config"]))
                doc["config"][first]["use_pickle"] = True
                return json.dumps(doc).encode()
            if part == "data/weights/weight_0":
                return evil
        if kind == "sample-inputs" and part.startswith("data/sample_inputs/"):
            return evil
        if kind in ("opaque-object", "custom-object") and part.endswith("model_constants_config.json"):
            name = "opaque_obj_0" if kind == "opaque-object" else "custom_obj_0"
            return json.dumps({"config": {"obj": {"path_name": name, "is_param": False, "use_pickle": False,
                                                  "tensor_meta": None}}}).encode()
        return data

    if kind in ("opaque-object", "custom-object"):
        change.added = {f"data/constants/{'opaque' if kind == 'opaque-object' else 'custom'}_obj_0": evil}
    if kind == "aotinductor":
        change.added = {"data/aotinductor/model/model.so": b"\x7fELF"}
    return _rewrite(clean, folder / f"{kind}.pt2", change)


KINDS = {"use-pickle-weight": "use_pickle", "sample-inputs": "weights-only loader refuses",
         "opaque-object": "custom or opaque object", "custom-object": "custom or opaque object",
         "aotinductor": "AOTInductor"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_pickle_from_the_archive_runs(clean, tmp_path, cli, kind):
    marker = tmp_path / "RAN"
    path = _evil(kind, clean, tmp_path, marker)
    with pytest.raises(QlowerError) as e:
        load_model(path)
    assert KINDS[kind] in str(e.value)
    assert not marker.exists()
    got = cli("lower", path, "-q")
    got.clean_failure()
    assert KINDS[kind] in got.err and ("--trust-pickle" in got.err or kind == "aotinductor")
    assert not marker.exists()


def test_trust_pickle_hands_the_file_to_torch(clean, tmp_path):
    """The flag is the user's explicit choice: torch then runs the pickle (here, one that makes a file)."""
    marker = tmp_path / "RAN"
    path = _evil("sample-inputs", clean, tmp_path, marker)
    try:
        load_model(path, trust_pickle=True)
    except QlowerError:
        pass  # (the marker object is no sample input: torch fails after running it)
    assert marker.exists()


def test_a_clean_archive_still_loads(clean):
    g = load_model(clean)
    assert any(op.type.startswith("aten.") for op in g.ops)


def test_broken_archives_give_one_line_and_no_torch_log(clean, tmp_path, capfd):
    """(capfd: torch's log handler writes to the process's stderr, which capsys would not see.)"""
    from qlower.cli.main import main

    (tmp_path / "empty.pt2").write_bytes(b"")
    (tmp_path / "garbage.pt2").write_bytes(b"not a zip archive at all\n" * 40)
    (tmp_path / "truncated.pt2").write_bytes(clean.read_bytes()[: len(clean.read_bytes()) // 2])
    no_version = _rewrite(clean, tmp_path / "noversion.pt2", lambda part, d: None if part == "archive_version" else d)
    for path in (tmp_path / "empty.pt2", tmp_path / "garbage.pt2", tmp_path / "truncated.pt2", no_version):
        code = main(["lower", str(path), "-q"])
        err = capfd.readouterr().err
        assert code == 1 and "Traceback" not in err and "internal error" not in err, err
        lines = err.strip().splitlines()
        assert 1 <= len(lines) <= 3, err  # qlower's error (and a hint), nothing from torch's logger
        assert not any(line[:1] in "WEI" and line[1:5].isdigit() for line in lines), err
