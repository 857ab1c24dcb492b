"""Model SOURCE loading: a Python file defining ``model()``, ``example_inputs()`` and optionally
``calibration_inputs()`` and ``evaluation_data()`` (labelled ``(inputs, label)`` pairs for the accuracy
report), or ``package.module:function`` returning ``(model, example_inputs[, calibration])``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from imxrt.errors import BadFile, BadSource
from imxrt.files import check_regular
from imxrt.model_checks import called_exit

# What a SOURCE file that exits is told: script code belongs under a main guard.
_NO_EXIT = "a SOURCE file only defines functions: put script code under if __name__ == '__main__':"


@dataclass
class ModelSource:
    model: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    calibration: Iterable[Sequence[torch.Tensor]] | None
    evaluation: Iterable[tuple[Sequence[torch.Tensor], object]] | None = None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _call(source: str, what: str, function):
    try:
        return function()
    except SystemExit as e:  # not an Exception: it would end imxrt silently, with the user's status
        raise BadSource(source, f"{what} {called_exit(e)}; {_NO_EXIT}") from None
    except Exception as e:  # user code: report it in one line
        raise BadSource(source, f"{what} raised {_first_line(e)}") from e


def load_source(source: str) -> ModelSource:
    """Load the model, example inputs and calibration data named by ``source``."""
    path = Path(source)
    if source.endswith(".py") or path.exists():
        return _load_file(source, path)
    if ":" in source:
        return _load_function(source)
    raise BadSource(source, "no such file; give a Python file defining model() and example_inputs(), "
                            "or package.module:function")


def import_file(source: str, path: Path):
    """Import a SOURCE file as a module; it may import the files beside it."""
    try:  # a folder or a FIFO is not a SOURCE file (importing a FIFO would wait for a writer)
        check_regular(path, None, "a Python file defining model() and example_inputs()")
    except BadFile as e:
        raise BadSource(source, e.problem) from None
    name = f"imxrt_source_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    # Registered like an imported module, so what reads a model's globals by module name (torch.export's
    # strict mode, which ExecuTorch's recipes use; pickling, deepcopy) finds it.
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        _call(source, "importing the file", lambda: spec.loader.exec_module(module))
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(folder)
    return module


def _load_file(source: str, path: Path) -> ModelSource:
    module = import_file(source, path)
    for required in ("model", "example_inputs"):
        if not callable(getattr(module, required, None)):
            raise BadSource(source, f"defines no {required}() function; a SOURCE file must define model() "
                                    "returning an nn.Module and example_inputs() returning a tuple of tensors")
    model = _call(source, "model()", module.model)
    example_inputs = _call(source, "example_inputs()", module.example_inputs)
    calibration = None
    if callable(getattr(module, "calibration_inputs", None)):
        calibration = _call(source, "calibration_inputs()", module.calibration_inputs)
    checked = _checked(source, model, example_inputs, calibration)
    if callable(getattr(module, "evaluation_data", None)):
        checked.evaluation = _call(source, "evaluation_data()", module.evaluation_data)
    return checked


def _load_function(source: str) -> ModelSource:
    module_name, _, function_name = source.partition(":")
    try:
        module = importlib.import_module(module_name)
    except SystemExit as e:
        raise BadSource(source, f"importing {module_name} {called_exit(e)}; {_NO_EXIT}") from None
    except Exception as e:
        raise BadSource(source, f"cannot import {module_name} ({_first_line(e)})") from e
    function = getattr(module, function_name, None)
    if not callable(function):
        raise BadSource(source, f"{module_name} has no function {function_name}")
    result = _call(source, f"{function_name}()", function)
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise BadSource(source, f"{function_name}() must return (model, example_inputs[, calibration_inputs])")
    model, example_inputs, *rest = result
    return _checked(source, model, example_inputs, rest[0] if rest else None)


def _checked(source: str, model, example_inputs, calibration) -> ModelSource:
    if not isinstance(model, torch.nn.Module):
        raise BadSource(source, f"model() returned {type(model).__name__}, not a torch.nn.Module")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise BadSource(source, "example_inputs() must return a tuple of tensors")
    return ModelSource(model, tuple(example_inputs), calibration)
