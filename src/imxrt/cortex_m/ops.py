"""The cortex_m op library: the ops the CPU lowering emits, under the names and schemas of ExecuTorch's
Cortex-M kernel library (reference/cortex_m.md), so a ``.pte`` that calls them loads on a board's runtime.

Each op is one row of ``OPS``: its name, its arguments, its fake implementation (``shapes``: shapes,
dtypes and layouts for torch.export, to_edge and memory planning) and its reference implementation
(``reference``: the device kernel's arithmetic on imxrt's int8 kernel library). Every row defines two
overloads, the functional ``cortex_m::<name>`` the edge graph holds and ``cortex_m::<name>.out`` the program
serializes; the host runtime calls the ``.out`` kernels with its arena views (any strides).

Living next to ExecuTorch's own definitions. ExecuTorch's Cortex-M backend defines the same namespace in
its Python op module with ``Library("cortex_m", "DEF")`` and unconditional ``define`` calls; tests import it
as an independent reference. torch allows one DEF library per namespace and one definition per op, so:

- We define through a FRAGMENT library, never a DEF one, and only the ops not yet defined. An op that is
  already defined must have exactly our schema, else importing raises ``SchemaMismatch`` (an ExecuTorch
  whose kernels take other arguments than the ones we emit is an installation to fix, not to paper over).
  So importing ExecuTorch's module first, then ours, works by construction.
- The other order cannot work unaided, because ExecuTorch's module would try to define ops that we hold.
  One import hook (``_StepAside``, a ``sys.meta_path`` finder that answers for that single module name)
  wraps the module's loader: just before the module body runs, our definitions (schemas, fakes,
  functional implementations) are destroyed with ``Library._destroy``; when it has run, the same
  define-what-is-missing step checks ExecuTorch's schemas against ours and restores anything it lacks
  (everything, if its import failed). No ExecuTorch code is imported or patched here.

The ``.out`` kernels live in a library of their own that never steps aside (ExecuTorch's module registers no
``.out`` kernels), so the host runtime runs our reference code in either order. After ExecuTorch has taken
over, its fake and functional implementations are the ones torch runs (its float approximations), and
``torch.ops.cortex_m.<name>`` are new op objects: build op-keyed tables after such an import, not before.
ExecuTorch's op module is loaded through ``executorch.backends.cortex_m.passes`` (importing it first on its
own is a circular import in ExecuTorch itself, with or without imxrt).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.library import Library

from imxrt.cortex_m import reference, shapes
from imxrt.errors import ImxrtError

NAMESPACE = "cortex_m"
EXECUTORCH_OPS_MODULE = "executorch.backends.cortex_m.ops.operators"
_OUT = "*, Tensor(a!) out"


class SchemaMismatch(ImxrtError):
    """``cortex_m::<op>`` is already defined (by an installed ExecuTorch) with another schema than ours."""

    def __init__(self, qualified_name: str, theirs: str, ours: str):
        super().__init__(f"{qualified_name}: defined elsewhere as '{theirs}', imxrt needs '{ours}'; install the "
                         "ExecuTorch version imxrt pins (pip install -e .) so both agree")
        self.qualified_name = qualified_name


@dataclass(frozen=True)
class CortexMOp:
    """One cortex_m op: the functional schema is ``name(arguments) -> returns``, the out variant
    ``name.out(arguments, *, Tensor(a!) out) -> Tensor(a!)``."""

    name: str
    arguments: str
    fake: Callable[..., torch.Tensor]
    reference: Callable[..., torch.Tensor]  # the logical result, any strides
    returns: str = "Tensor"
    # The .out call prepared once on tensors that stay the same (the host runtime's arena views): takes the
    # .out arguments, returns the call. Where there is none, each call runs ``reference``.
    prepare: Callable[..., Callable[[], torch.Tensor]] | None = None
    data: tuple[int, ...] = (0,)  # argument positions whose values may change between calls (activations)

    @property
    def schema(self) -> str:
        return f"{self.name}({self.arguments}) -> {self.returns}"

    @property
    def out_schema(self) -> str:
        return f"{self.name}.out({self.arguments}, {_OUT}) -> Tensor(a!)"


_QUANTIZE = "Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype"
_CONV = ("Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, int input_offset, "
         "int output_offset, Tensor requantize_multipliers, Tensor requantize_shifts, int activation_min, "
         "int activation_max, Tensor scratch")
_DEPTHWISE = ("Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
              "int depth_multiplier, int input_offset, int output_offset, Tensor requantize_multipliers, "
              "Tensor requantize_shifts, int activation_min, int activation_max, Tensor scratch")
_TRANSPOSE_CONV = ("Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] output_padding, "
                   "int[] dilation, int input_offset, int output_offset, Tensor requantize_multipliers, "
                   "Tensor requantize_shifts, int activation_min, int activation_max, Tensor scratch, "
                   "Tensor output_scratch")
_AVG_POOL = ("Tensor input, int[] kernel_size, int[] stride, int[] padding, bool ceil_mode, int zero_point, "
             "int multiplier, int shift, Tensor scratch")
_MAX_POOL = ("Tensor input, int[] kernel_size, int[] stride, int[] padding, int[] dilation, bool ceil_mode, "
             "int input_zero_point, int output_zero_point, int activation_min, int activation_max")


def _kernel_op(name: str, arguments: str, fake: Callable[..., torch.Tensor], kernel: Callable,
               data: tuple[int, ...] = (0,), nchw: bool = False, elementwise: bool = False) -> CortexMOp:
    """A row whose reference and prepared call come from one kernel factory (``reference``); ``data``:
    positions of the arguments that carry activations (the rest are constants); ``elementwise``: the kernel
    maps each element alone (``reference.prepared``)."""
    return CortexMOp(name, arguments, fake, reference.functional(kernel, data, nchw),
                     prepare=reference.prepared(name, kernel, data, nchw, fake, elementwise), data=data)



def _layout_twins(name: str, arguments: str, nchw_fake: Callable[..., torch.Tensor],
                  nhwc_fake: Callable[..., torch.Tensor], nhwc_kernel: Callable) -> tuple[CortexMOp, CortexMOp]:
    """``name`` on NCHW-logical tensors and ``name_nhwc`` on NHWC-logical ones: one NHWC kernel factory."""
    return (_kernel_op(name, arguments, nchw_fake, nhwc_kernel, nchw=True),
            _kernel_op(f"{name}_nhwc", arguments, nhwc_fake, nhwc_kernel))


OPS: tuple[CortexMOp, ...] = (
    CortexMOp("quantize_per_tensor", _QUANTIZE, shapes.quantize_per_tensor, reference.quantize_per_tensor,
              returns="(Tensor Z)", prepare=reference.prepare_quantize_per_tensor),
    CortexMOp("dequantize_per_tensor", _QUANTIZE, shapes.dequantize_per_tensor, reference.dequantize_per_tensor,
              returns="(Tensor Z)", prepare=reference.prepare_dequantize_per_tensor),
    _kernel_op("quantized_add", "Tensor self, int self_zero_point, int self_multiplier, int self_shift, "
               "Tensor other, int other_zero_point, int other_multiplier, int other_shift, int output_zero_point, "
               "int output_multiplier, int output_shift, int activation_min, int activation_max",
               shapes.quantized_add, reference.quantized_add_kernel, data=(0, 4), elementwise=True),
    _kernel_op("quantized_mul", "Tensor self, int self_zero_point, Tensor other, int other_zero_point, "
               "int output_zero_point, int output_multiplier, int output_shift",
               shapes.quantized_mul, reference.quantized_mul_kernel, data=(0, 2), elementwise=True),
    _kernel_op("quantized_div", "Tensor self, int self_zero_point, Tensor other, int other_zero_point, "
               "int output_zero_point, float output_scale", shapes.quantized_div, reference.quantized_div_kernel,
               data=(0, 2), elementwise=True),
    _kernel_op("quantized_activation", "Tensor input, Tensor lut",
               shapes.quantized_activation, reference.quantized_activation_kernel, elementwise=True),
    _kernel_op("minimum", "Tensor self, Tensor other", shapes.minimum, reference.minimum_kernel, data=(0, 1),
               elementwise=True),
    _kernel_op("maximum", "Tensor self, Tensor other", shapes.maximum, reference.maximum_kernel, data=(0, 1),
               elementwise=True),
    _kernel_op("quantized_linear", "Tensor input, Tensor weights, Tensor? bias, Tensor? kernel_sum, "
               "int input_offset, int filter_offset, int output_offset, int[] requantize_multipliers, "
               "int[] requantize_shifts, int activation_max, int activation_min",
               shapes.quantized_linear, reference.quantized_linear_kernel),
    _kernel_op("softmax", "Tensor input, int dim, int input_zero_point, int output_zero_point, int input_multiplier, "
               "int input_shift, int diff_min", shapes.softmax, reference.softmax_kernel),
    _kernel_op("transpose", "Tensor input, int[] perm", shapes.transpose, reference.transpose_kernel),
    _kernel_op("pad", "Tensor input, int[] pre_pad, int[] post_pad, int pad_value", shapes.pad,
               reference.pad_kernel),
    *_layout_twins("quantized_conv2d", _CONV, shapes.quantized_conv2d, shapes.quantized_conv2d_nhwc,
                   reference.quantized_conv2d_nhwc_kernel),
    *_layout_twins("quantized_depthwise_conv2d", _DEPTHWISE, shapes.quantized_depthwise_conv2d,
                   shapes.quantized_depthwise_conv2d_nhwc, reference.quantized_depthwise_conv2d_nhwc_kernel),
    *_layout_twins("quantized_transpose_conv2d", _TRANSPOSE_CONV, shapes.quantized_transpose_conv2d,
                   shapes.quantized_transpose_conv2d_nhwc, reference.quantized_transpose_conv2d_nhwc_kernel),
    *_layout_twins("quantized_avg_pool2d", _AVG_POOL, shapes.quantized_avg_pool2d,
                   shapes.quantized_avg_pool2d_nhwc, reference.quantized_avg_pool2d_nhwc_kernel),
    *_layout_twins("quantized_max_pool2d", _MAX_POOL, shapes.quantized_max_pool2d,
                   shapes.quantized_max_pool2d_nhwc, reference.quantized_max_pool2d_nhwc_kernel),
    _kernel_op("quantized_batch_matmul", "Tensor lhs, int lhs_zero_point, Tensor rhs_transposed, "
               "int rhs_zero_point, int output_zero_point, int output_multiplier, int output_shift, Tensor scratch",
               shapes.quantized_batch_matmul, reference.quantized_batch_matmul_kernel, data=(0, 2)),
)


def _defined_schema(name: str, overload: str) -> torch.FunctionSchema | None:
    try:
        return torch._C._get_schema(f"{NAMESPACE}::{name}", overload)
    except RuntimeError:  # "Found no matching schema"
        return None


def _define(library: Library, schema: str) -> bool:
    """Define ``schema`` unless it already is; True when this call defined it. An existing definition must
    equal ours."""
    ours = torch._C.parse_schema(f"{NAMESPACE}::{schema}")
    theirs = _defined_schema(ours.name.partition("::")[2], ours.overload_name)
    if theirs is None:
        library.define(schema)
        return True
    if str(theirs) != str(ours):
        raise SchemaMismatch(ours.name + (f".{ours.overload_name}" if ours.overload_name else ""), str(theirs),
                             str(ours))
    return False


def _functional_kernel(op: CortexMOp) -> Callable[..., torch.Tensor]:
    """The functional op: the prepared call the host runtime makes (where the op has one) into a new tensor
    with the fake's layout, so every functional test runs the runtime's path."""
    if op.prepare is not None:
        def run_prepared(*args):
            out = op.fake(*args)
            return op.prepare(*args, out=out)()
        return run_prepared

    def run(*args):
        return op.fake(*args).copy_(op.reference(*args))

    return run


def out_kernel(op: CortexMOp) -> Callable[..., torch.Tensor]:
    """Writes the logical result into ``out``, which may be any strided view (an arena slot)."""

    def run(*args, out):
        expected = op.fake(*reference.on_meta(args))  # sized before the kernel allocates a result that large
        reference.check_out(op.name, out.shape, out.dtype, expected.shape, expected.dtype)
        result = op.reference(*args)
        reference.check_out(op.name, out.shape, out.dtype, result.shape, result.dtype)
        return out.copy_(result)

    return run


def _out_meta(op: CortexMOp) -> Callable[..., torch.Tensor]:
    """The ``.out`` op on meta tensors, as torch's structured out kernels behave: the result's shape from the
    op's fake, ``out`` resized to it (a meta tensor: nothing is allocated); another dtype is an error."""

    def run(*args, out):
        expected = op.fake(*args)
        if out.dtype != expected.dtype:
            raise RuntimeError(f"cortex_m::{op.name}.out: the result is {expected.dtype}, out is {out.dtype}")
        if out.shape != expected.shape:
            out.resize_(expected.shape)
        return out

    return run


