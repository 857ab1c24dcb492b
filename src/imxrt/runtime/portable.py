"""Float kernels in ExecuTorch's portable summation order, so float results match the device bit for bit.

torch's convolution, addmm and mean sum in blocked, vectorised orders, and its exp may be 1 ULP off
C's ``expf``; ExecuTorch's portable kernels sum one by one in a fixed loop order with ``expf``, and float
addition is not associative, so the two differ in the last bits (and an int8 program's next quantize
can then round differently). These kernels keep the
portable order per output element and vectorise across output elements instead: each step of the
reduction is one float32 multiply and one float32 add over the whole output (no fused multiply-add,
like the portable C++ built for a CPU without FMA contraction).

Known residue: ``expf`` is taken as correctly rounded (exp in double, rounded once); the C library's
``expf`` is not quite, so a softmax over long rows differs in rare elements (about 1 in 1,000 seen over
rows of 300-1,000) by 1 ULP. A float ``mm`` without bias still runs torch's kernel and differs in the last bits.
"""

from __future__ import annotations

import numpy as np
import torch


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *, out):
    """``aten::convolution.out``: per output element, ``acc = 0; for in_c, w_y, w_x: acc += x * w``
    (taps outside the input read 0), then ``acc += bias``: the portable ``conv2d_impl`` order. A 1-D
    convolution is the 2-D one over a height of 1, as the portable kernel runs it.

    Nothing larger than the output is built: each tap reads the output positions whose input pixel lies
    inside the image as one strided slice, and the padding is never materialised (a program may pad an
    8 x 8 image by 40,000 and stride past it: a 2 x 2 output, but a padded copy of 77 GB)."""
    if transposed or input.dim() not in (3, 4) or input.dtype != torch.float32:
        # Transposed and 3-D convolutions keep torch's kernel (its sums may differ in the last bits).
        return torch.ops.aten.convolution.out(input, weight, bias, stride, padding, dilation, transposed,
                                              output_padding, groups, out=out)
    spatial = input.dim() - 2
    stride, padding, dilation = (_per_dim(values, spatial) for values in (stride, padding, dilation))
    if spatial == 1:
        convolution(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, *stride), (0, *padding), (1, *dilation),
                    False, (0, 0), groups, out=out.unsqueeze(2))
        return out
    batch, in_channels, in_h, in_w = input.shape
    out_channels, channels_per_group, kernel_h, kernel_w = weight.shape
    stride_y, stride_x = stride
    pad_y, pad_x = padding
    dilation_y, dilation_x = dilation
    out_h, out_w = out.shape[2], out.shape[3]
    per_group = input.reshape(batch, groups, channels_per_group, in_h, in_w)
    taps = weight.reshape(groups, out_channels // groups, channels_per_group, kernel_h, kernel_w)
    acc = torch.zeros(batch, groups, out_channels // groups, out_h, out_w, dtype=torch.float32)
    # The padding's zeros stand for the skipped taps: adding x * w = +-0 leaves the sum as the portable one.
    window = torch.zeros(batch, groups, 1, out_h, out_w, dtype=torch.float32)
    for in_c in range(channels_per_group):
        for w_y in range(kernel_h):
            first_y, rows, in_y = _inside(out_h, stride_y, w_y * dilation_y - pad_y, in_h)
            for w_x in range(kernel_w):
                first_x, cols, in_x = _inside(out_w, stride_x, w_x * dilation_x - pad_x, in_w)
                window.zero_()
                if rows and cols:
                    window[:, :, 0, first_y:first_y + rows, first_x:first_x + cols] = per_group[
                        :, :, in_c, in_y:in_y + (rows - 1) * stride_y + 1:stride_y,
                        in_x:in_x + (cols - 1) * stride_x + 1:stride_x]
                acc += window * taps[None, :, :, in_c, w_y, w_x, None, None]
    acc = acc.reshape(batch, out_channels, out_h, out_w)
    if bias is not None:
        acc += bias.to(torch.float32)[None, :, None, None]
    out.copy_(acc)  # into the arena view, in its dim order
    return out


def _per_dim(values, count: int) -> tuple[int, ...]:
    """A stride / padding / dilation list for ``count`` spatial dims (one value stands for all, as in torch)."""
    values = tuple(int(v) for v in values)
    return values * count if len(values) == 1 else values


def _inside(out_size: int, stride: int, offset: int, in_size: int) -> tuple[int, int, int]:
    """The output positions o whose input position o * stride + offset lies in [0, in_size): (first o, how
    many, the first one's input position)."""
    first = max(0, -(offset // stride))  # ceil(-offset / stride)
    last = min(out_size - 1, (in_size - 1 - offset) // stride)
    count = max(0, last - first + 1)
    return first, count, first * stride + offset


def addmm(self, mat1, mat2, *, beta=1, alpha=1, out):
    """``aten::addmm.out``: ``sum = 0; for k: sum += mat1[i, k] * mat2[k, j]``, then
    ``sum * alpha + self * beta`` in double (the portable kernel's scalars are doubles), rounded once."""
    if mat1.dtype != torch.float32:
        return torch.ops.aten.addmm.out(self, mat1, mat2, beta=beta, alpha=alpha, out=out)
    acc = torch.zeros(mat1.shape[0], mat2.shape[1], dtype=torch.float32)
    for k in range(mat1.shape[1]):
        acc += mat1[:, k:k + 1] * mat2[k:k + 1, :]
    result = acc.double() * float(alpha)
    if beta != 0:  # beta 0 ignores self, NaNs included
        result += self.double().expand_as(acc) * float(beta)
    out.copy_(result.float())
    return out


def _expf(x: torch.Tensor) -> torch.Tensor:
    """float32 exp as C's ``expf`` gives it: correctly rounded (torch's vectorised exp can be 1 ULP off)."""
    return torch.exp(x.double()).float()


def _sum_in_order(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis one element after the other, as a C loop does."""
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        acc += x[..., k]
    return acc


def sigmoid(self, *, out):
    """``aten::sigmoid.out``: ``1 / (1 + expf(-x))`` in float32."""
    if self.dtype != torch.float32:
        return torch.ops.aten.sigmoid.out(self, out=out)
    out.copy_(1 / (1 + _expf(-self)))
    return out


def softmax(self, dim, half_to_float, *, out):
    """``aten::_softmax.out``: per row, ``e = expf(x - max)``, their sum in order, then ``e / sum``."""
    if self.dtype != torch.float32 or half_to_float:
        return torch.ops.aten._softmax.out(self, dim, half_to_float, out=out)
    rows = self.movedim(dim, -1)
    exps = _expf(rows - rows.max(dim=-1, keepdim=True).values)
    out.copy_((exps / _sum_in_order(exps).unsqueeze(-1)).movedim(-1, dim))
    return out


def mean(self, dim, keepdim=False, *, dtype=None, out):
    """``aten::mean.out``: the reduced elements summed in index order, then divided by their count."""
    if self.dtype != torch.float32 or (dtype not in (None, torch.float32)) or not self.is_contiguous():
        return torch.ops.aten.mean.out(self, dim, keepdim, dtype=dtype, out=out)
    dims = sorted(d % self.dim() for d in (dim if dim else range(self.dim())))
    kept = [d for d in range(self.dim()) if d not in dims]
    rows = self.permute(*kept, *dims).reshape(*[self.shape[d] for d in kept], -1)
    result = _sum_in_order(rows) / rows.shape[-1]
    out.copy_(result.reshape(out.shape))
    return out


def _nearest_indices(in_size: int, out_size: int, scale: float | None) -> torch.Tensor:
    """ExecuTorch's nearest_neighbor_compute_source_index: min(floor(dst * s), in - 1), with the float
    scale s = 1 / scale_factor when one was given, else in / out (area_pixel_compute_scale)."""
    s = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size, dtype=np.float32)
    return torch.from_numpy(np.minimum(np.floor(dst * s).astype(np.int64), in_size - 1))


def upsample_nearest2d(input, output_size, scale_factors, *, out):
    """``aten::upsample_nearest2d.vec_out``: every output pixel copies its source pixel, for any dtype and
    dim order (torch's own CPU kernel has no int8 channels_last path; the portable kernel takes int8)."""
    scale_h, scale_w = scale_factors if scale_factors else (None, None)
    rows = _nearest_indices(input.shape[-2], out.shape[-2], scale_h)
    cols = _nearest_indices(input.shape[-1], out.shape[-1], scale_w)
    out.copy_(input.index_select(-2, rows).index_select(-1, cols))
    return out


def cumsum(self, dim, dtype=None, *, out):
    """``aten::cumsum.out``: ``out[0] = x[0]``, then ``out[j] = x[j] + out[j - 1]`` in the out dtype, one step
    after the other (torch's CPU kernel accumulates float32 in float64 and rounds once per element)."""
    if self.dtype != torch.float32 or out.dtype != torch.float32 or self.dim() == 0:
        return torch.ops.aten.cumsum.out(self, dim, dtype=dtype, out=out)
    dim = dim % self.dim()
    rows, sums = self.movedim(dim, 0), out.movedim(dim, 0)
    total = rows[0].clone()
    sums[0] = total
    for j in range(1, rows.shape[0]):
        total = rows[j] + total
        sums[j] = total
    return out


def _bilinear_weights(in_size: int, out_size: int, align_corners: bool, scale: float | None):
    """Per output index along one axis: the two source indices and their float32 weights, as the portable
    kernel's compute_source_index_and_lambda computes them (the ratio in double, rounded to float, then
    everything in float32)."""
    if out_size == in_size:  # a copy: weight 1 on the pixel itself
        index = torch.arange(out_size)
        return index, index, torch.ones(out_size), torch.zeros(out_size)
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale else in_size / out_size
    ratio = np.float32(ratio)
    dst = np.arange(out_size, dtype=np.float32)
    if align_corners:
        real = ratio * dst
    else:
        real = np.maximum(ratio * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    index0 = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    lambda1 = np.minimum(np.maximum(real - index0.astype(np.float32), np.float32(0)), np.float32(1))
    index1 = index0 + (index0 < in_size - 1)
    lambda0 = np.float32(1) - lambda1
    return (torch.from_numpy(index0), torch.from_numpy(index1), torch.from_numpy(lambda0.astype(np.float32)),
            torch.from_numpy(lambda1.astype(np.float32)))


def upsample_bilinear2d(input, output_size, align_corners, scale_factors, *, out):
    """``aten::upsample_bilinear2d.vec_out``: per output pixel ``top = tl * w0 + tr * w1``, ``bottom = bl * w0 +
    br * w1``, ``top * h0 + bottom * h1``, each product and sum rounded to float32 (the portable order; torch's
    kernel computes its weights otherwise and differs in the last bits)."""
    if input.dtype != torch.float32:
        return torch.ops.aten.upsample_bilinear2d.vec_out(input, output_size, align_corners, scale_factors, out=out)
    scale_h, scale_w = scale_factors if scale_factors else (None, None)
    rows0, rows1, h0, h1 = _bilinear_weights(input.shape[2], out.shape[2], align_corners, scale_h)
    cols0, cols1, w0, w1 = _bilinear_weights(input.shape[3], out.shape[3], align_corners, scale_w)
    top_rows, bottom_rows = input.index_select(2, rows0), input.index_select(2, rows1)
    top = top_rows.index_select(3, cols0) * w0 + top_rows.index_select(3, cols1) * w1
    bottom = bottom_rows.index_select(3, cols0) * w0 + bottom_rows.index_select(3, cols1) * w1
    out.copy_(top * h0[:, None] + bottom * h1[:, None])
    return out
