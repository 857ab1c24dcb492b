"""The ``NeutronBackend`` delegate on the host: a reference payload runs its LiteRT subgraph.

A delegate call's arguments are the value indices of the partition's inputs, then of its outputs. The
payload metadata maps them onto the LiteRT subgraph's I/O (input i <- args[inputs[i].arg], output j ->
args[n_inputs + outputs[j].arg]) and says, per tensor, how its bytes reach the subgraph:

- format flag 1: the tensor is channels_last, its bytes are already NHWC: the subgraph takes them as is;
- format flag 0: the subgraph takes the tensor's contiguous (NCHW) bytes and transposes them itself.

A payload compiled by the eIQ Neutron SDK holds device microcode, which only the NPU (or NXP's
simulator) can run: it is refused with a message saying so, never misread as a reference payload.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from imxrt.errors import BadFile, ImxrtError
from imxrt.npu import payload as reference_payload

DELEGATE_ID = "NeutronBackend"
MICROCODE_MAGIC = 0x64434D6E  # first word of Neutron microcode (reference/neutron.md)
_ALIGNMENT = 16


@dataclass(frozen=True)
class TensorMap:
    """Where one subgraph input or output lives among the delegate's arguments, and in which layout."""

    arg: int
    name: str
    shape: tuple[int, ...]  # the program tensor's logical shape (NCHW for images)
    tflite_shape: tuple[int, ...]  # the subgraph tensor's shape
    channels_last: bool  # format flag 1


def is_microcode(blob: bytes) -> bool:
    """The stock runtime's payload: three small counts, flags and maps, padded to 16, then microcode whose
    first word is the Neutron microcode magic."""
    if len(blob) < 4:
        return False
    n_in, n_out = blob[0], blob[1]
    header = 3 + 2 * n_in + 2 * n_out + 1
    start = (header + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
    return len(blob) >= start + 4 and struct.unpack_from("<I", blob, start)[0] == MICROCODE_MAGIC


class NeutronDelegate:
    """One reference payload, parsed and prepared once; ``run`` executes a delegate call."""

    def __init__(self, blob: bytes, program_name: str, index: int) -> None:
        where = f"NeutronBackend delegate {index}"
        if not reference_payload.is_reference(blob):
            if is_microcode(blob):
                raise BadFile(program_name, f"{where} holds Neutron microcode compiled by the eIQ Neutron SDK; "
                                            "it runs only on the i.MX RT700 board or in NXP's Neutron simulator. "
                                            "Compile with --neutron-compiler reference to run it on the host")
            raise BadFile(program_name, f"{where} holds neither an imxrt reference payload nor Neutron "
                                        "microcode; recompile the model with imxrt")
        try:
            parsed = reference_payload.unpack(blob)
        except ValueError as e:
            raise BadFile(program_name, f"{where}: {e}; recompile the model with imxrt") from None
        from imxrt.runtime.litert import LiteRTRunner  # the LiteRT executor (kernel library) on first use

        self.name = where
        self.program_name = program_name
        try:
            self.inputs = [_tensor_map(entry) for entry in parsed.metadata["inputs"]]
            self.outputs = [_tensor_map(entry) for entry in parsed.metadata["outputs"]]
        except (KeyError, TypeError, ValueError) as e:
            raise BadFile(program_name, f"{where}: its metadata lacks or garbles {e}; recompile the model") from None
        try:
            self.runner = LiteRTRunner.from_bytes(parsed.tflite)
        except ImxrtError as e:  # a corrupted subgraph, or an op the LiteRT executor lacks: name the file too
            raise BadFile(program_name, f"{where}: {e}") from e
        except Exception as e:  # a subgraph that parses but points nowhere: a corrupted file
            raise BadFile(program_name, f"{where}: its LiteRT subgraph cannot be prepared ({type(e).__name__}: "
                                        f"{e}); the file is corrupted, recompile the model") from e

    def written(self, n_args: int) -> list[int]:
        """Positions among the call's arguments of the tensors this delegate writes."""
        self._check_arguments(n_args)
        first_output = n_args - len(self.outputs)
        return [first_output + entry.arg for entry in self.outputs]

    def run(self, args: list[torch.Tensor]) -> None:
        """One delegate call on these tensors."""
        self.bind(args)()

    def bind(self, args: list[torch.Tensor]) -> Callable[[], None]:
        """``run`` on tensors that stay the same objects from call to call (arena views): the checks and the
        numpy views of their bytes are made once, so a call is the subgraph plus one copy per tensor (none
        for an input whose planned bytes already are the subgraph's)."""
        self._check_arguments(len(args))
        first_output = len(args) - len(self.outputs)
        feeds = [self._feed(args[entry.arg], entry) for entry in self.inputs]
        targets = [self._target(args[first_output + entry.arg], entry) for entry in self.outputs]
        self.runner.check_inputs([feed() for feed in feeds])  # the views are fixed: once for every call
        run_subgraph = self.runner.run_checked

        def run() -> None:
            results = run_subgraph([feed() for feed in feeds])
            for (target, shape), result in zip(targets, results, strict=True):
                np.copyto(target, result.reshape(shape))
        return run

    def _feed(self, tensor: torch.Tensor, entry: TensorMap) -> Callable[[], np.ndarray]:
        self._check(tensor, entry)
        array = tensor.numpy()
        if entry.channels_last:
            array = array.transpose(0, 2, 3, 1)
        if array.flags.c_contiguous:
            view = array.reshape(entry.tflite_shape)  # shares the planned bytes
            return lambda: view
        return lambda: np.ascontiguousarray(array).reshape(entry.tflite_shape)

    def _target(self, tensor: torch.Tensor, entry: TensorMap) -> tuple[np.ndarray, tuple[int, ...]]:
        """Where a result goes (a view with the arena's strides) and the shape to read the result in."""
        self._check(tensor, entry)
        target = tensor.numpy()
        if entry.channels_last:
            target = target.transpose(0, 2, 3, 1)
        return target, target.shape

    def _check_arguments(self, n_args: int) -> None:
        """The payload's I/O maps point among the call's arguments (Python would take -1 as the last one)."""
        n_inputs = n_args - len(self.outputs)
        for kind, entries, count in (("input", self.inputs, n_inputs), ("output", self.outputs, len(self.outputs))):
            for entry in entries:
                if not 0 <= entry.arg < count:
                    raise BadFile(self.program_name, f"{self.name}: its {kind} {entry.name} is argument {entry.arg} "
                                                     f"of the call's {max(count, 0)} {kind}s")

    def _check(self, tensor: torch.Tensor, entry: TensorMap) -> None:
        if tensor.shape != entry.shape or tensor.dtype != torch.int8:
            raise BadFile(self.program_name, f"{self.name}: tensor {entry.name} is {tuple(tensor.shape)} "
                                             f"{tensor.dtype}, its payload expects {entry.shape} int8")


def _tensor_map(entry: dict) -> TensorMap:
    return TensorMap(arg=int(entry["arg"]), name=str(entry["name"]), shape=tuple(entry["shape"]),
                     tflite_shape=tuple(entry["tflite_shape"]), channels_last=bool(entry["format_flag"]))
