"""The sequence models people deploy, compiled by imxrt and by ExecuTorch's upstream NXP pipeline, side by side.

For each model of `_sequence_models.MODELS` (GRU and LSTM keyword spotters on MFCC frames, 1 and 2 layers,
batch-first and time-major; the same recurrences as `GRUCell` / `LSTMCell` loops; a small ViT with
`nn.MultiheadAttention` or hand-written matmul attention; random weights), both pipelines get the same module
and calibration samples, and the row is `benchmarks/zoo.py`'s: NPU MAC fraction, NeutronBackend partitions,
TRANSPOSEs in the partitions' LiteRT graphs, compute ops left on the CPU in float, compile seconds; for imxrt
also the estimated latency, the SRAM total, how many random inputs every partition matched TFLM on bit for
bit, and the largest .pte-vs-quantized-program difference in output LSBs. A model a pipeline refuses is a
row with its error.

`--length`: compile seconds and peak RSS of a 3-layer `nn.LSTM(40, 256)` over 40 / 160 / 400 steps and of the
49-frame keyword spotters, per target and for upstream (`_sequence_length`). `--accuracy`: GRU and LSTM word
spotters trained here on speech `espeak-ng` synthesizes (held-out voices, noise mixed in; `_spoken_words`),
int8 by imxrt against float and against ExecuTorch's XNNPACK PTQ.

    python benchmarks/sequence.py [--models gru1 vit_mha ...] [--inputs 20] [--side both|ours|upstream]
    python benchmarks/sequence.py --length [--limit 600]
    python benchmarks/sequence.py --accuracy [--kinds lstm gru] [--pipelines imxrt xnnpack]
"""

from __future__ import annotations

import sys

import zoo  # noqa: I001  (first: it puts the test suite's checks on the path and quiets import logging)
from _sequence_models import MODELS, build


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--length" in argv:
        import _sequence_length

        limit = float(argv[argv.index("--limit") + 1]) if "--limit" in argv else 600.0
        _sequence_length.main(limit=limit)
        return 0
    if "--accuracy" in argv:
        import _spoken_words

        _spoken_words.main([a for a in argv if a != "--accuracy"])
        return 0
    return zoo.benchmark(__doc__.splitlines()[0], list(MODELS), build, argv)


if __name__ == "__main__":
    sys.exit(main())
