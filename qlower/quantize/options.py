"""What to quantize how: the converter's options, under the converter's names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

METHODS = ("minmax", "percentile", "mse")
PARAM_METHODS = ("minmax", "mse")


def _check(opts: QuantOptions) -> None:
    if opts.act_bitwidth not in (8, 16):
        raise ValueError(f"act_bitwidth must be 8 or 16, got {opts.act_bitwidth}")
    if opts.weights_bitwidth not in (4, 8):
        raise ValueError(f"weights_bitwidth must be 4 or 8, got {opts.weights_bitwidth}")
    if opts.bias_bitwidth != 32:
        raise ValueError(f"bias_bitwidth must be 32, got {opts.bias_bitwidth}")
    if opts.kv_bitwidth not in (None, 8, 16):
        raise ValueError(f"kv_bitwidth must be 8 or 16 (or None: as activations), got {opts.kv_bitwidth}")
    if opts.block_size is not None and opts.block_size < 1:
        raise ValueError(f"block_size must be positive, got {opts.block_size}")
    if opts.calibration_method not in METHODS:
        raise ValueError(f"calibration_method must be one of {', '.join(METHODS)}, got {opts.calibration_method!r}")
    if opts.param_calibration_method not in PARAM_METHODS:
        raise ValueError(f"param_calibration_method must be one of {', '.join(PARAM_METHODS)}, got "
                         f"{opts.param_calibration_method!r}")
    if not 0.0 <= opts.range_headroom <= 1.0:
        raise ValueError(f"range_headroom must be in [0, 1], got {opts.range_headroom}")
    if not 50.0 < opts.percentile <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {opts.percentile}")


@attrs.frozen
class Overrides:
    """Per tensor (or per op: its results) exceptions: keep float, another bitwidth, or an encoding
    imposed as it is (`qlower.graph.encodings.TensorEncoding`, from an AIMET-format file)."""

    keep_float: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    bitwidth: Mapping[str, int] = attrs.field(factory=dict)
    encodings: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class QuantOptions:
    """Defaults: w8a16 per channel, 32-bit bias, the KV cache in 8 bits (uint8, zero point 128)."""

    act_bitwidth: int = 16
    weights_bitwidth: int = 8
    bias_bitwidth: int = 32
    block_size: int | None = None  # LPBQ: 4-bit weights in blocks of this many input elements
    kv_bitwidth: int | None = 8
    calibration_method: str = "minmax"
    param_calibration_method: str = "minmax"  # weights: max|w|, or the least-squared-error clip per channel/block
    percentile: float = 99.99  # percentile_calibration_value
    act_symmetric: bool = False
    per_channel: bool = True
    # bias correction (SNPE's quantizer's "bc" optimization, AIMET's bias correction): biases take back the
    # mean output shift the weights' quantization causes (qlower.quantize.correct)
    bias_correction: bool = True
    # 16-bit min-max activation ranges widened by this fraction of their width past each calibrated
    # extreme away from 0 (qlower.quantize.rewrite.headroom); 0 gives the converter's exact min-max
    range_headroom: float = 1 / 16
    overrides: Overrides = attrs.field(factory=Overrides)

    def __attrs_post_init__(self) -> None:
        _check(self)
