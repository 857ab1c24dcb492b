"""Layers the user keeps in float (``--float-layer NAME``, ``CompileOptions(float_layers=(NAME, ...))``):
selective quantization, as pt2e quantizers' ``set_module_name(name, None)`` and TFLite's denylisted nodes.

A layer whose input or output has more range than int8 holds is the one to keep: a voice detector's learned
STFT reads the waveform, and an int8 waveform rounds quiet speech to a few levels (ExecuTorch's Silero VAD
example: the int8 waveform alone flipped 0.6% of the decisions on quiet-to-loud speech). The named modules'
ops are tagged ``KEEP_FLOAT``: the quantizer leaves them unannotated, so they run in float on the Cortex-M
(the stock runtime's portable kernels), and the data movement between a model input and them stays float
too (``quantizer.float_state_movements``); their readers quantize their float output as any float input.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch.fx import GraphModule

from imxrt.errors import BadOption
from imxrt.passes.unroll_recurrent_layers import FLOAT_LAYER, keep_float
from imxrt.report.names import module_paths

SHOWN_NAMES = 12  # module names listed when one given is not the model's


def _inside(path: str, name: str) -> bool:
    return path == name or path.startswith(name + ".")


def keep_float_layers(gm: GraphModule, names: Iterable[str]) -> int:
    """Tag every op the modules ``names`` made ``KEEP_FLOAT``; returns how many. A name no op came from is a
    ``BadOption`` listing the model's module names."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if not names:
        return 0
    calls = [node for node in gm.graph.nodes if node.op == "call_function"]
    paths = {node: module_paths(node) for node in calls}
    known = list(dict.fromkeys(path for node_paths in paths.values() for path in node_paths if path))  # model order
    for name in names:
        if not any(_inside(path, name) for path in known):
            listed = ", ".join(known[:SHOWN_NAMES]) + (", ..." if len(known) > SHOWN_NAMES else "")
            raise BadOption("--float-layer", name, f"the name of one of the model's modules ({listed or 'none'})")
    tagged = 0
    for node in calls:
        if any(_inside(path, name) for path in paths[node] for name in names):
            keep_float(node, FLOAT_LAYER)
            tagged += 1
    return tagged
