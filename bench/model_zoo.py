"""Model zoo: 33 small real architectures (random weights) through every qlower path.

    python bench/model_zoo.py [--models vit,tv-resnet18] [--paths export,export-core,onnx]
                              [--backends cpu,htp] [--json out.json] [-v]

Each architecture (bench/zoo_models.py) is exported three ways:
  export       torch.export.export(..., strict=False), as users get it (training IR: conv2d, batch_norm, ...)
  export-core  the same program after ExportedProgram.run_decompositions() (core ATen: convolution, ...)
  onnx         torch.onnx.export(...): the dynamo exporter when onnxscript is importable (torch's default),
               falling back to the TorchScript one (dynamo=False) when it fails; --onnx-exporter forces one
then lowered for each backend, validated against the backend's op definitions, saved as QNN artifacts,
run with `qlower run` (the CLI, in process) and compared with torch's own output: the relative error
max|got - want| / max|want| must be <= 1e-4 on CPU and <= 2e-2 on HTP (float16).

A cell reads `ok` (lowered, validated, matched), or the stage that failed: `export`, `import`,
`lower`, `valid`, `run`, `match`; the reasons are listed under the table. Not part of the test run.
Needs torch and transformers (qlower[torch]); the dynamo ONNX exporter also needs `pip install onnxscript`
(without it every model goes through the TorchScript exporter, which cannot export transformers' decoders).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOL = {"cpu": 1e-4, "htp": 2e-2}
PATHS = ("export", "export-core", "onnx")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if hasattr(exc, "diagnostics"):
        ds = [d for d in exc.diagnostics if d.is_error] or exc.diagnostics
        text = "; ".join(f"{d.subject + ': ' if d.subject else ''}{d.message}" for d in ds[:2])
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


class _Stage(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.reason = stage, reason


def _diag_text(diags) -> str:
    errs = [d for d in diags if d.is_error]
    return "; ".join(f"{d.subject + ': ' if d.subject else ''}{d.message}" for d in errs[:2])[:300]


@contextlib.contextmanager
def _quiet():
    """Silence stdout/stderr at the file-descriptor level (the TorchScript exporter prints its graph from C++)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


def _export(model, args, path: str, tmp: Path, exporter: str = "auto"):
    """The graph loader for one export path (called once per backend: lowering mutates the graph)."""
    import torch

    if path in ("export", "export-core"):
        with _quiet():
            ep = torch.export.export(model, args, strict=False)
            if path == "export-core":
                ep = ep.run_decompositions()
        from qlower.frontends.torch_frontend import load_exported

        return lambda: load_exported(ep, name="model"), "aten"
    f = tmp / "model.onnx"
    names = [f"input{i}" for i in range(len(args))]
    import importlib.util

    dynamo = exporter == "dynamo" or (exporter == "auto" and importlib.util.find_spec("onnxscript") is not None)
    with _quiet():
        try:
            if not dynamo:
                raise RuntimeError("legacy exporter chosen")
            torch.onnx.export(model, args, str(f), input_names=names, output_names=["output"], dynamo=True,
                              external_data=False, verbose=False)
        except Exception:
            if exporter == "dynamo":
                raise
            # what a user does when the dynamo exporter fails: the TorchScript one
            torch.onnx.export(model, args, str(f), input_names=names, output_names=["output"], dynamo=False,
                              opset_version=17)
    from qlower.frontends.onnx_frontend import load_onnx

    return lambda: load_onnx(f), "onnx"


