"""Kernels that sample an image at computed coordinates: GridSample (4D,
following ONNX/PyTorch grid_sample, which its op definition describes),
CropAndResize (TensorFlow crop_and_resize) and RoiAlign (Android NN's
ROI_ALIGN, which its op definition cites, with the aligned half-pixel shift:
the RoIAlign of Mask R-CNN / Detectron2 that ONNX's RoiAlign also defines)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import finish, need, p_array, p_bool, p_float, p_int, p_ints
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]

BILINEAR, NEAREST = 0, 1
ZEROS, BORDER, REFLECTION = 0, 1, 2


def _unnormalize(g: np.ndarray, size: int, align: bool) -> np.ndarray:
    return (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2


def _reflect(x: np.ndarray, lo2: float, hi2: float) -> np.ndarray:
    """Reflect into [lo2/2, hi2/2] as often as needed (grid_sample's reflection padding)."""
    if lo2 == hi2:
        return np.zeros_like(x)
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    x = np.abs(x - lo)
    extra, flips = np.fmod(x, span), np.floor(x / span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def _coords(g: np.ndarray, size: int, align: bool, padding: int) -> np.ndarray:
    x = _unnormalize(g, size, align)
    if padding == BORDER:
        x = np.clip(x, 0, size - 1)
    elif padding == REFLECTION:
        x = _reflect(x, 0.0, 2.0 * (size - 1)) if align else _reflect(x, -1.0, 2.0 * size - 1)
        x = np.clip(x, 0, size - 1)
    elif padding != ZEROS:
        raise KernelError(f"GridSample: unknown padding_mode {padding}")
    return x


def _tap(img: np.ndarray, yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """img [b, h, w, c] at integer (yi, xi) [b, ho, wo]; out-of-bounds taps read 0."""
    b, h, w, _ = img.shape
    ok = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
    bi = np.arange(b).reshape(-1, 1, 1)
    vals = img[bi, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
    return np.where(ok[..., None], vals, 0.0)


def grid_sample(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, grid = need(inputs[0], "in[0]").astype(np.float64), need(inputs[1], "in[1]").astype(np.float64)
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise KernelError("GridSample reference kernel handles 4D input [b,h,w,c] with grid [b,ho,wo,2] only")
    align, mode, padding = p_bool(params, "align_corners", False), p_int(params, "mode", BILINEAR), \
        p_int(params, "padding_mode", ZEROS)
    _, h, w, _ = x.shape
    gx, gy = _coords(grid[..., 0], w, align, padding), _coords(grid[..., 1], h, align, padding)
    if mode == NEAREST:
        y = _tap(x, np.rint(gy).astype(np.int64), np.rint(gx).astype(np.int64))
    elif mode == BILINEAR:
        x0, y0 = np.floor(gx).astype(np.int64), np.floor(gy).astype(np.int64)
        fx, fy = (gx - x0)[..., None], (gy - y0)[..., None]
        y = (_tap(x, y0, x0) * (1 - fx) * (1 - fy) + _tap(x, y0, x0 + 1) * fx * (1 - fy)
             + _tap(x, y0 + 1, x0) * (1 - fx) * fy + _tap(x, y0 + 1, x0 + 1) * fx * fy)
    else:
        raise KernelError(f"GridSample: unknown mode {mode}")
    return [finish(y, outs[0])]


def _crop_axis(a: np.ndarray, b: np.ndarray, size: int, n: int) -> np.ndarray:
    """Source coordinates [boxes, n] for crop edges a, b (normalized, corner-aligned)."""
    if n > 1:
        return a[:, None] * (size - 1) + np.arange(n)[None, :] * ((b - a) * (size - 1) / (n - 1))[:, None]
    return (0.5 * (a + b) * (size - 1))[:, None]


def crop_and_resize(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Boxes (y1, x1, y2, x2) map [0, 1] to [0, size − 1]; samples outside the
    image take extrapolation_value. Nearest rounds halves away from zero."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    boxes = need(inputs[1], "in[1]").astype(np.float64).reshape(-1, 4)
    idx = need(inputs[2], "in[2]").astype(np.int64).reshape(-1)
    rh, rw = p_ints(params, "resize_dims")
    mode, fill = p_int(params, "interpolation_mode", BILINEAR), p_float(params, "extrapolation_value", 0.0)
    _, h, w, _ = x.shape
    if idx.size != boxes.shape[0] or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[0])):
        raise KernelError("CropAndResize: box indices must match the boxes and lie in [0, batch-1]")
    ys, xs = _crop_axis(boxes[:, 0], boxes[:, 2], h, rh), _crop_axis(boxes[:, 1], boxes[:, 3], w, rw)
    inside = ((ys >= 0) & (ys <= h - 1))[:, :, None] & ((xs >= 0) & (xs <= w - 1))[:, None, :]
    img = x[idx]
    bi = np.arange(len(idx)).reshape(-1, 1, 1)

    def at(yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
        yy, xx = np.clip(yy, 0, h - 1).astype(np.int64), np.clip(xx, 0, w - 1).astype(np.int64)
        return img[bi, yy[:, :, None], xx[:, None, :]]

    if mode == NEAREST:
        y = at(np.floor(ys + 0.5), np.floor(xs + 0.5))  # coordinates are >= 0 where used
    elif mode == BILINEAR:
        y0, x0 = np.floor(ys), np.floor(xs)
        fy, fx = (ys - y0)[:, :, None, None], (xs - x0)[:, None, :, None]
        top = at(y0, x0) * (1 - fx) + at(y0, np.ceil(xs)) * fx
        bottom = at(np.ceil(ys), x0) * (1 - fx) + at(np.ceil(ys), np.ceil(xs)) * fx
        y = top * (1 - fy) + bottom * fy
    else:
        raise KernelError(f"CropAndResize: unknown interpolation_mode {mode}")
    return [finish(np.where(inside[..., None], y, fill), outs[0])]


def _bilinear_at(img: np.ndarray, y: float, x: float) -> np.ndarray:
    """img [h, w, c] at (y, x): 0 beyond one pixel outside, edge-clamped within it."""
    h, w, _ = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return np.zeros(img.shape[-1])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * img[y0, x0] + (1 - ly) * lx * img[y0, x1]
            + ly * (1 - lx) * img[y1, x0] + ly * lx * img[y1, x1])


def roi_align(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """RoIs (x1, y1, x2, y2) in image coordinates, divided by img_size_ratio [h, w] (and shifted by
    −0.5 when aligned; otherwise at least one pixel wide) are cut into out_height × out_width bins;
    each bin averages num_samples_y × num_samples_x bilinear samples at the centres of an even
    sub-grid (−1: ceil(bin size) per RoI). An all-zero-size RoI gives zeros with allow_invalid_roi."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    rois = need(inputs[1], "in[1]").astype(np.float64).reshape(-1, 4)
    idx = need(inputs[2], "in[2]").astype(np.int64).reshape(-1)
    if x.ndim != 4 or outs[0].shape is None or len(outs[0].shape) != 4:
        raise KernelError("RoiAlign needs a 4D input [b,h,w,c] and a declared output [rois,out_h,out_w,c]")
    _, oh, ow, _ = outs[0].shape
    if idx.size != rois.shape[0] or (idx.size and (idx.min() < 0 or idx.max() >= x.shape[0])):
        raise KernelError("RoiAlign: batch indices must match the RoIs and lie in [0, batch-1]")
    ratio = p_array(params, "img_size_ratio").astype(np.float64).reshape(-1)
    if ratio.size != 2:
        raise KernelError(f"RoiAlign: img_size_ratio must be [height_ratio, width_ratio], got {ratio.tolist()}")
    rh, rw = float(ratio[0]), float(ratio[1])
    if rh <= 0 or rw <= 0:
        raise KernelError(f"RoiAlign: img_size_ratio {[rh, rw]} must be positive")
    sy, sx = p_int(params, "num_samples_y", -1), p_int(params, "num_samples_x", -1)
    aligned, allow_invalid = p_bool(params, "aligned", False), p_bool(params, "allow_invalid_roi", False)
    off = 0.5 if aligned else 0.0
    y = np.zeros((rois.shape[0], oh, ow, x.shape[-1]))
    for r, (bx1, by1, bx2, by2) in enumerate(rois):
        if bx2 - bx1 == 0 and by2 - by1 == 0:
            if allow_invalid:
                continue
            raise KernelError(f"RoiAlign: RoI {r} has zero size (allow_invalid_roi is false)")
        x1, y1, x2, y2 = bx1 / rw - off, by1 / rh - off, bx2 / rw - off, by2 / rh - off
        roi_w, roi_h = (x2 - x1, y2 - y1) if aligned else (max(x2 - x1, 1.0), max(y2 - y1, 1.0))
        bin_h, bin_w = roi_h / oh, roi_w / ow
        gh = sy if sy > 0 else max(int(np.ceil(bin_h)), 0)
        gw = sx if sx > 0 else max(int(np.ceil(bin_w)), 0)
        count = max(gh * gw, 1)
        img = x[idx[r]]
        for ph in range(oh):
            for pw in range(ow):
                acc = np.zeros(x.shape[-1])
                for iy in range(gh):
                    yy = y1 + ph * bin_h + (iy + 0.5) * bin_h / gh
                    for ix in range(gw):
                        acc += _bilinear_at(img, yy, x1 + pw * bin_w + (ix + 0.5) * bin_w / gw)
                y[r, ph, pw] = acc / count
    return [finish(y, outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "GridSample": grid_sample,
    "CropAndResize": crop_and_resize,
    "RoiAlign": roi_align,
})
