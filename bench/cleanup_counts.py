"""QNN op counts of real CNNs lowered with and without the cleanup phase (issue 17 item 4).

    python bench/cleanup_counts.py [--models tv-resnet18,...] [--backend htp]

Each CNN of the model zoo (bench/zoo_models.py: torchvision's and transformers' layouts, random
weights, eval mode) is exported with torch.onnx.export and with
torch.export, lowered with the shipped packs with cleanup off and on, and the counts of
Transpose ops and of all ops are printed side by side. Needs the torch and onnx extras.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def _counts(graph_fn, pack: str, backend: str) -> tuple[dict[str, int], dict[str, int]]:
    import qlower

    out = []
    for cleanup in (False, True):
        result = qlower.lower(graph_fn(), qlower.load_rules(packs=[pack], cleanup=cleanup), backend=backend)
        result.raise_for_errors()
        out.append(result.qnn_op_counts())
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tv-resnet18,tv-mobilenet-v2,tv-mobilenet-v3-small,hf-resnet")
    ap.add_argument("--backend", default="htp")
    a = ap.parse_args()
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from zoo_models import MODELS

    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.frontends.torch_frontend import load_exported

    torch.manual_seed(0)
    print(f"{'model':22s} {'path':13s} {'Transpose off':>13s} {'on':>5s} {'ops off':>8s} {'on':>6s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            m, args = MODELS[name]()
            m = m.eval()
            path = Path(tmp) / f"{name}.onnx"
            torch.onnx.export(m, args, path, dynamo=False)
            ep = torch.export.export(m, args)
            for label, fn, pack in (("onnx", lambda: load_onnx(path), "onnx"),
                                    ("torch.export", lambda: load_exported(ep), "aten")):
                off, on = _counts(fn, pack, a.backend)
                print(f"{name:22s} {label:13s} {off.get('Transpose', 0):13d} {on.get('Transpose', 0):5d} "
                      f"{sum(off.values()):8d} {sum(on.values()):6d}", flush=True)


if __name__ == "__main__":
    main()
