"""Input data for a program: ``.npy`` files read safely, NaN/Inf warned about, and float data for a program
with int8 inputs (``--io int8``) quantized with each input's scale and zero point.

The arithmetic is the program's own input quantize (``cortex_m::quantize_per_tensor``): float32 product by
1/scale, rounded half to even, plus the zero point. A value beyond the int8 range saturates, with a warning
naming the input, rather than wrapping around.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from imxrt.errors import BadFile, BadInput
from imxrt.files import open_regular
from imxrt.model_checks import INDEX_DTYPE_NAMES
from imxrt.pte.reader import HOST_MEMORY_CAP

log = logging.getLogger("imxrt")

INT8_MIN, INT8_MAX = -128, 127


def quantize_input(array: np.ndarray, scale: float, zero_point: int, name: str) -> np.ndarray:
    """``array`` (float) as int8 with ``scale`` and ``zero_point``; out-of-range values saturate."""
    values = np.asarray(array, dtype=np.float32)
    if np.isnan(values).any():
        raise BadInput(f"input {name} has NaN values: give finite float data to --quantize-inputs")
    q = np.rint(values * (np.float32(1.0) / np.float32(scale))) + np.float32(zero_point)
    outside = int(np.count_nonzero((q < INT8_MIN) | (q > INT8_MAX)))
    if outside:
        log.warning("input %s: %d of %d value(s) are outside the int8 range with scale %g and zero point %d; "
                    "saturated to [%d, %d]", name, outside, q.size, scale, zero_point, INT8_MIN, INT8_MAX)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def quantize_inputs(arrays: Sequence[np.ndarray], described: Sequence[dict]) -> list[np.ndarray]:
    """Each float array whose input (``report["io"]["inputs"]``) is int8, quantized; the others unchanged, with
    a warning naming each input the program does not take as int8 (``--quantize-inputs`` does nothing for it:
    a float input is quantized by the program itself, with the same scale and zero point)."""
    if len(arrays) != len(described):
        raise BadInput(f"the program takes {len(described)} input(s), got {len(arrays)}")
    result = []
    for position, (array, info) in enumerate(zip(arrays, described, strict=True)):
        name = f"{position} ({info['name']})"
        if info["dtype"] not in ("int8", *INDEX_DTYPE_NAMES):  # indices and masks are inputs as they are
            log.warning("input %s: the program takes %s, not int8: --quantize-inputs leaves it as given (a float "
                        "input is quantized by the program itself)", name, info["dtype"])
        if info["dtype"] != "int8" or not np.issubdtype(np.asarray(array).dtype, np.floating):
            result.append(array)
            continue
        if info.get("scale") is None:
            raise BadInput(f"input {name} has no scale and zero point in the report: give int8 data")
        result.append(quantize_input(array, info["scale"], info["zero_point"], name))
    return result


# Kinds a program input can be: bool, signed and unsigned integers, floats (numpy's dtype.kind letters).
_NUMERIC_KINDS = "biuf"
_OTHER_KINDS = {"U": "strings", "S": "byte strings", "O": "Python objects", "V": "structured records",
                "c": "complex numbers", "M": "dates", "m": "time spans"}
_ZIP_MAGIC = b"PK\x03\x04"  # a .npz is a zip archive


def read_npy(path: Path) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, in native byte order; ``BadFile`` for anything else.

    The header is checked before any data is read, so a header claiming more bytes than the file holds is
    refused without allocating them. A big-endian file is converted (the same values); strings, objects,
    structured arrays and ``.npz`` archives are refused."""
    with open_regular(path, HOST_MEMORY_CAP, "a .npy file") as file:  # not a folder, FIFO, device or huge
        try:
            if file.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC:
                raise BadFile(str(path), "is a .npz archive; save one array per .npy file (numpy.save) and give "
                                         "each with its own --input")
            file.seek(0)
            shape, _, dtype = _read_header(path, file)
            if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
                raise BadFile(str(path), f"holds {_OTHER_KINDS.get(dtype.kind, 'non-numeric values')} ({dtype}); "
                                         "a program input is a numeric array "
                                         "(e.g. float32, or int8 for an int8-input program)")
            nbytes = math.prod(shape) * dtype.itemsize
            available = os.fstat(file.fileno()).st_size - file.tell()
            if nbytes > available:
                raise BadFile(str(path), f"its header claims shape {shape} {dtype.name} ({nbytes:,} bytes) but "
                                         f"the file holds {available:,} bytes of data: it is truncated or damaged; "
                                         "save the array again")
            file.seek(0)
            array = np.lib.format.read_array(file, allow_pickle=False)
        except OSError as e:
            raise BadFile(str(path), f"cannot be read ({e.strerror or e})") from None
        except ValueError as e:  # numpy's reader, on data its header did not describe
            raise BadFile(str(path), f"is not a .npy array ({str(e).strip().splitlines()[0]})") from None
    if not array.dtype.isnative:  # torch takes native byte order only; the values are the same
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _read_header(path: Path, file) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of an open ``.npy``, leaving ``file`` at the first data byte."""
    try:
        version = np.lib.format.read_magic(file)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(file)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(file)
    except ValueError as e:
        raise BadFile(str(path), f"is not a .npy array ({str(e).strip().splitlines()[0]})") from None
    # numpy writes version 3.0 only for structured arrays whose field names need UTF-8: never an input.
    raise BadFile(str(path), f"is a version {version[0]}.{version[1]} .npy (a structured array); save a plain "
                             "numeric array with numpy.save")


def warn_non_finite(inputs: Sequence[np.ndarray | torch.Tensor]) -> None:
    """Warn, naming the input, about NaN or Inf in float inputs: the program runs, its outputs for them are
    not meaningful (the int8 quantize saturates Inf and has no value for NaN)."""
    for position, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            if not value.dtype.is_floating_point or bool(torch.isfinite(value).all()):
                continue
            nan, inf, size = int(torch.isnan(value).sum()), int(torch.isinf(value).sum()), value.numel()
        else:
            array = np.asarray(value)
            if not np.issubdtype(array.dtype, np.floating) or np.isfinite(array).all():
                continue
            nan, inf, size = int(np.isnan(array).sum()), int(np.isinf(array).sum()), array.size
        counts = " and ".join(f"{count} {kind}" for count, kind in ((nan, "NaN"), (inf, "Inf")) if count)
        log.warning("input %d: %s of %d value(s); the outputs computed from them are not meaningful "
                    "(NaN has no int8 value, Inf saturates)", position, counts, size)
