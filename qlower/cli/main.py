"""The `qlower` command. Each verb is a thin shell over the Python API.

Exit codes: 0 success, 1 a problem with the user's input (rules, graphs,
lowering, validation), 2 a usage error. No traceback reaches the user unless
`--debug` asks for one.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence

from qlower.cli import commands
from qlower.diagnostics import QlowerError
from qlower.qnn.backends import BACKENDS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2, as argparse does, with our wording
        self.print_usage(sys.stderr)
        print(f"qlower: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("qlower")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        from qlower import __version__

        return __version__


def _c_name(text: str) -> str:
    if not (text.isascii() and text.isidentifier()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a C identifier (letters, digits, _; not a digit first)")
    return text


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _verify_options(s: argparse.ArgumentParser) -> None:
    s.add_argument("--inputs", default=None, metavar="FILE.npz",
                   help="inputs keyed by graph input name (default: <model>_inputs.npz next to the model, "
                   "else random)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--atol", type=_tolerance, default=None, help="absolute tolerance of float outputs")
    s.add_argument("--rtol", type=_tolerance, default=None,
                   help="tolerance of float outputs relative to their peak |value|")
    s.add_argument("--steps", type=_tolerance, default=None, help="tolerance of quantized outputs, in steps of "
                   "their encoding")
    _max_input_option(s)


def _byte_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of bytes")
    return int(text)


def _max_input_option(s: argparse.ArgumentParser) -> None:
    s.add_argument("--max-input-bytes", type=_byte_count, default=None, metavar="N",
                   help="read or make at most N bytes of inputs in all (default 1 GiB; see docs/security.md)")


def _trust_option(s: argparse.ArgumentParser) -> None:
    s.add_argument("--trust-pickle", action="store_true",
                   help="let torch run pickles inside a .pt2 (pickled weights, custom objects): they can run any "
                   "code, so only for files from someone you trust (see docs/security.md)")


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=D0,D1,...` → (name, dims); argparse turns the ValueError into a usage error (exit 2)."""
    name, eq, dims = text.rpartition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=D0,D1,... (e.g. input_ids=1,128)")
    parts = dims.split(",")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: dims must be positive integers separated by commas, got {dims!r}")
    return name, tuple(int(p) for p in parts)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def checkpoint_options(s: argparse.ArgumentParser) -> None:
    s.add_argument("--chunk-size", type=_positive, default=None, metavar="N",
                   help="checkpoint folders: tokens per prefill chunk (default 32)")
    s.add_argument("--context-length", type=_positive, default=None, metavar="N",
                   help="checkpoint folders: KV cache positions including the chunk (default 1024)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="qlower", description="Declarative lowering of model graphs to Qualcomm QNN.")
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    p.add_argument("--version", action="version", version=f"qlower {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("check", help="parse and check .qpat rule files or rule-pack folders")
    s.add_argument("paths", nargs="+")
    s.add_argument("--opdefs", action="append", default=[], help="extra OpDef XML (custom op package)")
    s.add_argument("-q", "--quiet", action="store_true", help="print only errors and warnings, no summary")
    s.add_argument("-v", "--verbose", action="store_true", help="print notes too (rules that are fine but notable)")
    s.set_defaults(func=commands.check)

    s = sub.add_parser("fmt", help="format .qpat files canonically")
    s.add_argument("paths", nargs="+")
    s.add_argument("--check", action="store_true", help="exit 1 if a file is not formatted; change nothing")
    s.add_argument("--stdout", action="store_true", help="print the formatted text instead of rewriting")
    s.set_defaults(func=commands.fmt)

    s = sub.add_parser("lower", help="lower a model graph to QNN and write the artifacts")
    s.add_argument("model")
    s.add_argument("--frontend", default="auto", help="auto, json, onnx, torch, hf (a checkpoint folder) or a "
                   "plugin frontend")
    s.add_argument("--rules", action="append", default=[], help="rule file or folder (default: the shipped "
                   "pack for the graph's dialect)")
    s.add_argument("--backend", default="htp", choices=BACKENDS)
    s.add_argument("-o", "--outdir", default=None, help="where to write artifacts (default: next to the model)")
    s.add_argument("--report", nargs="?", const="-", default=None,
                   help="print the coverage report (and write it as JSON to FILE if given)")
    s.add_argument("--timings", default=None, metavar="FILE", help="write phase wall times as JSON")
    s.add_argument("--rule-stats", action="store_true",
                   help="print, per rule, the ops it was tried on, matched and rewrote (also in --report's JSON)")
    s.add_argument("--html", default=None, metavar="FILE",
                   help="write a self-contained HTML report: source and QNN graphs linked, diagnostics, memory")
    s.add_argument("--html-verify", default=None, metavar="FILE",
                   help="per-op verification rows (JSON) to show in the --html page")
    s.add_argument("--opdefs", action="append", default=[])
    s.add_argument("--allow-partial", action="store_true", help="keep going and report what was not lowered")
    s.add_argument("--no-float16", action="store_true", help="keep float32 on HTP")
    s.add_argument("--no-validate", action="store_true", help=argparse.SUPPRESS)
    s.add_argument("--verify", action="store_true",
                   help="run source and lowered graphs and compare their outputs; exit 1 and write no artifacts "
                   "when an output is beyond tolerance")
    s.add_argument("--name", type=_c_name, default=None, help="name of the artifacts (<name>_net.json, ...; "
                   "default: the model file's name)")
    s.add_argument("--keep-artifacts", action="store_true",
                   help="with --verify: write the artifacts even when verification fails")
    _verify_options(s)
    s.add_argument("--input-shape", action="append", default=[], type=input_shape, metavar="NAME=D0,D1,...",
                   help="fix a graph input's shape (symbolic dims); repeat for more inputs")
    s.add_argument("--quantization-overrides", default=None, metavar="FILE",
                   help="an AIMET encodings file (1.0.0 or the older dict format) applied to the model, as QNN's "
                   "converter applies --quantization_overrides")
    _trust_option(s)
    checkpoint_options(s)
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=commands.lower)

    s = sub.add_parser("quantize", help="calibrate a float model and write it quantized (qlower-graph/1)")
    s.add_argument("model", help="a model file or a Hugging Face checkpoint folder")
    s.add_argument("--calibration", required=True, metavar="DATA",
                   help=".npz file or folder of them, keyed by input name (a checkpoint: input_ids alone "
                   "are prefilled chunk by chunk)")
    s.add_argument("-o", "--output", required=True, metavar="Q.json")
    s.add_argument("--frontend", default="auto", help="auto, json, onnx, torch, hf or a plugin frontend")
    s.add_argument("--act-bitwidth", type=int, choices=(8, 16), default=16)
    s.add_argument("--weights-bitwidth", type=int, choices=(4, 8), default=8)
    s.add_argument("--bias-bitwidth", type=int, choices=(32,), default=32)
    s.add_argument("--block-size", type=_positive, default=None, metavar="N",
                   help="LPBQ: 4-bit weights with a scale per block of N input elements")
    s.add_argument("--kv-bitwidth", type=int, choices=(0, 8, 16), default=8,
                   help="the KV cache (past_*/present_*): uint8 symmetric, zero point 128; 0: as activations")
    s.add_argument("--calibration-method", choices=("minmax", "percentile", "mse"), default="minmax",
                   help="activation ranges: min-max, a percentile, or the least-squared-error (SQNR) range")
    s.add_argument("--param-calibration-method", choices=("minmax", "mse"), default="minmax",
                   help="weight ranges: max|w| per channel (block), or clipped where that lowers the squared error")
    s.add_argument("--percentile-calibration-value", type=float, default=99.99, metavar="P")
    s.add_argument("--range-headroom", type=float, default=1 / 16, metavar="F",
                   help="widen 16-bit min-max activation ranges by F of their width past each extreme away "
                   "from 0 (default 1/16: held-out inputs go past a few calibration inputs' extremes); 0 gives "
                   "the converter's exact min-max")
    s.add_argument("--no-bias-correction", action="store_true",
                   help="keep biases as they are (default: correct them for the mean shift weight "
                   "quantization causes, as AIMET's bias correction does)")
    s.add_argument("--act-quantizer-schema", choices=("asymmetric", "symmetric"), default="asymmetric")
    s.add_argument("--quantization-overrides", default=None, metavar="FILE",
                   help="AIMET-format encodings overrides: a tensor's bitwidth, its whole encoding, or dtype float (and excluded_layers) to keep it float")
    s.add_argument("--export-encodings", default=None, metavar="FILE", help="write the encodings (AIMET JSON)")
    s.add_argument("--no-per-channel", action="store_true", help="weights per tensor, not per output channel")
    s.add_argument("--timings", default=None, metavar="FILE",
                   help="write phase wall times as JSON (calibration: one entry per input set)")
    checkpoint_options(s)
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=commands.quantize)

    s = sub.add_parser("debug", help="per-op accuracy analysis: find the source op whose lowering is wrong")
    s.add_argument("model")
    s.add_argument("--frontend", default="auto", help="auto, json, onnx, torch, hf (a checkpoint folder) or a "
                   "plugin frontend")
    s.add_argument("--rules", action="append", default=[], help="rule file or folder (default: the shipped "
                   "pack for the graph's dialect)")
    s.add_argument("--backend", default="htp", choices=BACKENDS)
    s.add_argument("--opdefs", action="append", default=[])
    s.add_argument("--no-float16", action="store_true", help="keep float32 on HTP")
    s.add_argument("--json", default=None, metavar="FILE", help="write the per-op table as JSON (qlower-debug/1)")
    s.add_argument("--quantization-overrides", default=None, metavar="FILE",
                   help="an AIMET encodings file applied to the model (as for lower)")
    _verify_options(s)
    _trust_option(s)
    checkpoint_options(s)
    s.set_defaults(func=commands.debug)

    s = sub.add_parser("run", help="run a QNN graph (_net.json + .bin) on inputs with the reference kernels")
    s.add_argument("net_json")
    s.add_argument("--inputs", required=True, help=".npz keyed by input tensor name")
    s.add_argument("-o", "--output", required=True, help=".npz to write, keyed by output name")
    _max_input_option(s)
    s.set_defaults(func=commands.run)

    s = sub.add_parser("validate", help="validate a _net.json against a backend's op definitions")
    s.add_argument("net_json")
    s.add_argument("--backend", required=True, choices=BACKENDS)
    s.add_argument("--opdefs", action="append", default=[])
    s.set_defaults(func=commands.validate)

    s = sub.add_parser("test", help="run the test blocks of rule files")
    s.add_argument("paths", nargs="+")
    s.add_argument("-k", dest="keyword", default=None, help="only tests whose name contains this")
    s.add_argument("--examples", type=int, default=None, help="hypothesis examples per test")
    s.add_argument("--opdefs", action="append", default=[])
    s.set_defaults(func=commands.test)

    s = sub.add_parser("explain", help="say why rules do or do not match a node")
    s.add_argument("graph")
    s.add_argument("--node", required=True)
    s.add_argument("--rule", default=None)
    s.add_argument("--rules", action="append", default=[])
    s.add_argument("--backend", default=None, choices=BACKENDS)
    _trust_option(s)
    s.set_defaults(func=commands.explain)

    s = sub.add_parser("opdefs", help="show what QNN ops accept on a backend")
    s.add_argument("op", nargs="?")
    s.add_argument("--backend", default=None, choices=BACKENDS)
    s.add_argument("--opdefs", action="append", default=[])
    s.set_defaults(func=commands.opdefs)

    s = sub.add_parser("plugins", help="list installed plugins and what they contribute")
    s.set_defaults(func=commands.plugins)

    s = sub.add_parser("lsp", help="run the .qpat language server on stdio (for editors)")
    s.add_argument("--stdio", action="store_true", help="accepted for editors that pass it; stdio is the default")
    s.set_defaults(func=commands.lsp)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `qlower` command in this process and return its exit code (what tests call)."""
    return _dispatch(argv)[0]


def entry() -> None:
    """The console script: run the command, then end the process without tearing down its heap.

    A command that lowered a big graph leaves millions of objects (`args.made` keeps them alive
    until here); freeing them one by one at exit took 1.4 s of a 1M-op `lower`, and nothing is
    left to do with them. Output files are complete and closed by then; stdio is flushed here."""
    code, _held = _dispatch(None)
    try:
        sys.stdout.flush()
    except ValueError:  # the command closed it (`lsp`)
        pass
    except OSError as exc:  # the output did not all arrive (the reader went away, a full disk): a failure
        code = code or 1
        if not isinstance(exc, BrokenPipeError):
            _say(f"qlower: error: cannot write the output: {exc.strerror or exc}")
    _say(None)
    os._exit(code)


def _say(message: str | None) -> None:
    """Write a line to stderr (None: only flush it), ignoring a stderr that cannot take it."""
    try:
        if message is not None:
            print(message, file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _dispatch(argv: Sequence[str] | None) -> tuple[int, argparse.Namespace | None]:
    """The exit code, and the parsed arguments (which hold what the command made, see `entry`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "html_verify", None) and not getattr(args, "html", None):
            parser.error("--html-verify needs --html FILE")
    except SystemExit as exc:
        return int(exc.code or 0), None
    return _run(args), args


_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})  # the machine's, not a bug


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except QlowerError as exc:
        print(exc.render(getattr(exc, "sources", None)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("qlower: interrupted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`qlower explain ... | head`): stop quietly, and point stdout at
        # devnull so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # a bug in qlower, not in the user's input
        if args.debug:
            raise
        if isinstance(exc, OSError) and exc.errno in _OUTPUT_ERRNOS:  # (stdout on a full disk, say)
            print(f"qlower: error: cannot write the output: {exc.strerror}", file=sys.stderr)
            return 1
        print(f"qlower: internal error: {type(exc).__name__}: {exc}\n"
              f"This is a bug in qlower; run again with --debug for a traceback.", file=sys.stderr)
        return 1


if __name__ == "__main__":
    entry()
