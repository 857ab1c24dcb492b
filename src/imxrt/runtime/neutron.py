"""The ``NeutronBackend`` delegate on the host: a reference payload runs its LiteRT subgraph.

A delegate call's arguments are the value indices of the partition's inputs, then of its outputs. The
payload metadata maps them onto the LiteRT subgraph's I/O (input i <- args[inputs[i].arg], output j ->
args[n_inputs + outputs[j].arg]) and says, per tensor, how its bytes reach the subgraph:

- format flag 1: the tensor is channels_last, its bytes are already NHWC: the subgraph takes them as is;
- format flag 0: the subgraph takes the tensor's contiguous (NCHW) bytes and transposes them itself.

What the metadata says of each tensor must agree with the subgraph and with the tensors the delegate is
called with (``PAYLOAD_RULES`` at load, ``CALL_RULES`` per call site): a changed flag or shape is refused,
never run to other outputs.

A payload compiled by the eIQ Neutron SDK holds device microcode, which only the NPU (or NXP's
simulator) can run: it is refused with a message saying so, never misread as a reference payload.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from imxrt.errors import BadFile, ImxrtError
from imxrt.npu import reference_payload

if TYPE_CHECKING:
    from imxrt.runtime.litert import TensorSpec

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
    format_flag: int  # 1: the subgraph takes NHWC bytes (a channels_last tensor's own), 0: the tensor's own bytes
    scale: float
    zero_point: int

    @property
    def channels_last(self) -> bool:
        return self.format_flag == 1


_NHWC_FROM_NCHW = (0, 2, 3, 1)


# -- what the payload says of a tensor, against the subgraph (at load) and the call's tensor (per call site)

def format_flag_known(entry: TensorMap, spec: TensorSpec) -> str | None:
    """A format flag is 0 (the subgraph takes the tensor's own bytes) or 1 (it takes NHWC bytes)."""
    return None if entry.format_flag in (0, 1) else f"format flag {entry.format_flag}; the flags are 0 and 1"


def format_flag_layout(entry: TensorMap, spec: TensorSpec) -> str | None:
    """The subgraph's tensor has the program tensor's shape under flag 0, and its NHWC permutation (a 4-D
    tensor) under flag 1: a flag changed on its own is refused here."""
    if entry.format_flag == 1:
        if len(entry.shape) != 4:
            return f"format flag 1 on a {len(entry.shape)}-D tensor {entry.shape}; NHWC bytes need 4 dimensions"
        expected = tuple(entry.shape[d] for d in _NHWC_FROM_NCHW)
    else:
        expected = entry.shape
    if entry.tflite_shape == expected:
        return None
    return (f"format flag {entry.format_flag} takes {entry.shape} as {expected}, the payload says "
            f"{entry.tflite_shape}")


def subgraph_tensor_matches(entry: TensorMap, spec: TensorSpec) -> str | None:
    """The payload's tensor is the subgraph's: its shape, int8, its scale and zero point."""
    if entry.tflite_shape != spec.shape or spec.dtype != np.int8:
        return f"the payload says {entry.tflite_shape} int8, the subgraph has {spec.shape} {spec.dtype}"
    if np.float32(entry.scale) != np.float32(spec.scale) or entry.zero_point != spec.zero_point:
        return (f"the payload says scale {entry.scale:g}, zero point {entry.zero_point}; the subgraph has "
                f"{spec.scale:g}, {spec.zero_point}")
    return None


PAYLOAD_RULES = (format_flag_known, format_flag_layout, subgraph_tensor_matches)


def program_tensor_matches(entry: TensorMap, tensor: torch.Tensor) -> str | None:
    """The call's tensor has the shape the payload says, and is int8."""
    if tensor.shape == entry.shape and tensor.dtype == torch.int8:
        return None
    return f"it is {tuple(tensor.shape)} {tensor.dtype}, the payload says {entry.shape} int8"


def format_flag_dim_order(entry: TensorMap, tensor: torch.Tensor) -> str | None:
    """A tensor of flag 0 is contiguous (the board's runtime passes its bytes as they are); one of flag 1 is
    contiguous or channels_last (it transposes the first, passes the second)."""
    if tensor.is_contiguous():
        return None
    if entry.format_flag == 1 and tensor.is_contiguous(memory_format=torch.channels_last):
        return None
    return f"format flag {entry.format_flag} on a {tuple(tensor.shape)} tensor of strides {tuple(tensor.stride())}"


CALL_RULES = (program_tensor_matches, format_flag_dim_order)


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
        for kind, entries, specs in (("input", self.inputs, self.runner.inputs),
                                     ("output", self.outputs, self.runner.outputs)):
            if len(entries) != len(specs):
                raise BadFile(program_name, f"{where}: its payload maps {len(entries)} {kind}s, its LiteRT subgraph "
                                            f"has {len(specs)}")
            for entry, spec in zip(entries, specs, strict=True):
                self._keep(PAYLOAD_RULES, kind, entry, spec)

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
        self._keep(CALL_RULES, "input", entry, tensor)
        array = tensor.numpy()
        if entry.channels_last:
            array = array.transpose(0, 2, 3, 1)
        if array.flags.c_contiguous:
            view = array.reshape(entry.tflite_shape)  # shares the planned bytes
            return lambda: view
        return lambda: np.ascontiguousarray(array).reshape(entry.tflite_shape)

    def _target(self, tensor: torch.Tensor, entry: TensorMap) -> tuple[np.ndarray, tuple[int, ...]]:
        """Where a result goes (a view with the arena's strides) and the shape to read the result in."""
        self._keep(CALL_RULES, "output", entry, tensor)
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

    def _keep(self, rules, kind: str, entry: TensorMap, against) -> None:
        for rule in rules:
            problem = rule(entry, against)
            if problem is not None:
                raise BadFile(self.program_name, f"{self.name}: its {kind} {entry.name} breaks rule {rule.__name__}: "
                                                 f"{problem}")


def _tensor_map(entry: dict) -> TensorMap:
    return TensorMap(arg=int(entry["arg"]), name=str(entry["name"]), shape=tuple(int(d) for d in entry["shape"]),
                     tflite_shape=tuple(int(d) for d in entry["tflite_shape"]), format_flag=int(entry["format_flag"]),
                     scale=float(entry["scale"]), zero_point=int(entry["zero_point"]))
