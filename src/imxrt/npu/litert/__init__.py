"""Edge -> LiteRT (TFLite) lowering of delegated int8 partitions: IR, layout, converters, writer."""

from imxrt.npu.litert.lower import (
    LiteRTOp,
    LiteRTSubgraph,
    PartitionIO,
    UnsupportedForLiteRT,
    lower_partition,
)

__all__ = ["LiteRTOp", "LiteRTSubgraph", "PartitionIO", "UnsupportedForLiteRT", "lower_partition"]
