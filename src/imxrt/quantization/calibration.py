"""Calibration: run the observed model over the user's input tuples, with a progress bar.

The observed model runs in float64 and its observers' ranges are rounded to float32 at the end. In float32
the activations (and so the ranges, the scales and every artifact) moved by a float step with the thread
count or SIMD level (OMP_NUM_THREADS=1, ATEN_CPU_CAPABILITY=default): a float32 sum's rounding depends on
its order. In float64 that noise lies far below float32's resolution, so the rounded ranges are the same on
every machine. A model that cannot run in float64 (an op with a float32 constant it cannot mix) calibrates
in float32, as before.

PyTorch has no float64 kernel for a depthwise convolution: it runs one convolution per channel (7,000 calls a
MobileNetV2 sample, most of a float64 pass). While widened, each depthwise convolution runs as a sum over its
kernel's taps instead (``depthwise_conv2d_by_taps``): one multiply and one add of whole tensors per tap,
correctly rounded float64 operations whose results do not depend on the thread count or SIMD level either.

PyTorch's float64 convolution unfolds its whole batch into one column matrix (in channels x kernel taps by
output positions). For a large kernel over a long input that matrix is gigabytes: a 1 x 4097 kernel over 7 x 13
x 5000 inputs, 8 GB; a 41 x 15 kernel over 113 channels, 17 GB. While widened, a convolution whose column
matrix would pass ``COLUMN_BYTES`` runs over tiles of its output instead (``conv2d_in_tiles``), one sample at a
time, each tile's matrix under that bound. A transposed convolution unfolds one sample's matrix (out channels x
taps by input positions); past the bound the model calibrates in float32 (``widened_conv_transpose2d``).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from imxrt.errors import BadModel
from imxrt.model_checks import check_finite_sample, read_samples
from imxrt.passes.recurrent_loops import run_loops

log = logging.getLogger("imxrt")


def calibrate(
    observed: torch.fx.GraphModule,
    samples: Iterable[Sequence[torch.Tensor]],
    total: int | None = None,
    show_progress: bool = True,
) -> int:
    """Feed every sample (a tuple of input tensors) through ``observed``; return how many were used.

    A sample holding NaN or Inf is refused: the observers skip non-finite values (the model's own), so they
    would silently calibrate on the rest of it."""
    count = 0
    widen(observed, tried=False)  # the first sample is the trial: no separate float64 run on a copy
    try:
        with torch.no_grad():
            for index, sample in tqdm(read_samples(samples, "calibration"), total=total, desc="calibrating",
                                      unit="sample", disable=not show_progress, leave=False):
                sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
                check_finite_sample(f"calibration sample {index}", sample)
                if index == 0 and _WIDENED in observed.meta:
                    _run_first_sample_widened(observed, sample)
                else:
                    _run_sample(observed, index, sample)
                count = index + 1
    finally:
        narrow(observed)
    if count == 0:
        raise BadModel("the calibration data is empty; give at least one input tuple")
    settle_zero_ranges(observed)
    return count


def _run_sample(observed: torch.fx.GraphModule, index: int, sample: tuple) -> None:
    try:
        run_loops(observed, *sample)
    except Exception as e:  # a user's calibration tuple that does not fit the model
        raise BadModel(f"calibration sample {index} could not be run: {e}") from e


def _run_first_sample_widened(observed: torch.fx.GraphModule, sample: tuple) -> None:
    """The first sample through the widened model; should it not run in float64, the observers are put back
    as they were before it, the model narrowed, and the sample run in float32 (as ``widen``'s trial run on
    zeros would have decided)."""
    before = _observer_buffers(observed)
    try:
        run_loops(observed, *sample)
        return
    except Exception as e:  # noqa: BLE001  (any failure means: try float32; a sample that does not fit fails there)
        failure = e
    _restore_observer_buffers(observed, before)
    narrow(observed)
    _run_sample(observed, 0, sample)
    log.info("calibrating in float32: the model does not run in float64 (%s)", failure)


def _observer_buffers(observed: torch.fx.GraphModule) -> dict[str, dict[str, torch.Tensor]]:
    """A copy of the buffers (the ranges seen so far) of every module the graph calls: its observers."""
    targets = {node.target for node in observed.graph.nodes if node.op == "call_module"}
    return {target: {name: buffer.clone() for name, buffer in observed.get_submodule(target)._buffers.items()
                     if buffer is not None} for target in sorted(targets)}


def _restore_observer_buffers(observed: torch.fx.GraphModule, saved: dict[str, dict[str, torch.Tensor]]) -> None:
    for target, buffers in saved.items():
        observed.get_submodule(target)._buffers.update(buffers)


_WIDENED = "imxrt_widened"  # GraphModule.meta: what ``widen`` changed, for ``narrow`` to undo


@dataclass(frozen=True)
class _Widened:
    casts: list[torch.fx.Node]  # the casts after the float32 inputs
    convs: list[torch.fx.Node]  # the convolution nodes, run by ``_WIDENED_CONVS`` meanwhile


def widen(observed: torch.fx.GraphModule, tried: bool = True) -> torch.fx.GraphModule:
    """The observed model in float64, in place: its parameters and buffers, and a cast after each float32
    input, so it still takes the user's float32 samples. Left as it is when it is not all float32, or, when
    ``tried``, does not run in float64 on zeros (``calibrate`` tries its first sample instead). ExecuTorch's
    export recipe runs it after ``prepare_pt2e`` (a post-prepare pass)."""
    if _WIDENED in observed.meta or not _all_float32(observed) or (tried and not _runs_in_float64(observed)):
        return observed
    casts = []
    graph = observed.graph
    for placeholder in [n for n in graph.nodes if n.op == "placeholder"]:
        value = placeholder.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
            continue
        with graph.inserting_after(placeholder):
            cast = graph.call_function(torch.ops.aten._to_copy.default, (placeholder,), {"dtype": torch.float64})
        placeholder.replace_all_uses_with(cast, delete_user_cb=lambda user, cast=cast: user is not cast)
        casts.append(cast)
    convs = _widen_convs(graph)
    observed.to(torch.float64)
    observed.meta[_WIDENED] = _Widened(casts, convs)
    observed.recompile()
    return observed


def _widen_convs(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Every convolution node of ``graph`` run as the widened model runs it (``_WIDENED_CONVS``); returns
    them."""
    convs = [n for n in graph.nodes if n.op == "call_function" and n.target in _WIDENED_CONVS]
    for conv in convs:
        conv.target = _WIDENED_CONVS[conv.target]
    return convs


def narrow(observed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Undo ``widen``: the casts removed, parameters, buffers and the observers' ranges back in float32
    (rounded: what the quantized model computes with). ExecuTorch's recipe runs it before ``convert_pt2e``."""
    widened = observed.meta.pop(_WIDENED, None)
    if widened is None:
        return observed
    for cast in widened.casts:
        cast.replace_all_uses_with(cast.args[0])
        observed.graph.erase_node(cast)
    aten_convs = {widened: aten for aten, widened in _WIDENED_CONVS.items()}
    for conv in widened.convs:
        conv.target = aten_convs[conv.target]
    observed.to(torch.float32)
    observed.recompile()
    return observed


def settle_zero_ranges(observed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """An activation calibration saw only as 0 (a relu of values that were all negative, ``x - x``) takes
    the range of the values its op read, in place; run before ``convert_pt2e``, after calibration or QAT.

    Any scale holds 0 exactly, but the observer's own answer, a scale of float32's epsilon, put the op's
    requantization multiplier in the millions: TFLM's ADD and SUB abort on such a .tflite (their output
    multiplier must be below 1) and a convolution's needs a shift past 31. The inputs' range is what the op
    would give on data calibration did not show, and keeps every multiplier near 1."""
    modules = dict(observed.named_modules())
    for node in observed.graph.nodes:
        observer = range_observer(node, modules)
        if observer is None or not (observer.min_val == 0 and observer.max_val == 0):
            continue
        ranges = [(o.min_val, o.max_val) for o in _input_observers(node.args[0], modules)
                  if bool(torch.isfinite(o.min_val)) and o.max_val > o.min_val]
        if ranges:
            observer.min_val = torch.stack([low for low, _ in ranges]).min().clone()
            observer.max_val = torch.stack([high for _, high in ranges]).max().clone()
    return observed


def range_observer(node: torch.fx.Node, modules: dict) -> torch.nn.Module | None:
    """The per-tensor min/max observer ``node`` calls (itself, or inside a FakeQuantize), else None."""
    if node.op != "call_module":
        return None
    module = modules.get(node.target)
    module = getattr(module, "activation_post_process", module)
    min_val = getattr(module, "min_val", None)
    return module if isinstance(min_val, torch.Tensor) and min_val.dim() == 0 else None


def _input_observers(value: object, modules: dict) -> list[torch.nn.Module]:
    """The observers met first on every path back from ``value``'s op through the graph."""
    found, stack, seen = [], [value], set()
    while stack:
        node = stack.pop()
        if not isinstance(node, torch.fx.Node) or node in seen:
            continue
        seen.add(node)
        observer = range_observer(node, modules)
        if observer is not None:
            found.append(observer)
        elif node.op == "call_function":
            stack.extend(node.all_input_nodes)
    return found


def _all_float32(observed: torch.fx.GraphModule) -> bool:
    """Whether every float parameter and buffer is float32: a float64 or half model's weights would change by
    widening and narrowing back."""
    tensors = [*observed.parameters(), *observed.buffers()]
    return not any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors)


def _runs_in_float64(observed: torch.fx.GraphModule) -> bool:
    """Whether a float64 copy of the observed model runs on zeros of its inputs' shapes (the copy's
    observers are thrown away with it)."""
    inputs = []
    for placeholder in (n for n in observed.graph.nodes if n.op == "placeholder"):
        value = placeholder.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return False
        dtype = torch.float64 if value.dtype == torch.float32 else value.dtype
        inputs.append(torch.zeros(tuple(value.shape), dtype=dtype))
    trial = copy.deepcopy(observed)
    _widen_convs(trial.graph)  # as calibration runs them: a large convolution in tiles
    trial.recompile()
    try:
        with torch.no_grad():
            trial.to(torch.float64)(*inputs)
    except Exception as e:  # noqa: BLE001  (any failure means: calibrate in float32)
        log.info("calibrating in float32: the model does not run in float64 (%s)", e)
        return False
    return True


_CONV2D = torch.ops.aten.conv2d.default
_CONV_TRANSPOSE2D = torch.ops.aten.conv_transpose2d.input
COLUMN_BYTES = 1 << 26  # the most one float64 convolution call unfolds while widened: 64 MB


def _pair(value) -> tuple[int, int]:
    """A conv2d size argument as (y, x): one number stands for both."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return values[0], values[-1]


def widened_conv2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """``aten.conv2d`` (same arguments) as the widened model runs it: a depthwise convolution by its taps, one
    whose float64 column matrix would pass ``COLUMN_BYTES`` in tiles, any other by ``aten.conv2d`` itself."""
    if input.dim() != 4:
        return _CONV2D(input, weight, bias, stride, padding, dilation, groups)
    if groups > 1 and groups == input.shape[1] and weight.shape[1] == 1:
        return depthwise_conv2d_by_taps(input, weight, bias, stride, padding, dilation, groups)
    positions = input.shape[0] * math.prod(_output_size(input, weight, stride, padding, dilation))
    if positions * _column_bytes(input, weight) > COLUMN_BYTES:
        return conv2d_in_tiles(input, weight, bias, stride, padding, dilation, groups)
    return _CONV2D(input, weight, bias, stride, padding, dilation, groups)


def _column_bytes(input, weight) -> int:
    """The bytes of one output position's column in a conv2d's unfolded input: in channels x kernel taps."""
    return input.shape[1] * weight.shape[2] * weight.shape[3] * input.element_size()


def _output_size(input, weight, stride, padding, dilation) -> tuple[int, int]:
    """A batched conv2d's output height and width."""
    (stride_y, stride_x), (pad_y, pad_x), (dilation_y, dilation_x) = map(_pair, (stride, padding, dilation))
    kernel_h, kernel_w = weight.shape[2:]
    return ((input.shape[2] + 2 * pad_y - dilation_y * (kernel_h - 1) - 1) // stride_y + 1,
            (input.shape[3] + 2 * pad_x - dilation_x * (kernel_w - 1) - 1) // stride_x + 1)


def _padded(input, padding) -> torch.Tensor:
    """A batched conv2d's input with its zero padding on each side."""
    pad_y, pad_x = _pair(padding)
    return torch.nn.functional.pad(input, (pad_x, pad_x, pad_y, pad_y))


def depthwise_conv2d_by_taps(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """``aten.conv2d`` (same arguments) with a depthwise convolution computed as the sum of its taps:
    ``out[n, o] = bias[o] + sum over (ky, kx) of weight[o, 0, ky, kx] * padded[n, o // m, y*sy + ky*dy, x*sx + kx*dx]``
    (``m`` output channels per input channel), taps in row-major order. Any other convolution (grouped with
    several input channels per group, unbatched) runs ``aten.conv2d`` itself."""
    if groups != input.shape[1] or weight.shape[1] != 1 or input.dim() != 4:
        return _CONV2D(input, weight, bias, stride, padding, dilation, groups)
    (stride_y, stride_x), (dilation_y, dilation_x) = _pair(stride), _pair(dilation)
    channels, _, kernel_h, kernel_w = weight.shape
    if channels != groups:  # a channel multiplier: output channel o reads input channel o // m
        input = input.repeat_interleave(channels // groups, dim=1)
    padded, (out_h, out_w) = _padded(input, padding), _output_size(input, weight, stride, padding, dilation)
    out = None
    for filter_y in range(kernel_h):
        for filter_x in range(kernel_w):
            top, left = filter_y * dilation_y, filter_x * dilation_x
            window = padded[:, :, top:top + stride_y * (out_h - 1) + 1:stride_y,
                            left:left + stride_x * (out_w - 1) + 1:stride_x]
            term = window * weight[:, 0, filter_y, filter_x].view(1, channels, 1, 1)
            out = term if out is None else out + term  # out of place: the recipe calibrates with autograd on
    return out if bias is None else out + bias.view(1, channels, 1, 1)


def conv2d_in_tiles(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """``aten.conv2d`` (same arguments, batched) computed one sample and one tile of output positions at a
    time: a band of whole rows, or of one row's columns when a row alone passes ``COLUMN_BYTES``, each from the
    window of the zero-padded input it reads. Each output value is the same sum of products as in one call,
    to float64 rounding."""
    (stride_y, stride_x), (dilation_y, dilation_x) = _pair(stride), _pair(dilation)
    kernel_h, kernel_w = weight.shape[2:]
    padded, (out_h, out_w) = _padded(input, padding), _output_size(input, weight, stride, padding, dilation)
    positions = max(1, COLUMN_BYTES // _column_bytes(input, weight))  # a tile: whole rows where one fits
    rows, columns = (min(out_h, positions // out_w), out_w) if positions >= out_w else (1, positions)
    samples = []
    for sample in range(input.shape[0]):
        bands = []
        for top in range(0, out_h, rows):
            bottom = min(out_h, top + rows)
            tiles = []
            for left in range(0, out_w, columns):
                right = min(out_w, left + columns)
                window = padded[sample:sample + 1, :,
                                top * stride_y:(bottom - 1) * stride_y + dilation_y * (kernel_h - 1) + 1,
                                left * stride_x:(right - 1) * stride_x + dilation_x * (kernel_w - 1) + 1]
                tiles.append(_CONV2D(window, weight, bias, [stride_y, stride_x], [0, 0], [dilation_y, dilation_x],
                                     groups))
            bands.append(torch.cat(tiles, dim=3))
        samples.append(torch.cat(bands, dim=2))
    return torch.cat(samples, dim=0)


def widened_conv_transpose2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                             groups=1, dilation=(1, 1)):
    """``aten.conv_transpose2d`` (same arguments) as the widened model runs it: itself, unless the float64
    column matrix of one sample (out channels x kernel taps by input positions) would pass ``COLUMN_BYTES``.
    Then it raises, and the model calibrates in float32 (``calibrate``'s fallback): in float64 such a layer
    is bound by memory traffic, whole or in tiles: a 4097-tap kernel over three 7 x 5000 x 11 inputs takes 16 s
    in float64 (12.6 GB a sample whole), 0.85 s in float32."""
    matrix = math.prod(weight.shape[1:]) * groups * math.prod(input.shape[2:]) * input.element_size()
    if input.dim() == 4 and matrix > COLUMN_BYTES:
        raise MemoryError(f"a transposed convolution would unfold {matrix / 1e6:,.0f} MB a sample in float64")
    return _CONV_TRANSPOSE2D(input, weight, bias, stride, padding, output_padding, groups, dilation)


_WIDENED_CONVS = {_CONV2D: widened_conv2d, _CONV_TRANSPOSE2D: widened_conv_transpose2d}
