"""The verbs of the `qlower` command; each returns its exit code."""

from __future__ import annotations

import argparse
import gc
import io
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from qlower._files import refuse_overwrite, write_atomic
from qlower.diagnostics import QlowerError, Severity, did_you_mean, error, render_all


def _progress(args: argparse.Namespace, text: str) -> None:
    if not getattr(args, "quiet", False) and sys.stderr.isatty():
        print(f"qlower: {text}", file=sys.stderr, flush=True)


def _byte_bar(args: argparse.Namespace, what: str):
    """A tqdm bar on stderr for `progress(done, total)` callbacks (None when quiet or not a terminal);
    it shows itself only once the work has taken a couple of seconds."""
    if getattr(args, "quiet", False) or not sys.stderr.isatty():
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc=f"qlower: {what}", file=sys.stderr,
               delay=2.0, leave=False)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return bar, update


def _write_json_atomic(path: Path, obj) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QlowerError(error(f"cannot create {path.parent}: {exc.strerror or exc}", code="io")) from None
    write_atomic(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"))


# ---------------------------------------------------------------- check / fmt
def rule_paths(paths: Sequence[str]) -> list[Path]:
    """Files and folders as given, or installed rule packs by name (`qlower check mllm`, `qlower test toy`)."""
    from qlower.plugins import installed

    out: list[Path] = []
    problems = []
    packs = None
    for p in paths:
        if Path(p).exists():
            out.append(Path(p))
            continue
        packs = installed().packs if packs is None else packs
        if p in packs:
            out.append(Path(packs[p]))
        else:
            problems.append(error(f"no such file, folder or rule pack: {p}", code="io",
                                  hint=did_you_mean(p, packs) or f"installed packs: {', '.join(sorted(packs))}"))
    if problems:
        raise QlowerError(problems)
    return out


def check(args: argparse.Namespace) -> int:
    from qlower.api import load_registry
    from qlower.lang.loader import check_paths, pack_folder
    from qlower.plugins import installed

    named = rule_paths(args.paths)
    extra = installed()
    registry = load_registry([*args.opdefs, *extra.opdef_paths])  # plugins' op packages, as load_rules has them
    # A file of a rule pack is checked with its pack (it uses the pack's declarations and fragments), as the
    # language server checks it; the pack's other files only show their errors.
    packs = [pack_folder(p, extra.packs) if p.is_file() else None for p in named]
    paths = [pack or p for p, pack in zip(named, packs, strict=True)]
    diags, sources = check_paths(paths, registry=registry, functions=extra.functions, packs=extra.packs)
    if any(packs):
        diags = [d for d in diags if d.is_error or d.span is None or _named(Path(d.span.file), named)]
    # notes describe rules that are fine (a rule emitting source and QNN ops lowers in stages):
    # shown on request, so a clean check of a whole pack stays quiet
    notes = sum(1 for d in diags if d.severity is Severity.NOTE)
    shown = diags if args.verbose else [d for d in diags if d.severity is not Severity.NOTE]
    if shown:
        print(render_all(shown, sources), file=sys.stderr)
    errors = sum(1 for d in diags if d.severity is Severity.ERROR)
    warnings = sum(1 for d in diags if d.severity is Severity.WARNING)
    if not args.quiet:
        more = f", {notes} note(s)" + ("" if args.verbose else " (-v shows them)") if notes else ""
        print(f"checked {', '.join(args.paths)}: {errors} error(s), {warnings} warning(s){more}")
    return 1 if errors else 0


def _named(file: Path, named: Sequence[Path]) -> bool:
    """Whether `file` is one of the files named on the command line or inside a named folder."""
    file = file.resolve()
    return any(file == p.resolve() or (p.is_dir() and p.resolve() in file.parents) for p in named)


def fmt(args: argparse.Namespace) -> int:
    from qlower.lang.formatter import format_text

    files: list[Path] = []
    for p in rule_paths(args.paths):
        files.extend(sorted(p.rglob("*.qpat")) if p.is_dir() else [p])
    unformatted = []
    for f in files:
        try:
            if not f.is_file():  # (a FIFO would block the read forever)
                raise QlowerError(error(f"cannot read rule file {f}: not a regular file", code="io"))
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise QlowerError(error(f"cannot read rule file {f}: {exc}", code="io")) from None
        new = format_text(text, str(f))
        if args.stdout:
            sys.stdout.write(new)
        elif new != text:
            unformatted.append(f)
            if not args.check:
                write_atomic(f, new.encode("utf-8"))
    for f in unformatted:
        print(f"{'would reformat' if args.check else 'reformatted'} {f}")
    return 1 if (args.check and unformatted) else 0


# ---------------------------------------------------------------------- lower
def load_model(path: str, frontend: str = "auto", *, input_shapes=None, trust_pickle: bool = False,
               quantization_overrides=None, **options):
    """Import a model file with the named (or, for `auto`, the suffix's) frontend, and apply an encodings
    file to it; what the file did is said on stderr (entries it could not apply included)."""
    from qlower.api import load_model as _load

    graph = _load(path, frontend, input_shapes=input_shapes, trust_pickle=trust_pickle, **options)
    if quantization_overrides is not None:
        from qlower.frontends.overrides import apply_overrides
        from qlower.graph.encodings import read_encodings

        done = apply_overrides(graph, read_encodings(quantization_overrides))
        line = (f"{quantization_overrides}: {len(done.params)} weights, {len(done.activations)} activations "
                f"quantized; {len(done.biases)} biases int32 from their input and weight scales")
        if done.skipped:
            name, why = done.skipped[0]
            line += f"; {len(done.skipped)} entries not applied (first: {name}: {why})"
        print(line, file=sys.stderr)
    return graph


def choose_frontend(path: str, frontend: str = "auto"):
    from qlower.api import choose_frontend as _choose

    return _choose(path, frontend)


def checkpoint_options(args: argparse.Namespace) -> dict:
    """--chunk-size and --context-length, for the frontends that take them (checkpoint folders)."""
    return {"chunk": getattr(args, "chunk_size", None), "context": getattr(args, "context_length", None)}


def dialect_of(graph) -> str | None:
    from collections import Counter

    c = Counter(op.dialect for op in graph.ops if op.dialect != "qnn")
    return c.most_common(1)[0][0] if c else None


def rules_for(args, graph):
    from qlower.api import load_rules
    from qlower.plugins import installed

    if args.rules:
        return load_rules(args.rules, opdefs=args.opdefs)
    dialect = dialect_of(graph)
    if dialect is None:
        return load_rules([], opdefs=args.opdefs)
    if installed().pack(dialect) is None:
        raise QlowerError(error(f"no shipped rule pack for dialect {dialect}", hint="pass --rules PATH",
                                code="no-pack"))
    return load_rules(packs=[dialect], opdefs=args.opdefs)  # with the qnn cleanup pack


def artifact_name(model: str) -> str:
    """Artifacts are named after the model file (two exports of `main_graph` must not overwrite each
    other), made a C identifier since the `.cpp` uses it."""
    stem = re.sub(r"\W", "_", Path(model).name.split(".")[0]) or "model"
    return f"_{stem}" if stem[0].isdigit() else stem


def lower(args: argparse.Namespace) -> int:
    from qlower.api import lower as lower_graph

    t0 = time.perf_counter()
    pairs = list(getattr(args, "input_shape", None) or [])
    shapes = dict(pairs)
    if len(shapes) != len(pairs):
        twice = sorted({n for n, _ in pairs if sum(m == n for m, _ in pairs) > 1})
        print(f"qlower: error: --input-shape given more than once for {', '.join(twice)}", file=sys.stderr)
        return 2
    if shapes and "input_shapes" not in (fe := choose_frontend(args.model, args.frontend)).options:
        print(f"qlower: error: --input-shape: the {fe.name} frontend takes no input shapes (its models are "
              "static)", file=sys.stderr)
        return 2
    _progress(args, f"loading {args.model}")
    graph = load_model(args.model, args.frontend, input_shapes=shapes, trust_pickle=getattr(args, "trust_pickle", False),
                       quantization_overrides=getattr(args, "quantization_overrides", None), **checkpoint_options(args))
    _refuse_overwriting_inputs(args, graph)
    # The loaded graph lives until the process ends: keep the cyclic collector from
    # rescanning its millions of objects in every later phase (seconds each on big models),
    # loading the rules included.
    gc.freeze()
    rules = rules_for(args, graph)
    html_source = _html_prelude(args, graph)
    t_load = time.perf_counter() - t0
    _progress(args, f"lowering {len(graph)} ops for {args.backend}")
    source = _snapshot(graph) if args.verify else None
    # Without --verify, validation runs while the artifacts are written (the .cpp of a big graph by
    # a second process meanwhile); they are kept only if it passes.
    late = not args.no_validate and not args.verify
    gc.disable()  # likewise the lowered and QNN graphs: frozen as made, never scanned
    try:
        result = lower_graph(graph, rules, args.backend, float16=False if args.no_float16 else None,
                             allow_partial=args.allow_partial, validate=not args.no_validate and not late)
    finally:
        gc.freeze()
        gc.enable()
    args.made = (graph, source, html_source, result)  # freed (or not: `qlower.cli.main.entry`) by the caller
    outdir = Path(args.outdir) if args.outdir else Path(args.model).resolve().parent
    written = []
    verification = None
    if args.verify and result.ok:
        _progress(args, "verifying against the source semantics")
        verification = _verify(args, source, result, rules, localise=None)
    failed_verification = verification is not None and not verification.passed
    if result.ok and (not failed_verification or args.keep_artifacts):
        _progress(args, f"validating and writing artifacts to {outdir}" if late else
                  f"writing artifacts to {outdir}")
        bar, update = _byte_bar(args, "writing .bin")
        try:
            written = result.save(outdir, converter_command=" ".join(["qlower", "lower", *sys.argv[2:]]),
                                  name=args.name or artifact_name(args.model), progress=update, validate=late)
        finally:
            if bar is not None:
                bar.close()
    elif late:
        result.validate()
    diags = result.diagnostics
    if diags:
        print(render_all(diags, rules.sources), file=sys.stderr)
    result.timings["load"] = t_load + result.timings.get("check", 0.0)  # reading includes checking the input
    result.timings["total"] = time.perf_counter() - t0
    if args.timings:
        t = result.timings
        _write_json_atomic(Path(args.timings), {
            "load": t.get("load", 0.0), "lower": t.get("lower", 0.0), "validate": t.get("validate", 0.0),
            "emit": t.get("emit", 0.0), "total": t["total"], "ops_in": result.ops_in,
            "ops_out": len(result.table) if result.table is not None else 0})
    verify_line = None
    if verification is not None:
        verify_line = verification.summary()
        if failed_verification:
            verify_line += ("\n  artifacts written although verification failed" if written else
                            "\n  no artifacts written: verification failed (--keep-artifacts writes them anyway)")
    if not args.quiet:
        _summary(args, result, written, verify_line)
    elif failed_verification:
        print(verify_line, file=sys.stderr)
    if args.report is not None:
        report = {"model": args.model, "backend": args.backend, "ops_in": result.ops_in,
                  "qnn_ops": result.qnn_op_counts(), "coverage": result.coverage_json(),
                  "rule_stats": result.rule_stats_json(), "ok": result.ok}
        if result.table is not None:
            from qlower.qnn.macs import graph_macs
            from qlower.report import memory_report

            report["total_macs"] = sum(graph_macs(result.table))
            report["memory"] = memory_report(result.qnn).to_json()
        if verification is not None:
            report["verification"] = verification.to_json()
        if args.report != "-":
            _write_json_atomic(Path(args.report), report)
    if html_source is not None:
        if args.verification_rows is None and verification is not None and verification.report is not None:
            from qlower.report.verify_rows import rows_of

            args.verification_rows = rows_of(verification.report.to_json(), "--verify")
        _write_html(args, html_source, result)
    if failed_verification:
        return 1
    if result.ok:
        return 0
    return 0 if args.allow_partial else 1


def _files_read(args: argparse.Namespace, graph) -> list:
    """The files a command reads: the model, the files its constants come from, the inputs."""
    from qlower.graph.lazy import LazyArray

    model = Path(args.model)
    found = {model, model.with_name(model.stem + "_inputs.npz")}
    try:  # (npz data is mapped, not tracked by reference: every weight file beside the model counts)
        found.update(p for p in model.resolve().parent.iterdir() if p.suffix in (".npz", ".npy", ".safetensors"))
    except OSError:
        pass
    for v in graph.values:
        src = getattr(v.data, "source", None) if isinstance(v.data, LazyArray) else None
        if src is not None and getattr(src, "path", None) is not None:
            found.add(Path(src.path))
    return [*found, getattr(args, "inputs", None), getattr(args, "html_verify", None)]


def _refuse_overwriting_inputs(args: argparse.Namespace, graph) -> None:
    """Before any work: no output path of `lower` is a file it reads (as `cp` refuses)."""
    from qlower.qnn.artifacts import artifact_names

    outdir = Path(args.outdir) if args.outdir else Path(args.model).resolve().parent
    outputs = [outdir / n for n in artifact_names(args.name or artifact_name(args.model))]
    outputs += [args.timings, args.html, None if args.report in (None, "-") else args.report]
    refuse_overwrite(outputs, _files_read(args, graph))


def _html_prelude(args: argparse.Namespace, graph):
    """With --html: check the verification rows early and snapshot the source graph before lowering edits it."""
    if not getattr(args, "html", None):
        return None
    from qlower.report import load_verification, snapshot

    args.verification_rows = load_verification(args.html_verify) if args.html_verify else None
    return snapshot(graph)


def _write_html(args: argparse.Namespace, source, result) -> None:
    from qlower.report import write_html

    path = Path(args.html)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QlowerError(error(f"cannot create {path.parent}: {exc.strerror or exc}", code="io")) from None
    write_html(path, title=Path(args.model).name, backend=args.backend, source=source, qnn=result.qnn,
               diagnostics=result.diagnostics, verification=args.verification_rows)
    if not args.quiet:
        print(f"  wrote {path}")


def _snapshot(graph):
    from qlower.verify.compare import snapshot

    return snapshot(graph)


def _verify(args: argparse.Namespace, source, result, rules, localise: bool | None):
    """The Verification of `lower --verify` and `debug`, with the tolerance and input flags."""
    from qlower.api import verify
    from qlower.verify.compare import MAX_INPUT_BYTES, inputs_next_to, read_inputs
    from qlower.verify.tolerance import TolerancePolicy

    limit = getattr(args, "max_input_bytes", None) or MAX_INPUT_BYTES
    inputs = read_inputs(args.inputs, limit) if args.inputs is not None else inputs_next_to(args.model, limit)
    return verify(source, result, rules, inputs=inputs, seed=args.seed, localise=localise,
                  tolerance=TolerancePolicy(args.atol, args.rtol, args.steps), max_input_bytes=limit)


def debug(args: argparse.Namespace) -> int:
    """`qlower debug`: lower without writing artifacts, then the per-op table."""
    from qlower.api import lower as lower_graph

    _progress(args, f"loading {args.model}")
    graph = load_model(args.model, args.frontend, trust_pickle=getattr(args, "trust_pickle", False),
                       quantization_overrides=args.quantization_overrides, **checkpoint_options(args))
    refuse_overwrite([args.json], _files_read(args, graph))
    rules = rules_for(args, graph)
    source = _snapshot(graph)
    result = lower_graph(graph, rules, args.backend, float16=False if args.no_float16 else None)
    if result.diagnostics:
        print(render_all(result.diagnostics, rules.sources), file=sys.stderr)
    if not result.ok:
        print(f"{args.model}: not lowered for {args.backend.upper()}: {len(result.errors)} error(s) (above)")
        return 1
    _progress(args, "running the per-op analysis")
    verification = _verify(args, source, result, rules, localise=True)
    report = verification.report
    print(f"{args.model}: {result.ops_in} source ops -> {len(result.table)} QNN ops for "
          f"{args.backend.upper()} ({report.precision})")
    print(report.table())
    print(verification.summary())
    if args.json:
        _write_json_atomic(Path(args.json), verification.to_json())
        print(f"wrote {args.json}")
    return 0 if verification.passed else 1


def _rule_stats_lines(result) -> None:
    stats = sorted(result.rule_stats_json().items(), key=lambda kv: (-kv[1]["tries"], kv[0]))
    print(f"  rule stats ({len(stats)} rules tried):")
    print("    rule                                          tries  matches  applied")
    for name, st in stats:
        print(f"    {name:<44}{st['tries']:>7}{st['matches']:>9}{st['applied']:>9}")


def _summary(args, result, written, verify_line) -> None:
    counts = result.qnn_op_counts()
    print(f"{args.model}: {result.ops_in} source ops -> {sum(counts.values())} QNN ops for {args.backend.upper()}")
    if args.report is not None:
        print("  source op           count  rule(s)                               QNN ops")
        for op_type, cov in sorted(result.coverage.items()):
            rules = ", ".join(f"{r}×{n}" for r, n in sorted(cov.rules.items())) or (
                "(fused)" if cov.unlowered == 0 else "(not lowered)")
            emitted = ", ".join(f"{t[4:]}×{n}" for t, n in sorted(cov.emitted.items()))
            print(f"  {op_type:<20}{cov.count:>5}  {rules:<38}{emitted}")
    errors = len(result.errors)
    if result.table is None:
        print(f"  not lowered: {errors} error(s) (above)")
    else:
        print("  QNN ops: " + ", ".join(f"{k}×{v}" for k, v in counts.items()))
        print(f"  validation on {args.backend.upper()}: {'ok' if result.ok else f'{errors} error(s)'}")
    if args.report is not None and result.table is not None:
        _memory_lines(result.qnn)
    if getattr(args, "rule_stats", False):
        _rule_stats_lines(result)
    if verify_line:
        print(f"  {verify_line}")
    for p in written:
        print(f"  wrote {p}")
    if not written and not result.ok and getattr(args, "allow_partial", False):
        why = "ops no rule lowers remain, and QNN artifacts hold QNN ops only" if result.table is None or any(
            d.code == "not-lowered" for d in result.errors) else "the lowered graph does not validate"
        print(f"  nothing written: {why} (the report above is what --allow-partial gives)")


def _memory_lines(qnn) -> None:
    from qlower.qnn.macs import graph_macs
    from qlower.report.memory import human_bytes, memory_report

    m = memory_report(qnn)
    print(f"  MACs per inference: {sum(graph_macs(qnn)):,}")
    kinds = ", ".join(f"{k} {human_bytes(v)}" for k, v in m.static_bytes_by_datatype.items())
    print(f"  memory: static {m.static_bytes:,} bytes ({human_bytes(m.static_bytes)}{': ' + kinds if kinds else ''})")
    at = f" at node {m.peak_node} (step {m.peak_step} of {len(m.live_bytes)})" if m.peak_node is not None else ""
    print(f"  memory: peak activations {m.peak_activation_bytes:,} bytes ({human_bytes(m.peak_activation_bytes)}){at}")


# ------------------------------------------------------------- run / validate
def run(args: argparse.Namespace) -> int:
    import numpy as np

    from qlower.plugins import installed
    from qlower.qnn.reader import read
    from qlower.reference.interpreter import run as run_graph

    from qlower.verify.compare import MAX_INPUT_BYTES, read_inputs

    out = Path(args.output)
    refuse_overwrite([out], [args.net_json, args.inputs, _bin_next_to(Path(args.net_json))])
    graph = read(Path(args.net_json)).require_data()  # the same reading path as validate
    inputs = read_inputs(args.inputs, getattr(args, "max_input_bytes", None) or MAX_INPUT_BYTES)
    outputs = run_graph(graph, inputs, ops=installed().interpreter_ops())  # plugins' custom ops run too
    buf = io.BytesIO()
    np.savez(buf, **outputs)
    write_atomic(out, buf.getvalue())
    print(f"ran {len(graph.ops)} ops; wrote {', '.join(outputs)} to {out}")
    return 0


def _bin_next_to(net_json: Path) -> Path:
    name = net_json.name
    return net_json.with_name((name[:-len("_net.json")] if name.endswith("_net.json") else net_json.stem) + ".bin")


def validate(args: argparse.Namespace) -> int:
    from qlower.api import load_registry
    from qlower.plugins import installed
    from qlower.qnn.reader import read
    from qlower.qnn.validate import validate_graph
    from qlower._gc import paused

    net = read(Path(args.net_json))  # absent static data is one warning here, an error in `run`
    graph = net.graph
    extra = installed()
    registry = load_registry([*args.opdefs, *extra.opdef_paths])  # plugins' op packages too
    with paused():
        diags = [*net.diagnostics, *validate_graph(graph, registry, args.backend, ops=extra.qnn_ops(registry))]
    if diags:
        print(render_all(diags), file=sys.stderr)
    errors = sum(1 for d in diags if d.is_error)
    print(f"{args.net_json}: {len(graph.ops)} ops, {errors} error(s) on {args.backend.upper()}")
    return 1 if errors else 0


# ----------------------------------------------------- test / explain / opdefs
def test(args: argparse.Namespace) -> int:
    from qlower.api import load_rules
    from qlower.verify.runner import run_paths

    from qlower.plugins import installed

    return run_paths([str(p) for p in rule_paths(args.paths)], load_rules=load_rules, keyword=args.keyword,
                     examples=args.examples, opdefs=args.opdefs, pack_roots=list(installed().packs.values()))


def explain(args: argparse.Namespace) -> int:
    from qlower.rewrite.explain import explain as explain_node

    graph = load_model(args.graph, trust_pickle=getattr(args, "trust_pickle", False))
    args.opdefs = []
    rules = rules_for(args, graph)
    text = explain_node(graph, rules, args.node, rule=args.rule, backend=args.backend)
    print(text)
    return 0


def opdefs(args: argparse.Namespace) -> int:
    from qlower.api import load_registry
    from qlower.plugins import installed
    from qlower.qnn.describe import describe

    registry = load_registry([*args.opdefs, *installed().opdef_paths])  # plugins' op packages too
    if args.op and registry.op(args.op) is None:
        from qlower.diagnostics import did_you_mean

        raise QlowerError(error(f"unknown QNN op {args.op}", hint=did_you_mean(args.op, registry.names()),
                                code="unknown-op"))
    print(describe(registry, args.op, args.backend))
    return 0


def plugins(args: argparse.Namespace) -> int:
    from qlower.plugins import installed

    c = installed()
    for p in c.plugins:
        print(f"{p.name} {p.version}".rstrip())
        if p.rule_packs:
            print(f"  rule packs: {', '.join(sorted(p.rule_packs))}")
        kernels = sum(len(k) for k in p.kernels.values())
        if kernels:
            print(f"  reference kernels: {kernels} ({', '.join(sorted(p.kernels))})")
        if p.functions:
            print(f"  functions: {', '.join(f.name for f in p.functions)}")
        if p.opdefs:
            print(f"  op definitions: {', '.join(str(x) for x in p.opdefs)}")
        if p.shapes:
            print(f"  shape functions: {', '.join(sorted(p.shapes))}")
        if p.frontends:
            print(f"  frontends: {', '.join(f.name for f in p.frontends)}")
    try:  # the op registry builds with every plugin's op packages, or the broken file is named
        problems = [*c.conflicts, *c.check_ops(c.qnn_ops())]
    except QlowerError as exc:
        problems = [*c.conflicts, *exc.diagnostics]
    if problems:
        print(render_all(problems), file=sys.stderr)
    return 1 if any(d.is_error for d in problems) else 0


def lsp(args: argparse.Namespace) -> int:
    try:
        from qlower.lsp.server import serve_stdio
    except ImportError as exc:
        raise QlowerError(error(f"the language server needs pygls: {exc}", hint="pip install 'qlower[lsp]'",
                                code="missing-extra")) from None
    return serve_stdio()


def quantize(args: argparse.Namespace) -> int:
    """`qlower quantize MODEL --calibration DATA -o Q.json`: calibrate and quantize a float model."""
    from qlower.quantize import Overrides, QuantOptions, quantize as run_quantize
    from qlower.quantize.data import CalibrationData, first_inputs

    out = Path(args.output)
    if out.suffix != ".json":
        print(f"qlower: error: -o {args.output}: the quantized graph is a .json file", file=sys.stderr)
        return 2
    if args.block_size is not None and args.weights_bitwidth != 4:
        print("qlower: error: --block-size (LPBQ) needs --weights-bitwidth 4", file=sys.stderr)
        return 2
    overrides = Overrides()
    if getattr(args, "quantization_overrides", None):
        from qlower.quantize.overrides import read_overrides

        overrides = read_overrides(Path(args.quantization_overrides))
    try:
        opts = QuantOptions(act_bitwidth=args.act_bitwidth, weights_bitwidth=args.weights_bitwidth,
                            bias_bitwidth=args.bias_bitwidth, block_size=args.block_size,
                            kv_bitwidth=None if args.kv_bitwidth == 0 else args.kv_bitwidth,
                            calibration_method=args.calibration_method,
                            param_calibration_method=args.param_calibration_method,
                            percentile=args.percentile_calibration_value,
                            act_symmetric=args.act_quantizer_schema == "symmetric",
                            per_channel=not args.no_per_channel, overrides=overrides,
                            range_headroom=args.range_headroom, bias_correction=not args.no_bias_correction)
    except ValueError as exc:  # an option out of its range (the options say which)
        print(f"qlower: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    _progress(args, f"loading {args.model}")
    graph = load_model(args.model, args.frontend, **checkpoint_options(args))
    t_load = time.perf_counter() - t0
    llm = None
    from qlower.frontends.hf_checkpoint import checkpoint_config, is_checkpoint

    if is_checkpoint(args.model):
        llm = checkpoint_config(args.model, **{k: v for k, v in checkpoint_options(args).items() if v is not None})
    data = CalibrationData(args.calibration, llm)
    timings: dict = {}
    q = run_quantize(graph, data, opts, out=out, progress=lambda text: _progress(args, text), timings=timings)
    if args.timings:
        _write_json_atomic(Path(args.timings), {"load": t_load, **timings})
    inputs = out.with_name(f"{out.stem}_inputs.npz")
    first_inputs(q, CalibrationData(args.calibration, llm), inputs)
    written = [out, inputs]
    if getattr(args, "export_encodings", None):
        from qlower.quantize.overrides import export_encodings

        export_encodings(q, Path(args.export_encodings))
        written.append(Path(args.export_encodings))
    if not args.quiet:
        from qlower.quantize.rewrite import KV_NAME

        n = sum(1 for v in q.values if v.quant is not None)
        has_kv = any(KV_NAME.match(v.name) for v in q.inputs)
        print(f"{args.model}: quantized {n} tensors (w{opts.weights_bitwidth}a{opts.act_bitwidth}"
              f"{f', LPBQ blocks of {opts.block_size}' if opts.block_size else ''}"
              f"{f', KV cache uint{opts.kv_bitwidth}' if opts.kv_bitwidth and has_kv else ''}, "
              f"{opts.calibration_method}) "
              f"in {time.perf_counter() - t0:.1f} s")
        for p in written:
            print(f"  wrote {p}")
    return 0
