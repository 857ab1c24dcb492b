"""A LiteRT (.tflite) model as the host runtime reads it: the flatbuffer checked before it is unpacked, each
operator seen through its subgraph (``OperatorView``), operand positions, and the errors of a bad model.

The model comes out of an untrusted ``.pte``. ``read_model`` prices what the schema's object API would
build (``read_cost``) before unpacking: one subgraph, as our writer writes, and no more objects than
an unshared file of its size can hold, so refusing a hostile file costs time and memory bounded by its size
(a subgraph shared by 20,000 offsets was 1.4 GB and 35 s of objects before its count was read).
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.errors import ImxrtError
from imxrt.kernels.requantize import activation_range
from imxrt.pte.read_cost import BYTES, NUMBERS, STRING, TABLE, TABLES, UNION, Prices, ReadCost, Table
from imxrt.pte.reader import HOST_MEMORY_CAP  # the cap the .pte's own memory counts against

Op = schema.BuiltinOperator
BUILTIN_NAMES = {code: name for name, code in vars(Op).items() if name.isupper()}
NUMPY_DTYPES = {
    schema.TensorType.FLOAT32: np.float32,
    schema.TensorType.INT32: np.int32,
    schema.TensorType.INT16: np.int16,
    schema.TensorType.INT8: np.int8,
    schema.TensorType.UINT8: np.uint8,
    schema.TensorType.INT64: np.int64,
    schema.TensorType.BOOL: np.bool_,
}

# Operand positions, as the TFLite schema orders them.
CONV_INPUT, CONV_FILTER, CONV_BIAS = 0, 1, 2
TRANSPOSE_CONV_OUTPUT_SHAPE, TRANSPOSE_CONV_FILTER, TRANSPOSE_CONV_INPUT, TRANSPOSE_CONV_BIAS = 0, 1, 2, 3
FC_INPUT, FC_WEIGHTS, FC_BIAS = 0, 1, 2
BINARY_LHS, BINARY_RHS = 0, 1
UNARY_INPUT = 0
REDUCE_INPUT, REDUCE_AXES = 0, 1
PAD_INPUT, PAD_PADDINGS, PAD_VALUE = 0, 1, 2
TRANSPOSE_INPUT, TRANSPOSE_PERM = 0, 1
SLICE_INPUT, SLICE_BEGIN, SLICE_SIZE = 0, 1, 2
STRIDED_SLICE_INPUT, STRIDED_SLICE_BEGIN, STRIDED_SLICE_END, STRIDED_SLICE_STRIDES = 0, 1, 2, 3
SPLIT_AXIS, SPLIT_INPUT = 0, 1
SPLIT_V_INPUT, SPLIT_V_SIZES, SPLIT_V_AXIS = 0, 1, 2
RESIZE_INPUT, RESIZE_SIZE = 0, 1
PRELU_INPUT, PRELU_ALPHA = 0, 1
OUTPUT = 0

# NHWC / OHWI dimension positions
HEIGHT, WIDTH, CHANNELS = 1, 2, 3
DEPTHWISE_CHANNELS = 3  # depthwise filters are [1, kh, kw, C_out]


class UnsupportedOperator(ImxrtError):
    """The LiteRT subgraph holds an operator (or an operand type) the host executor does not implement."""

    def __init__(self, op: str, index: int, problem: str = "is not implemented by the host LiteRT executor"):
        super().__init__(f"LiteRT operator {index} ({op}) {problem}; run this partition on the board or "
                         "report the missing kernel")
        self.op, self.index = op, index


class BadTflite(ImxrtError):
    """The bytes are not a LiteRT model the host runtime can hold: not a flatbuffer with one subgraph, a
    model too large for its file, or an operator no valid model has."""

    def __init__(self, problem: str):
        super().__init__(f"LiteRT subgraph: {problem}")


class RuleBroken(BadTflite):
    """A tensor or operator breaks a rule TFLM's prepare (or kernel) keeps (``litert_rules``): TFLM refuses
    the model, so the host runtime does too. ``where`` names the tensor or operator."""

    def __init__(self, where: str, rule: str, problem: str):
        super().__init__(f"{where} breaks rule {rule}: {problem}")
        self.where, self.rule = where, rule


class OperatorView:
    """One operator seen through its subgraph: operand shapes, qparams, constant data and options."""

    def __init__(self, model: schema.ModelT, graph: schema.SubGraphT, op: schema.OperatorT, builtin: int, name: str,
                 index: int):
        self.model, self.graph, self.op, self.builtin, self.name, self.index = model, graph, op, builtin, name, index
        self.inputs = [int(i) for i in (op.inputs if op.inputs is not None else [])]
        self.outputs = [int(i) for i in (op.outputs if op.outputs is not None else [])]
        self.options = op.builtinOptions

    def tensor(self, operand: int, output: bool = False) -> schema.TensorT:
        return self.graph.tensors[(self.outputs if output else self.inputs)[operand]]

    def has_input(self, operand: int) -> bool:
        return operand < len(self.inputs) and self.inputs[operand] >= 0

    def shape(self, operand: int, output: bool = False) -> tuple[int, ...]:
        return tensor_shape(self.tensor(operand, output))

    def scale(self, operand: int, output: bool = False) -> float:
        return qparams(self.tensor(operand, output))[0]

    def zero_point(self, operand: int, output: bool = False) -> int:
        return qparams(self.tensor(operand, output))[1]

    def scales(self, operand: int) -> np.ndarray:
        """Per-channel (or one) scales as float64 values of the stored float32."""
        q = self.tensor(operand).quantization
        return np.asarray(q.scale, dtype=np.float32).astype(np.float64)

    def constant(self, operand: int) -> np.ndarray:
        data = constant_data(self.model, self.tensor(operand))
        if data is None:
            raise self.unsupported(f"needs operand {operand} to be a constant")
        return data

    def fused_activation(self) -> int:
        return getattr(self.options, "fusedActivationFunction", 0) or 0

    def fused(self) -> tuple[int, int]:
        """The output's int8 range after the op's fused activation."""
        fused = self.fused_activation()
        try:
            return activation_range(fused, self.scale(OUTPUT, True), self.zero_point(OUTPUT, True))
        except ValueError as e:
            raise self.unsupported(f"has fused activation {fused}, which int8 kernels do not take") from e

    def require_int8(self, *operands: int) -> None:
        for operand in operands:
            if self.tensor(operand).type != schema.TensorType.INT8:
                raise self.unsupported(f"operand {operand} is {type_name(self.tensor(operand).type)}, not int8")
        if self.tensor(OUTPUT, True).type != schema.TensorType.INT8:
            raise self.unsupported(f"output is {type_name(self.tensor(OUTPUT, True).type)}, not int8")

    def unsupported(self, problem: str) -> UnsupportedOperator:
        return UnsupportedOperator(self.name, self.index, problem)

    def invalid(self, problem: str) -> BadTflite:
        """The operator's arguments are impossible (no valid model has them), not merely unsupported."""
        return BadTflite(f"operator {self.index} ({self.name}): {problem}")


