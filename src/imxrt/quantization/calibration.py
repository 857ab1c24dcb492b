"""Calibration: run the observed model over the user's input tuples, with a progress bar.

The observed model runs in float64 and its observers' ranges are rounded to float32 at the end. In float32
the activations (and so the ranges, the scales and every artifact) moved by a float step with the thread
count or SIMD level (OMP_NUM_THREADS=1, ATEN_CPU_CAPABILITY=default): a float32 sum's rounding depends on
its order. In float64 that noise lies far below float32's resolution, so the rounded ranges are the same on
every machine. A model that cannot run in float64 (an op with a float32 constant it cannot mix) calibrates
in float32, as before.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence

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
    widen(observed)
    try:
        with torch.no_grad():
            for index, sample in tqdm(read_samples(samples, "calibration"), total=total, desc="calibrating",
                                      unit="sample", disable=not show_progress, leave=False):
                sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
                check_finite_sample(f"calibration sample {index}", sample)
                try:
                    run_loops(observed, *sample)
                except Exception as e:  # a user's calibration tuple that does not fit the model
                    raise BadModel(f"calibration sample {index} could not be run: {e}") from e
                count = index + 1
    finally:
        narrow(observed)
    if count == 0:
        raise BadModel("the calibration data is empty; give at least one input tuple")
    settle_zero_ranges(observed)
    return count


_WIDENED = "imxrt_widened_inputs"  # GraphModule.meta: the casts ``widen`` put after the float32 inputs


def widen(observed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The observed model in float64, in place: its parameters and buffers, and a cast after each float32
    input, so it still takes the user's float32 samples. Left as it is when it does not run in float64 (or is
    not all float32). ExecuTorch's export recipe runs it after ``prepare_pt2e`` (a post-prepare pass)."""
    if _WIDENED in observed.meta or not _runs_in_float64(observed):
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
    observed.to(torch.float64)
    observed.meta[_WIDENED] = casts
    observed.recompile()
    return observed


def narrow(observed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Undo ``widen``: the casts removed, parameters, buffers and the observers' ranges back in float32
    (rounded: what the quantized model computes with). ExecuTorch's recipe runs it before ``convert_pt2e``."""
    casts = observed.meta.pop(_WIDENED, None)
    if casts is None:
        return observed
    for cast in casts:
        cast.replace_all_uses_with(cast.args[0])
        observed.graph.erase_node(cast)
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
        observer = _range_observer(node, modules)
        if observer is None or not (observer.min_val == 0 and observer.max_val == 0):
            continue
        ranges = [(o.min_val, o.max_val) for o in _input_observers(node.args[0], modules)
                  if bool(torch.isfinite(o.min_val)) and o.max_val > o.min_val]
        if ranges:
            observer.min_val = torch.stack([low for low, _ in ranges]).min().clone()
            observer.max_val = torch.stack([high for _, high in ranges]).max().clone()
    return observed


def _range_observer(node: torch.fx.Node, modules: dict) -> torch.nn.Module | None:
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
        observer = _range_observer(node, modules)
        if observer is not None:
            found.append(observer)
        elif node.op == "call_function":
            stack.extend(node.all_input_nodes)
    return found


def _runs_in_float64(observed: torch.fx.GraphModule) -> bool:
    """Whether a float64 copy of the observed model runs on zeros of its inputs' shapes (the copy's
    observers are thrown away with it)."""
    tensors = [*observed.parameters(), *observed.buffers()]
    if any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors):
        return False  # a float64 or half model: widening and narrowing back would change its weights
    inputs = []
    for placeholder in (n for n in observed.graph.nodes if n.op == "placeholder"):
        value = placeholder.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return False
        dtype = torch.float64 if value.dtype == torch.float32 else value.dtype
        inputs.append(torch.zeros(tuple(value.shape), dtype=dtype))
    try:
        with torch.no_grad():
            copy.deepcopy(observed).to(torch.float64)(*inputs)
    except Exception as e:  # noqa: BLE001  (any failure means: calibrate in float32)
        log.info("calibrating in float32: the model does not run in float64 (%s)", e)
        return False
    return True
