"""tools/opdef_fidelity.py: differences between qlower's definitions and OpDef HTML documentation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "opdef_fidelity.py"

# Pages written for this test in the layout of the SDK's Sphinx output (not SDK text).
MASTER = """<html><body><div class="section" id="transpose"><h2>Transpose</h2>
<div class="section" id="a"><h3>Inputs</h3>
 <div class="section" id="b"><h4>in[0]</h4><ul>
  <li><p>Mandatory: true</p></li><li><p>Data type: backend specific</p></li>
  <li><p>Shape: a tensor of rank N</p></li>
  <li><p>Constraints:</p><blockquote><div><ul class="simple">
   <li><p>Shape: Rank &gt; 0</p></li><li><p>Shape: Rank &gt; 7</p></li></ul></div></blockquote></li>
 </ul></div></div>
<div class="section" id="c"><h3>Parameters</h3>
 <div class="section" id="perm"><h4>perm</h4><ul class="simple">
  <li><p>Mandatory: false</p></li><li><p>Data type: QNN_DATATYPE_UINT_32</p></li>
  <li><p>Shape: [N]</p></li><li><p>Default: 0</p></li></ul></div></div>
<div class="section" id="d"><h3>Outputs</h3>
 <div class="section" id="e"><h4>out[0]</h4><ul>
  <li><p>Mandatory: true</p></li><li><p>Data type: backend specific</p></li>
  <li><p>Shape: a tensor of rank N</p></li></ul></div></div>
</div></body></html>
"""

GPU = """<html><body><div class="section" id="transpose"><h2>Transpose</h2>
<div class="section" id="f"><h3>Datatypes</h3><table><thead><tr><th><p>Configuration</p></th>
 <th><p>in[0]</p></th><th><p>out[0]</p></th></tr></thead><tbody>
 <tr><td><p>All</p></td><td><p>QNN_DATATYPE_FLOAT_32</p></td><td><p>QNN_DATATYPE_FLOAT_32</p></td></tr>
</tbody></table></div>
<div class="section" id="g"><h3>Constraints</h3><table><thead><tr><th><p>Configuration</p></th>
 <th><p>in[0]</p></th></tr></thead><tbody>
 <tr><td><p>All</p></td><td><ul class="simple"><li><p>Shape: Rank must be 2, 3, 4, or 5</p></li></ul></td></tr>
</tbody></table></div></div></body></html>
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=REPO)


def test_reports_each_kind_of_difference(tmp_path: Path) -> None:
    (tmp_path / "MasterOpDef.html").write_text(MASTER, encoding="utf-8")
    (tmp_path / "GpuOpDefSupplement.html").write_text(GPU, encoding="utf-8")
    proc = run(str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()

    def has(backend: str, op: str, kind: str, text: str = "") -> bool:
        return any(line.split()[1:4] == [backend, op, kind + ":"] and text in line for line in lines)

    assert has("master", "Transpose", "mandatory", "param perm: documented False, qlower True")
    assert has("master", "Transpose", "constraint-missing", "Rank > 7")
    assert not has("master", "Transpose", "constraint-missing", "Rank > 0")  # present in constraints.json
    assert has("master", "Tile", "op-extra")  # not in these pages
    assert has("gpu", "Transpose", "datatype-row-missing", "in[0]=FLOAT_32  out[0]=FLOAT_32")
    assert has("gpu", "Transpose", "datatype-row-extra", "FLOAT_16")
    assert not has("gpu", "Transpose", "constraint-missing")  # the rank 2..5 bullet is in the file
    assert has("htp", "-", "page-missing")
    assert "unexplained" in proc.stdout.splitlines()[-1]


def test_usage_error_without_docs(tmp_path: Path) -> None:
    proc = run(str(tmp_path))
    assert proc.returncode == 2 and "MasterOpDef.html" in proc.stderr


def test_no_unexplained_difference_with_the_sdk_docs() -> None:
    docs = os.environ.get("QLOWER_QNN_SDK_DOCS")
    if not docs:
        pytest.skip("set QLOWER_QNN_SDK_DOCS to the SDK's docs/QNN/OpDef (not shipped with qlower)")
    proc = run(docs)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "(0 unexplained)" in proc.stdout