def _define_missing() -> Library:
    """One FRAGMENT library holding every definition that nobody else provides yet, with its fake and
    functional implementation."""
    library = Library(NAMESPACE, "FRAGMENT")
    for op in OPS:
        if _define(library, op.schema):
            torch.library.register_fake(f"{NAMESPACE}::{op.name}", op.fake, lib=library)
            library.impl(op.name, _functional_kernel(op), "CompositeExplicitAutograd")
        _define(library, op.out_schema)
    return library


def _register_out_kernels() -> Library:
    """The ``.out`` kernels the host runtime calls: ours whoever holds the definitions (ExecuTorch's module
    registers none for them)."""
    library = Library(NAMESPACE, "FRAGMENT")
    for op in OPS:
        library.impl(f"{op.name}.out", out_kernel(op), "CPU")
        library.impl(f"{op.name}.out", _out_meta(op), "Meta")
    return library


def _active_fake(op: CortexMOp) -> Callable | None:
    kernel = torch._library.simple_registry.singleton.find(f"{NAMESPACE}::{op.name}").fake_impl.kernel
    return None if kernel is None else kernel.func


@contextlib.contextmanager
def own_fakes() -> Iterator[None]:
    """Our fake implementations for the duration (restored on exit): after ExecuTorch's op module has taken
    the definitions over, torch would trace our graphs with its fakes, which lay a one-channel result out
    channels_last (a dim order no kernel takes) and read a one-channel pad's amounts in another order than
    the dim order the program holds. A program must not depend on which modules the user imported."""
    library = None
    try:
        for op in OPS:
            if _active_fake(op) is op.fake:
                continue
            library = library or Library(NAMESPACE, "FRAGMENT")
            torch.library.register_fake(f"{NAMESPACE}::{op.name}", op.fake, lib=library, allow_override=True)
        yield
    finally:
        if library is not None:
            library._destroy()  # deregisters our fakes: ExecuTorch's are active again


