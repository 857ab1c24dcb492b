"""Input validation (before export): the user's weights and data are finite, and user code does not exit.

NaN and Inf have no int8 value. The observers skip non-finite activations so that a model's own ``log(0)``
does not spoil a range; the same leniency would hide NaN/Inf in the user's weights or data and give a
program that computes garbage, so those are refused here, naming the tensor or the sample.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import torch

from imxrt.errors import BadInput, BadModel


def non_finite(tensor: torch.Tensor) -> str | None:
    """``"2 NaN and 1 Inf of 48 value(s)"``, or None when ``tensor`` is not float or every value is finite."""
    if not tensor.dtype.is_floating_point or bool(torch.isfinite(tensor).all()):
        return None
    nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
    counts = [f"{count} {kind}" for count, kind in ((nan, "NaN"), (inf, "Inf")) if count]
    return f"{' and '.join(counts)} of {tensor.numel()} value(s)"


def check_finite_weights(model: torch.nn.Module) -> None:
    """Every float parameter and buffer is finite; ``BadModel`` names the first that is not by its
    ``state_dict`` name."""
    named = itertools.chain((("parameter", name, p) for name, p in model.named_parameters()),
                            (("buffer", name, b) for name, b in model.named_buffers()))
    for kind, name, tensor in named:
        found = non_finite(tensor.detach())
        if found:
            raise BadModel(f"{kind} {name} holds {found}; NaN and Inf have no int8 value: load finite weights "
                           "(a diverged training run or a damaged checkpoint leaves them)")


def check_finite_sample(what: str, sample: Sequence[object]) -> None:
    """Every float tensor of ``sample`` is finite; ``BadInput`` names ``what`` (e.g. ``calibration sample 3``)
    and the input position."""
    for position, value in enumerate(sample):
        found = non_finite(value) if isinstance(value, torch.Tensor) else None
        if found:
            raise BadInput(f"{what}, input {position} holds {found}; NaN and Inf have no int8 value: give "
                           "finite data (drop or repair the sample)")


def called_exit(error: SystemExit) -> str:
    """``"called sys.exit(0)"``: how a SystemExit from user code is named in an error."""
    return f"called sys.exit({'' if error.code is None else repr(error.code)})"


def read_samples(samples: Iterable[object], what: str) -> Iterator[tuple[int, object]]:
    """``(index, sample)`` for each item of the user's iterable ``samples``; an exception (or sys.exit) while
    producing one is a ``BadInput`` naming the sample it was reading, not a crash of the stage reading them."""
    iterator = _produce(what, 0, lambda: iter(samples))
    for index in itertools.count():
        sample = _produce(what, index, lambda: next(iterator, _END))
        if sample is _END:
            return
        yield index, sample


_END = object()


def _produce(what: str, index: int, function):
    try:
        return function()
    except SystemExit as e:  # user code exiting must not end imxrt silently, with status 0
        raise BadInput(f"{what} sample {index}: the {what} data {called_exit(e)} while producing it; an "
                       "iterable of samples must yield them, not exit") from None
    except Exception as e:
        text = str(e).strip()
        first = f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
        raise BadInput(f"{what} sample {index}: reading the {what} data raised {first}; fix the code that "
                       "produces the samples") from e


def check_inputs(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The model must be float with float tensor inputs (or index / mask inputs): int8 conversion is this
    compiler's job."""
    if not isinstance(model, torch.nn.Module):
        raise BadModel(f"expected a torch.nn.Module, got {type(model).__name__}")
    example_inputs = check_example_inputs(example_inputs)
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if p.dtype in (torch.int64, torch.bool):
            continue  # BatchNorm's num_batches_tracked is int64
        if not p.dtype.is_floating_point:
            raise BadModel(f"parameter {name} is {p.dtype}; give the float model, imxrt quantizes it itself")
        if p.dtype != torch.float32:
            raise BadModel(f"parameter {name} is {p.dtype}; imxrt quantizes float32 models: call model.float()")
    check_finite_weights(model)
    return example_inputs


# Inputs that are not data to quantize: indices (an embedding's tokens, index_select's rows) and boolean masks.
INDEX_DTYPES = (torch.int64, torch.int32, torch.bool)
INDEX_DTYPE_NAMES = tuple(str(d).removeprefix("torch.") for d in INDEX_DTYPES)  # as report.json's io says


def check_example_inputs(example_inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """A non-empty tuple of tensors: finite float32 data, or integer indices / boolean masks (``INDEX_DTYPES``),
    which the program takes unquantized. An argument may be a tuple or list of tensors (``index_put``'s indices):
    the program takes its tensors as inputs of their own, in order (as ``torch.export`` flattens them)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not example_inputs:
        raise BadModel("example inputs must be a non-empty tuple of tensors")
    for index, value in enumerate(example_inputs):
        if isinstance(value, (tuple, list)):
            if not value or not all(isinstance(item, torch.Tensor) for item in value):
                raise BadModel(f"example input {index} is a {type(value).__name__} of {len(value)} that is not all "
                               "tensors: a program's inputs are tensors; give a tuple of tensors, or make the other "
                               "values constants of the model")
            continue
        if not isinstance(value, torch.Tensor):
            raise BadModel(f"example input {index} is a {type(value).__name__}, not a tensor: a program's inputs "
                           "are tensors; make a Python number a constant of the model, or pass it as a tensor")
    for name, x in _named_tensors(example_inputs):
        if x.dtype in INDEX_DTYPES:
            continue  # token indices or a mask: the program takes them as they are
        if not x.dtype.is_floating_point:
            raise BadModel(f"example input {name} is {x.dtype}; give the float model and float inputs, "
                           "imxrt quantizes them itself (integer indices are int64 or int32, masks bool)")
        if x.dtype != torch.float32:
            raise BadModel(f"example input {name} is {x.dtype}; imxrt quantizes float32 models: pass "
                           "float32 inputs (x.float()) and a float32 model (model.float())")
        found = non_finite(x)
        if found:  # they calibrate when no calibration data is given, and trace forward()
            raise BadModel(f"example input {name} holds {found}; give finite example inputs")
    return tuple(tuple(map(_canonical_strides, v)) if isinstance(v, (tuple, list)) else _canonical_strides(v)
                 for v in example_inputs)


def _canonical_strides(value: torch.Tensor) -> torch.Tensor:
    """``value`` with the canonical strides of its layout (channels_last when it is laid out so, else
    contiguous). torch.export keeps the example's strides in the program, and a size-1 dimension's stride is
    free: numpy's ``x[None]`` gives it stride 0, which ExecuTorch cannot read as a dim order."""
    layout = torch.channels_last if value.dim() == 4 and not value.is_contiguous() and \
        value.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
    canonical = torch.empty(value.shape, device="meta", memory_format=layout).stride()
    return value if value.stride() == canonical else value.clone(memory_format=layout)


def _named_tensors(example_inputs: tuple) -> list[tuple[str, torch.Tensor]]:
    """Each tensor of the example inputs with how messages name it: ``0``, or ``1[2]`` inside a tuple."""
    named = []
    for index, value in enumerate(example_inputs):
        if isinstance(value, (tuple, list)):
            named.extend((f"{index}[{item}]", x) for item, x in enumerate(value))
        else:
            named.append((str(index), value))
    return named