def type_name(tensor_type: int) -> str:
    return {v: k for k, v in vars(schema.TensorType).items() if k.isupper()}.get(tensor_type, str(tensor_type))


def tensor_shape(tensor: schema.TensorT) -> tuple[int, ...]:
    return tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))


def is_quantized(tensor: schema.TensorT) -> bool:
    """TFLM reads a tensor's quantization only when it has both a scale and a zero point (micro_allocator.cc,
    InitializeTfLiteTensorFromFlatbuffer); without either its kernels see scale 0, zero point 0."""
    q = tensor.quantization
    return q is not None and q.scale is not None and len(q.scale) > 0 and q.zeroPoint is not None \
        and len(q.zeroPoint) > 0


def qparams(tensor: schema.TensorT) -> tuple[float, int]:
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return 0.0, 0
    zero_point = int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0
    return float(np.float32(q.scale[0])), zero_point


def constant_data(model: schema.ModelT, tensor: schema.TensorT) -> np.ndarray | None:
    buffer = model.buffers[tensor.buffer] if tensor.buffer else None
    if buffer is None or buffer.data is None or len(buffer.data) == 0:
        return None
    dtype = NUMPY_DTYPES[tensor.type]
    data = np.frombuffer(np.asarray(buffer.data, dtype=np.uint8).tobytes(), dtype=dtype).reshape(tensor_shape(tensor))
    data.setflags(write=False)
    return data


# -- what unpacking builds

# schema.fbs as the walk sees it. Number vectors are numpy views into the file, priced as lists (an upper
# bound); tables and strings are built once per offset that refers to them.
_SCALARS = Table("a table of scalars")
_NAMED = Table("Metadata, TensorMap, ExternalBufferGroup", (4, STRING, None))


def _union(members: type, special: dict[str, Table]) -> tuple[Table, ...]:
    """A union's member tables by type (1, 2, ...): tables of scalars but for ``special`` ones."""
    names = {code: name for name, code in vars(members).items() if not name.startswith("_")}
    return tuple(special.get(names.get(code, ""), _SCALARS) for code in range(1, max(names) + 1))