def _cell(load, rules, backend: str, feeds: list[np.ndarray], want: np.ndarray, tmp: Path) -> tuple[str, str, float]:
    import qlower
    from qlower.cli.main import main as cli
    from qlower.qnn.validate import validate_graph

    try:
        graph = load()
    except Exception as exc:  # noqa: BLE001 - the zoo reports every failure
        raise _Stage("import", _first_line(exc)) from None
    result = qlower.lower(graph, rules, backend=backend, validate=False)
    if not result.ok:
        raise _Stage("lower", _diag_text(result.diagnostics) or "no QNN graph")
    diags = validate_graph(result.qnn, rules.registry, backend)
    if any(d.is_error for d in diags):
        raise _Stage("valid", _diag_text(diags))
    out = tmp / backend
    paths = result.save(out)
    net = next(p for p in paths if p.name.endswith("_net.json"))
    from qlower.qnn.reader import load as load_net
    from qlower.reference.interpreter import graph_inputs, graph_outputs

    qg = load_net(net)
    names = graph_inputs(qg)
    np.savez(tmp / "in.npz", **dict(zip(names, feeds)))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            np.errstate(all="ignore"):
        code = cli(["run", str(net), "--inputs", str(tmp / "in.npz"), "-o", str(tmp / "out.npz")])
    if code != 0:
        raise _Stage("run", err.getvalue().strip().splitlines()[0][:300] if err.getvalue().strip() else f"exit {code}")
    with np.load(tmp / "out.npz") as z:
        got = z[graph_outputs(qg)[0]]
    if got.shape != want.shape:
        raise _Stage("match", f"shape {list(got.shape)} != torch's {list(want.shape)}")
    rel = float(np.max(np.abs(got.astype(np.float64) - want)) / max(np.max(np.abs(want)), 1e-30))
    if not rel <= TOL[backend]:
        raise _Stage("match", f"relative error {rel:.3g} > {TOL[backend]}")
    return "ok", "", rel


def run_model(name: str, paths: list[str], backends: list[str], rules: dict, verbose: bool,
              exporter: str = "auto") -> dict:
    import torch

    from zoo_models import MODELS

    cells: dict[str, dict] = {}
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model.eval()
    with torch.no_grad():
        want = model(*args).detach().float().numpy().astype(np.float64)
    feeds = [a.numpy().astype(np.int32 if a.dtype == torch.int64 else a.numpy().dtype) for a in args]
    for path in paths:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    load, pack = _export(model, args, path, tmp, exporter)
            except Exception as exc:  # noqa: BLE001
                for b in backends:
                    cells[f"{path}/{b}"] = {"stage": "export", "reason": _first_line(exc)}
                continue
            for b in backends:
                t = time.perf_counter()
                try:
                    stage, reason, rel = _cell(load, rules[pack], b, feeds, want, tmp)
                    cells[f"{path}/{b}"] = {"stage": stage, "rel": rel}
                except _Stage as s:
                    cells[f"{path}/{b}"] = {"stage": s.stage, "reason": s.reason}
                except Exception as exc:  # noqa: BLE001 - an internal error is a finding too
                    cells[f"{path}/{b}"] = {"stage": "crash", "reason": _first_line(exc)}
                    if verbose:
                        traceback.print_exc()
                cells[f"{path}/{b}"]["seconds"] = round(time.perf_counter() - t, 2)
                if verbose:
                    print(f"  {name} {path}/{b}: {cells[f'{path}/{b}']}", file=sys.stderr, flush=True)
    return cells


def main(argv: list[str] | None = None) -> int:
    from zoo_models import MODELS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--backends", default="cpu,htp")
    p.add_argument("--onnx-exporter", choices=("auto", "dynamo", "legacy"), default="auto")
    p.add_argument("--json", help="also write the cells as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    paths, backends = a.paths.split(","), a.backends.split(",")

    import qlower

    rules = {"aten": qlower.load_rules(packs=["aten"]), "onnx": qlower.load_rules(packs=["onnx"])}
    table: dict[str, dict] = {}
    for m in models:
        t = time.perf_counter()
        table[m] = run_model(m, paths, backends, rules, a.verbose, a.onnx_exporter)
        print(f"{m}: {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)

    cols = [f"{pth}/{b}" for pth in paths for b in backends]
    w = max(len(m) for m in models) + 2
    print("model".ljust(w) + "".join(c.ljust(17) for c in cols))
    for m in models:
        row = []
        for c in cols:
            cell = table[m][c]
            row.append((f"ok {cell['rel']:.1e}" if cell["stage"] == "ok" else cell["stage"]).ljust(17))
        print(m.ljust(w) + "".join(row))
    total = len(models) * len(cols)
    ok = sum(1 for m in models for c in cols if table[m][c]["stage"] == "ok")
    print(f"\n{ok} of {total} cells lower, validate and match torch")
    for c in cols:
        print(f"  {c}: {sum(1 for m in models if table[m][c]['stage'] == 'ok')} of {len(models)}")
    fails = [(m, c, table[m][c]) for m in models for c in cols if table[m][c]["stage"] != "ok"]
    if fails:
        print("\nfailures:")
        for m, c, cell in fails:
            print(f"  {m} {c} [{cell['stage']}] {cell.get('reason', '')}")
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
