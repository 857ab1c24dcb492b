"""QAT in the user's own training loop: ``prepare`` makes the fake-quantized module the user trains like any
``nn.Module`` (on any device, wrapped in DDP, checkpointed with ``state_dict``); ``convert`` makes the int8
program of a copy of it, which the rest of the compile lowers as it does a calibrated one.

The module carries what it was prepared for (target, input shapes) in ``GraphModule.meta``, so a module
prepared for another target, another input shape, or not by imxrt at all is refused by name, not compiled
with rules it was not trained under.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Sequence

import torch
from torch.export import ExportedProgram
from torchao.quantization.pt2e import FakeQuantize, move_exported_model_to_eval, move_exported_model_to_train
from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

from imxrt.errors import BadModel, BadOption
from imxrt.model_checks import non_finite
from imxrt.passes import run_aten_passes
from imxrt.quantization import rules
from imxrt.quantization.calibration import settle_zero_ranges
from imxrt.quantization.convert import convert as convert_quantized
from imxrt.quantization.quantizer import ImxrtQuantizer
from imxrt.targets import Target

PREPARED_FOR = "imxrt_qat"  # GraphModule.meta: {"target": name, "inputs": [[shape, dtype], ...]}

HOW_TO_PREPARE = "imxrt.prepare_qat(model, example_inputs, target=...)"


def prepare(exported: ExportedProgram, example_inputs: Sequence[torch.Tensor], target: Target
            ) -> torch.fx.GraphModule:
    """The training-mode program with fake quantization under ``target``'s rules (each conv+BN fused so BN
    stays trainable, folded at ``convert``), in training mode; ``train()`` and ``eval()`` work as on any
    module."""
    graph_module = run_aten_passes(exported.module(check_guards=False), qat=True, npu=target.npu is not None,
                                   qparam_flow=rules.qparam_flow(rules.devices_of(target)))
    prepared = prepare_qat_pt2e(graph_module, ImxrtQuantizer(target, qat=True))
    prepared.train = types.MethodType(_set_training, prepared)
    prepared.eval = types.MethodType(lambda self: _set_training(self, False), prepared)
    prepared.meta[PREPARED_FOR] = {"target": target.name, "inputs": _signature(example_inputs)}
    return prepared.train()


def _set_training(module: torch.fx.GraphModule, mode: bool = True) -> torch.fx.GraphModule:
    """``train(mode)`` of a prepared module: batch norm and dropout switched in the graph (an exported
    program has them as ops, not modules), and every submodule's ``training`` flag, which the observers
    follow: their statistics move in training mode only."""
    (move_exported_model_to_train if mode else move_exported_model_to_eval)(module)
    for submodule in module.modules():
        submodule.training = mode
    return module


def _signature(inputs: Sequence[torch.Tensor]) -> list[list]:
    return [[list(x.shape), str(x.dtype)] for x in inputs]


def unwrap(module: object) -> object:
    """The module inside DDP, DataParallel or ``torch.compile``'s wrapper."""
    while True:
        if isinstance(module, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            module = module.module
        elif isinstance(getattr(module, "_orig_mod", None), torch.nn.Module):  # torch.compile(module)
            module = module._orig_mod
        else:
            return module


def check_prepared(module: object, target: Target, example_inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """``module`` (unwrapped) if ``prepare`` made it for ``target`` and inputs of these shapes, else a clear
    ``BadModel`` or ``BadOption``."""
    module = unwrap(module)
    prepared_for = getattr(module, "meta", {}).get(PREPARED_FOR) if isinstance(module, torch.fx.GraphModule) \
        else None
    if prepared_for is None:
        kind = type(module).__name__
        raise BadModel(f"the {kind} given to compile_qat was not prepared by imxrt.prepare_qat: prepare the float "
                       f"model with {HOW_TO_PREPARE}, train that module, then compile it (imxrt.compile "
                       "quantizes a float model with calibration instead)")
    if prepared_for["target"] != target.name:
        raise BadOption("target", target.name, f"{prepared_for['target']!r}, the target the module was prepared "
                        f"for (its quantization rules are that target's), or prepare the model again for "
                        f"{target.name!r}")
    given, expected = _signature(example_inputs), prepared_for["inputs"]
    if given != expected:
        raise BadModel(f"example inputs {_describe(given)} differ from the {_describe(expected)} the module was "
                       "prepared with; pass the example inputs given to prepare_qat")
    if not any(isinstance(m, FakeQuantize) for m in module.modules()):
        raise BadModel("the prepared module holds no fake quantization (was it converted already?); compile the "
                       f"module {HOW_TO_PREPARE} returned")
    return module


def _describe(signature: list[list]) -> str:
    return ", ".join(f"{tuple(shape)} {dtype.replace('torch.', '')}" for shape, dtype in signature)


def convert(prepared: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The int8 module of a CPU copy of ``prepared`` (the user's module stays as it is, on its device, and
    can train on): evaluation mode, each BN folded into its conv, the observers' ranges as qparams, as PTQ's
    ``quantize_module`` returns it."""
    module = copy.deepcopy(prepared).to("cpu")
    module.eval()
    _check_trained(module)
    settle_zero_ranges(module)
    return convert_quantized(module)


def _check_trained(module: torch.fx.GraphModule) -> None:
    """Finite parameters (a diverged run has none), and observers that have seen data."""
    for name, parameter in module.named_parameters():
        found = non_finite(parameter.detach())
        if found:
            raise BadModel(f"parameter {name} holds {found}; NaN and Inf have no int8 value: the training run "
                           "diverged, compile a checkpoint from before it did")
    observers = [m.activation_post_process for m in module.modules() if isinstance(m, FakeQuantize)]
    if observers and all(getattr(o, "min_val", torch.zeros(0)).numel() == 0 or
                         not bool(torch.isfinite(o.min_val).all()) for o in observers):
        raise BadModel("the prepared module's observers have seen no data: train it (forward passes in training "
                       "mode) before compile_qat, or load a checkpoint of a trained one")
