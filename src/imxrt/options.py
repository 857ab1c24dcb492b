"""Compile options: the compiler's choices (hardware facts live in ``Target``), checked and resolved before
anything is compiled (``--neutron-compiler auto`` becomes ``eiq`` when the eIQ Neutron SDK imports, else
``reference``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from imxrt.errors import BadOption
from imxrt.npu.compilers import eiq
from imxrt.passes.int8_io import IO_CHOICES
from imxrt.targets import Target, get_target

CELL_STATE_CHOICES = ("int8", "float")  # an LSTM's cell state (CompileOptions.cell_state)
ACTIVATION_RANGES = ("minmax", "mse")  # how PTQ picks activation ranges (CompileOptions.activation_ranges)

NEUTRON_COMPILERS = eiq.COMPILER_CHOICES  # auto: eiq when the eIQ Neutron SDK imports, else reference


@dataclass(frozen=True)
class CompileOptions:
    """Compiler choices (hardware facts live in ``Target``)."""

    neutron_compiler: str = "auto"
    calibration_samples: int | None = None  # use at most this many calibration tuples
    show_progress: bool = True
    # eIQ Neutron converter options (need the eIQ compiler)
    fetch_constants_to_sram: bool = False  # microcode copies weights from flash to SRAM before use
    dump_kernel_selection: bool = False  # write the converter's kernel selection C code next to the .pte
    neutron_profiling: bool = False  # profiling microcode + npu/partition_<i>.kernels.json (kernel -> edge ops)
    sram_budget: int | None = None  # bytes of SRAM the program may use; None: the target's SRAM
    io: str = "float"  # "int8": the program takes and returns the int8 tensors (no float I/O is planned)
    # an LSTM's (and LSTMCell's) cell state: "float" (its update, c = f c + i g, and tanh(c) in float on the CPU
    # between the int8 gates, a state given and returned by the model crossing its boundary in float: a few more
    # kernel calls per step; an int8 one loses accuracy, as TFLite's int8 LSTM keeps its cell state in int16),
    # or "int8" (one scale across its steps: the step all int8)
    cell_state: str = "float"
    # how PTQ picks each activation's int8 range from the calibration data: "minmax" (the widest seen) or
    # "mse" (the range of least int8 rounding-plus-clipping error over a histogram of the values seen)
    activation_ranges: str = "minmax"
    # after calibration, each conv / linear bias takes back the mean shift its int8 weight rounding causes
    # (ΔW · E[x] over the calibration data)
    bias_correction: bool = False
    # before calibration, each convolution's output channels are scaled to even out their activation ranges, and
    # the conv / linear layers reading them take the inverse (cross-layer equalization, on the calibration data)
    equalization: bool = False
    # modules (their paths in the model: "stft_conv", "encoder.0") whose ops stay float, on the Cortex-M: a layer
    # whose input or output needs more range than int8 (a learned STFT reading a waveform). Like the two above,
    # post-training quantization only
    float_layers: tuple[str, ...] = ()

    @property
    def converter(self) -> eiq.ConverterOptions:
        return eiq.ConverterOptions(fetch_constants_to_sram=self.fetch_constants_to_sram,
                                    dump_kernel_selection_code=self.dump_kernel_selection,
                                    profiling=self.neutron_profiling)


def resolve_options(options: CompileOptions | None, target: str | Target) -> tuple[CompileOptions, Target]:
    """The options, checked, with the Neutron compiler resolved, and the target."""
    options = options or CompileOptions()
    target = get_target(target) if isinstance(target, str) else target
    options = resolve_neutron_compiler(options, target)
    if options.io not in IO_CHOICES:
        raise BadOption("--io", options.io, IO_CHOICES)
    if options.cell_state not in CELL_STATE_CHOICES:
        raise BadOption("--cell-state", options.cell_state, CELL_STATE_CHOICES)
    if options.activation_ranges not in ACTIVATION_RANGES:
        raise BadOption("--activation-ranges", options.activation_ranges, ACTIVATION_RANGES)
    if options.sram_budget is not None and (isinstance(options.sram_budget, bool) or
                                            not isinstance(options.sram_budget, int) or options.sram_budget < 1):
        raise BadOption("--sram-budget", options.sram_budget, "a positive number of bytes (e.g. 512K, 2M)")
    return options, target


_CONVERTER_OPTIONS = {"fetch_constants_to_sram": "--fetch-constants-to-sram",
                      "dump_kernel_selection": "--dump-kernel-selection", "neutron_profiling": "--neutron-profiling"}


def resolve_neutron_compiler(options: CompileOptions, target: Target) -> CompileOptions:
    """``options`` with ``auto`` resolved (``eiq`` when the eIQ Neutron SDK imports). With the SDK, its
    description of the target's NPU must equal the registry's; converter options need the SDK."""
    if options.neutron_compiler not in NEUTRON_COMPILERS:
        raise BadOption("--neutron-compiler", options.neutron_compiler, NEUTRON_COMPILERS)
    compiler = eiq.resolve(options.neutron_compiler, has_npu=target.npu is not None)
    if compiler != "eiq":
        for name, flag in _CONVERTER_OPTIONS.items():
            if getattr(options, name):
                raise BadOption(flag, True, "it only with the eIQ Neutron SDK installed (--neutron-compiler eiq); "
                                            f"--neutron-compiler {options.neutron_compiler} compiles with the "
                                            "reference compiler, which makes no microcode")
    elif target.npu is not None:
        eiq.check_target(target.npu)
    return dataclasses.replace(options, neutron_compiler=compiler)
