"""Channel-last spatial ops (convolutions, pooling, resampling): inputs are
[batch, *spatial, channel] and each spatial dim goes through a window formula."""

from __future__ import annotations

from qlower.qnn.shapes.core import REQUIRED, Call, Rule, Sig, fmt

_AXES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def _vec(call: Call, name: str, n: int, default: object = REQUIRED) -> list[int]:
    """A per-spatial-dim param: [n] values, or a scalar when n == 1."""
    values = call.ints(name, default).reshape(-1)
    if len(values) != n:
        raise call.fail(f"param '{name}' must have {n} value(s), got {values.tolist()}")
    return [int(v) for v in values]


def _positive(call: Call, name: str, values: list[int]) -> None:
    if any(v < 1 for v in values):
        raise call.fail(f"param '{name}' = {values} must be > 0")


def _pads(call: Call, n: int, name: str = "pad_amount") -> list[tuple[int, int]]:
    pads = call.ints(name, shape=(n, 2))
    if (pads < 0).any():
        raise call.fail(f"param '{name}' = {pads.tolist()} must not be negative")
    return [(int(b), int(a)) for b, a in pads]


def same_pads(size: int, kernel: int, stride: int, dilation: int, upper: bool) -> tuple[int, int]:
    """(begin, end) padding that gives ceil(size / stride) windows (ONNX auto_pad SAME_UPPER /
    SAME_LOWER): the odd pixel goes at the end (upper) or at the beginning (lower)."""
    total = max((-(-int(size) // int(stride)) - 1) * int(stride) + (int(kernel) - 1) * int(dilation) + 1 - int(size), 0)
    small = total // 2
    return (small, total - small) if upper else (total - small, small)


def _window(call: Call, axis: str, size: int, kernel: int, stride: int, dilation: int,
            pads: tuple[int, int], ceil: bool = False) -> int:
    """Number of window positions: floor (or ceil) of (padded - extent) / stride, plus one."""
    extent = (kernel - 1) * dilation + 1
    padded = size + pads[0] + pads[1]
    span = padded - extent
    if span < 0:
        raise call.fail(
            f"the window spans {extent} along {axis} (size {kernel}, dilation {dilation}) "
            f"but the padded input is only {padded} long"
        )
    return (-(-span // stride) if ceil else span // stride) + 1


def _conv(call: Call, n: int, depthwise: bool = False) -> list[Sig]:
    x = call.exact_rank(0, n + 2, "[batch, *spatial, channel_in]")
    w = call.exact_rank(1, n + 2, "[*filter, channel_in/group, channel_out]")
    cin, kernel, w_in, cout = x.shape[-1], w.shape[:n], w.shape[n], w.shape[n + 1]
    if depthwise:
        if w_in != 1 or cin == 0 or cout % cin:
            raise call.fail(f"depthwise weights in[1] {fmt(w.shape)} must be [*filter, 1, k * {cin}] for in[0] {fmt(x.shape)}")
    else:
        group = call.scalar("group", 1)
        if group < 1 or w_in * group != cin or cout % group:
            raise call.fail(
                f"weights in[1] {fmt(w.shape)} with group {group} do not fit in[0] {fmt(x.shape)}: "
                f"need in[1] dim {n} * group == {cin} input channels and output channels divisible by group"
            )
    stride, dilation = _vec(call, "stride", n), _vec(call, "dilation", n, [1] * n)
    _positive(call, "stride", stride)
    _positive(call, "dilation", dilation)
    pads = _pads(call, n)
    spatial = [
        _window(call, ax, x.shape[1 + k], kernel[k], stride[k], dilation[k], pads[k])
        for k, ax in enumerate(_AXES[n])
    ]
    bias = call.opt(2)
    if bias is not None and bias.shape != (cout,):
        raise call.fail(f"bias in[2] {fmt(bias.shape)} must be [{cout}]")
    return [Sig((x.shape[0], *spatial, cout), x.dtype)]


def _transpose_conv(call: Call, n: int) -> list[Sig]:
    """Each spatial dim becomes stride * (in - 1) + extent - pads + output_padding."""
    x = call.exact_rank(0, n + 2, "[batch, *spatial, channel_in]")
    w = call.exact_rank(1, n + 2, "[*filter, channel_in, channel_out/group]")
    group = call.scalar("group", 1)
    cin = x.shape[-1]
    if w.shape[n] != cin or group < 1 or cin % group:
        raise call.fail(f"weights in[1] {fmt(w.shape)} with group {group} do not fit in[0] {fmt(x.shape)}: need in[1] dim {n} == {cin}")
    cout = w.shape[n + 1] * group
    stride = _vec(call, "stride", n)
    _positive(call, "stride", stride)
    dilation = _vec(call, "dilation", n, [1] * n)
    _positive(call, "dilation", dilation)
    out_pad = _vec(call, "output_padding", n, [0] * n)
    if any(not 0 <= p < s for p, s in zip(out_pad, stride)):
        raise call.fail(f"param 'output_padding' = {out_pad} must be below the stride {stride}")
    pads = _pads(call, n)
    spatial = []
    for k, ax in enumerate(_AXES[n]):
        extent = (w.shape[k] - 1) * dilation[k] + 1
        size = stride[k] * (x.shape[1 + k] - 1) + extent - pads[k][0] - pads[k][1] + out_pad[k]
        if size < 1:
            raise call.fail(f"padding {pads[k]} along {ax} removes the whole output")
        spatial.append(size)
    bias = call.opt(2)
    if bias is not None and bias.shape != (cout,):
        raise call.fail(f"bias in[2] {fmt(bias.shape)} must be [{cout}]")
    return [Sig((x.shape[0], *spatial, cout), x.dtype)]


def _pool(call: Call, n: int) -> list[Sig]:
    """rounding_mode CEIL (1) rounds the window count up; no window-start
    correction is applied."""
    x = call.exact_rank(0, n + 2, "[batch, *spatial, channel]")
    size, stride = _vec(call, "filter_size", n), _vec(call, "stride", n)
    _positive(call, "filter_size", size)
    _positive(call, "stride", stride)
    pads = _pads(call, n)
    ceil = call.scalar("rounding_mode", 0) == 1
    spatial = [
        _window(call, ax, x.shape[1 + k], size[k], stride[k], 1, pads[k], ceil) for k, ax in enumerate(_AXES[n])
    ]
    return [Sig((x.shape[0], *spatial, x.shape[-1]), x.dtype)]


def _im2col(call: Call) -> list[Sig]:
    x = call.exact_rank(0, 4, "[batch, height, width, channel]")
    kernel, stride, dilation = _vec(call, "kernel_size", 2), _vec(call, "stride", 2), _vec(call, "dilation", 2, [1, 1])
    for name, v in (("kernel_size", kernel), ("stride", stride), ("dilation", dilation)):
        _positive(call, name, v)
    pads = _pads(call, 2)
    cols = [_window(call, ax, x.shape[1 + k], kernel[k], stride[k], dilation[k], pads[k]) for k, ax in enumerate(_AXES[2])]
    return [Sig((x.shape[0], x.shape[3] * kernel[0] * kernel[1], cols[0] * cols[1]), x.dtype)]


def _extract_patches(call: Call) -> list[Sig]:
    """VALID keeps whole patches only, SAME keeps ceil(size / stride)."""
    x = call.exact_rank(0, 4, "[batch, height, width, channel_in]")
    size, stride, rate = _vec(call, "size", 2), _vec(call, "stride", 2), _vec(call, "rate", 2)
    for name, v in (("size", size), ("stride", stride), ("rate", rate)):
        _positive(call, name, v)
    same_pad = call.scalar("padding") == 1
    spatial = []
    for k, ax in enumerate(_AXES[2]):
        extent = (size[k] - 1) * rate[k] + 1
        span = x.shape[1 + k] if same_pad else x.shape[1 + k] - extent + 1
        if span < 1:
            raise call.fail(f"the patch spans {extent} along {ax} but in[0] {fmt(x.shape)} is smaller")
        spatial.append(-(-span // stride[k]))
    return [Sig((x.shape[0], *spatial, size[0] * size[1] * x.shape[3]), x.dtype)]


def _grid_sample(call: Call) -> list[Sig]:
    x = call.inp(0)
    if x.rank not in (4, 5):
        raise call.fail(f"in[0] must have rank 4 or 5, got {fmt(x.shape)}")
    grid = call.exact_rank(1, x.rank, "like in[0]")
    if grid.shape[0] != x.shape[0] or grid.shape[-1] != x.rank - 2:
        raise call.fail(f"grid in[1] {fmt(grid.shape)} must be [{x.shape[0]}, *out_spatial, {x.rank - 2}] for in[0] {fmt(x.shape)}")
    return [Sig((x.shape[0], *grid.shape[1:-1], x.shape[-1]), x.dtype)]


def _crop_and_resize(call: Call) -> list[Sig]:
    x = call.exact_rank(0, 4, "[batch, height, width, channel]")
    boxes = call.exact_rank(1, 2, "[num_boxes, 4]")
    index = call.exact_rank(2, 1, "[num_boxes]")
    if boxes.shape[1] != 4 or index.shape[0] != boxes.shape[0]:
        raise call.fail(f"boxes in[1] {fmt(boxes.shape)} and box indices in[2] {fmt(index.shape)} must be [n, 4] and [n]")
    rh, rw = (int(v) for v in call.ints("resize_dims", shape=(2,)))
    return [Sig((boxes.shape[0], rh, rw, x.shape[3]), x.dtype)]


def _argb_to_rgb(call: Call) -> list[Sig]:
    x = call.exact_rank(0, 4, "[b, h, w, 4]")
    if x.shape[3] != 4:
        raise call.fail(f"in[0] {fmt(x.shape)} must have 4 channels")
    return [Sig(x.shape[:3] + (3,), x.dtype)]


def _unknown_size(call: Call) -> None:
    """The new size is a property of the output tensor only: no rule."""
    call.inp(0)
    return None


RULES: dict[str, Rule] = {
    "Conv1d": lambda c: _conv(c, 1),
    "Conv2d": lambda c: _conv(c, 2),
    "Conv3d": lambda c: _conv(c, 3),
    "DepthWiseConv1d": lambda c: _conv(c, 1, depthwise=True),
    "DepthWiseConv2d": lambda c: _conv(c, 2, depthwise=True),
    "TransposeConv1d": lambda c: _transpose_conv(c, 1),
    "TransposeConv2d": lambda c: _transpose_conv(c, 2),
    "TransposeConv3d": lambda c: _transpose_conv(c, 3),
    "PoolAvg2d": lambda c: _pool(c, 2),
    "PoolMax2d": lambda c: _pool(c, 2),
    "L2Pool2d": lambda c: _pool(c, 2),
    "PoolAvg3d": lambda c: _pool(c, 3),
    "PoolMax3d": lambda c: _pool(c, 3),
    "Im2Col": _im2col,
    "ExtractPatches": _extract_patches,
    "GridSample": _grid_sample,
    "CropAndResize": _crop_and_resize,
    "ArgbToRgb": _argb_to_rgb,
    "Resize": _unknown_size,
    "ResizeBilinear": _unknown_size,
    "ResizeNearestNeighbor": _unknown_size,
}