_SPARSE_INDICES = _union(schema.SparseIndexVector, {name: Table(name, (4, NUMBERS, width)) for name, width in (
    ("Int32Vector", 4), ("Uint16Vector", 2), ("Uint8Vector", 1))})
_QUANTIZATION = Table("QuantizationParameters", (4, NUMBERS, 4), (6, NUMBERS, 4), (8, NUMBERS, 4), (10, NUMBERS, 8),
                      (14, UNION, _union(schema.QuantizationDetails, {
                          "CustomQuantization": Table("CustomQuantization", (4, BYTES, None))})))
_SPARSITY = Table("SparsityParameters", (4, NUMBERS, 4), (6, NUMBERS, 4),
                  (8, TABLES, Table("DimensionMetadata", (10, UNION, _SPARSE_INDICES), (14, UNION, _SPARSE_INDICES))))
_TENSOR = Table("Tensor", (4, NUMBERS, 4), (10, STRING, None), (12, TABLE, _QUANTIZATION), (16, TABLE, _SPARSITY),
                (18, NUMBERS, 4), (22, TABLES, Table("VariantSubType", (4, NUMBERS, 4))))
_OPERATOR = Table("Operator", (6, NUMBERS, 4), (8, NUMBERS, 4),
                  (12, UNION, _union(schema.BuiltinOptions, {
                      "VarHandleOptions": Table("VarHandleOptions", (4, STRING, None), (6, STRING, None))})),
                  (14, BYTES, None), (18, NUMBERS, 1), (20, NUMBERS, 4),
                  (28, UNION, _union(schema.BuiltinOptions2, {
                      "StablehloCustomCallOptions": Table("StablehloCustomCallOptions", (4, STRING, None),
                                                          (8, STRING, None)),
                      "StableHLOCompositeOptions": Table("StableHLOCompositeOptions", (4, STRING, None))})))
_SUBGRAPH = Table("SubGraph", (4, TABLES, _TENSOR), (6, NUMBERS, 4), (8, NUMBERS, 4), (10, TABLES, _OPERATOR),
                  (12, STRING, None))
_MODEL = Table("Model", (6, TABLES, Table("OperatorCode", (6, STRING, None))), (8, TABLES, _SUBGRAPH),
               (10, STRING, None), (12, TABLES, Table("Buffer", (4, BYTES, None))), (14, NUMBERS, 4),
               (16, TABLES, _NAMED),
               (18, TABLES, Table("SignatureDef", (4, TABLES, _NAMED), (6, TABLES, _NAMED), (8, STRING, None))),
               (20, TABLES, _NAMED), (22, TABLES, Table("ExternalBuffer", (12, STRING, None))))

# A model we write prices at 12-20 times its size (a table object per tensor, quantization, operator and
# options); an unshared file cannot reach 64. Over it, offsets share tables, each shared one built again.
UNPACK_BYTES_PER_FILE_BYTE = 64
_UNPACK_SLACK = 1 << 20  # the model's fixed objects, for a tiny file
# What the schema's object API builds: an object per table, a list slot and int per number, a byte per byte.
_OBJECT_API = Prices(table=600, item=40, byte=1)


def read_model(tflite: bytes) -> schema.ModelT:
    """The model unpacked by the schema's object API, once its subgraph count and what unpacking builds are
    checked from the flatbuffer in place (``BadTflite`` otherwise)."""
    try:
        subgraphs = schema.Model.GetRootAs(tflite, 0).SubgraphsLength()
        if subgraphs == 1:
            total = ReadCost(memoryview(tflite), _OBJECT_API).root(_MODEL)
    except Exception as e:  # the flatbuffer reader fails in many ways on foreign bytes
        raise BadTflite(f"cannot parse the flatbuffer ({type(e).__name__}: {e})") from e
    if subgraphs != 1:
        raise BadTflite(f"expected one subgraph, found {subgraphs}")
    limit = min(HOST_MEMORY_CAP, UNPACK_BYTES_PER_FILE_BYTE * len(tflite) + _UNPACK_SLACK)
    if total > limit:
        raise BadTflite(f"unpacking its {len(tflite):,} bytes would build {total:,} bytes of objects, more than "
                        f"{limit:,}: its offsets share tables, which no model we write does")
    try:
        return schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    except Exception as e:
        raise BadTflite(f"cannot parse the flatbuffer ({type(e).__name__}: {e})") from e