class _StepAsideLoader(importlib.abc.Loader):
    """ExecuTorch's loader for its op module, run with our definitions out of its way (module docstring)."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        global _definitions
        _definitions._destroy()
        _forget_edge_ops()
        try:
            self._loader.exec_module(module)
        finally:
            _definitions = _define_missing()


def _forget_edge_ops() -> None:
    """Drop ExecuTorch's cached edge-dialect ``cortex_m`` namespace: its op objects wrap the torch ops
    just destroyed, and a program compiled after the new definitions through them crashed the process
    (``std::bad_alloc``). The next lookup builds it on the new definitions."""
    edge = sys.modules.get("executorch.exir.dialects._ops")
    if edge is not None:
        edge.ops.edge.__dict__.pop(NAMESPACE, None)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect and tracebacks
        return getattr(self._loader, name)


class _StepAside(importlib.abc.MetaPathFinder):
    """Finds ExecuTorch's cortex_m op module with the other finders and wraps its loader; no other module."""

    def find_spec(self, fullname, path, target=None):
        if fullname != EXECUTORCH_OPS_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _StepAsideLoader(spec.loader)
                return spec
        return None


_definitions = _define_missing()
_out_kernels = _register_out_kernels()
if EXECUTORCH_OPS_MODULE not in sys.modules:
    sys.meta_path.insert(0, _StepAside())
