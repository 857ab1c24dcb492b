"""Spoken words this machine synthesizes, and recurrent keyword spotters trained on them: int8 accuracy of LSTM/GRU.

`dataset()` speaks twelve command words with Debian's `espeak-ng` in many voices (an accent such as `en-us`,
`en-gb-scotland` or `de`, plus a timbre variant such as `+m3`, `+f2` or `+klatt`, at several speeds and
pitches), resamples them to 16 kHz with `sox`, places each word at a random offset in a 1 s window, mixes
white, pink or brown noise in at 20, 10 or 5 dB SNR, and turns the window into 98 frames of 40 log-mel bands
(25 ms Hann window, 10 ms hop, normalised per band with the training split's mean and deviation). The test split
holds out speakers: its timbre variants are never heard in training, so a score is on voices the model has not
seen, not on a random split of the same voices. The features are cached under
`~/.cache/imxrt-benchmarks/spoken_words/`, keyed by `VERSION` and the seed, so only the first call pays for
the synthesis (under a minute on one core).

`train_model()` trains `_sequence_models.RecurrentClassifier` (a batch-first `nn.LSTM` / `nn.GRU`, a linear
layer on the last step) on these frames, on one thread, for a fixed number of Adam steps: the same weights for
the same seed, in well under a minute. `steps=49` gives it the 98 frames averaged in pairs (20 ms per step, the
49-frame length of MLPerf Tiny's keyword spotting), `steps=98` every frame.

`evaluate()` scores a compiled program against the float model on the held-out speakers. Run as a script, this
module trains an LSTM and a GRU, compiles each with imxrt (`imxrt700-cpu`, run on the host runtime) and with
ExecuTorch's XNNPACK PTQ (run by its pybindings), and prints one row per pipeline: accuracy, float accuracy,
argmax agreement, mean and worst logit cosine, compile and evaluation seconds. XNNPACK's quantizer has no rule
for `aten.lstm` / `aten.gru`, so its `xnnpack` row is int8 only in the classifier; `xnnpack_unrolled`
(opt-in, a few minutes) decomposes the recurrence first so its gate matmuls are int8 too:

    python benchmarks/_spoken_words.py [--kinds lstm gru] [--layers 1] [--steps 49] [--test-samples 0]
                                       [--pipelines imxrt xnnpack xnnpack_unrolled]

Needs `espeak-ng` and `sox` for the first call (`apt-get update && apt-get install -y espeak-ng sox`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _sequence_models import RecurrentClassifier  # noqa: E402

VERSION = "v2"  # bump when anything below changes what `dataset()` returns: the cache is keyed by it
CACHE = Path.home() / ".cache" / "imxrt-benchmarks" / "spoken_words"
INSTALL = "apt-get update && apt-get install -y espeak-ng sox"

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero", "one")
# A voice is an accent and a timbre variant (`espeak-ng -v en-us+m3`). Every accent is in both splits; the
# variants are split, so each test speaker is one the model never heard.
ACCENTS = ("en", "en-us", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029",
           "en-us-nyc", "de", "nl")
TRAIN_VARIANTS = ("m1", "m2", "m3", "m5", "m6", "f1", "f2", "f4", "klatt", "klatt3")
TEST_VARIANTS = ("m4", "m7", "f3", "f5", "klatt2")
TRAIN_PROSODIES = 3  # (speed, pitch) draws per training voice and word
TEST_PROSODIES = 1
SPEEDS = (120, 200)  # espeak-ng -s, words per minute, drawn uniformly
PITCHES = (20, 80)  # espeak-ng -p, 0..99, drawn uniformly
TRAIN_NOISY_COPIES = 2  # each training utterance mixed twice, with independent noise, SNR, offset and gain
SNRS_DB = (20.0, 10.0, 5.0)
NOISES = ("white", "pink", "brown")

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = SAMPLE_RATE  # one second
FRAME_SAMPLES = 400  # 25 ms
HOP_SAMPLES = 160  # 10 ms
FFT_SIZE = 512
MEL_BANDS = 40
MEL_RANGE_HZ = (20.0, 8000.0)
FRAMES = 1 + (WINDOW_SAMPLES - FRAME_SAMPLES) // HOP_SAMPLES  # 98
LOG_FLOOR = 1e-6

# Epochs by `steps * layers / 49`: a longer or deeper model gets fewer, to train in about the same time.
TRAIN_EPOCHS = {1: 20, 2: 14, 4: 10}
BATCH = 64
LEARNING_RATE = 1e-2


@dataclasses.dataclass(frozen=True)
class Split:
    """One split: `features[i]` is `[FRAMES, MEL_BANDS]` normalised log-mel, `labels[i]` its index in `WORDS`,
    `voices[i]` the `espeak-ng -v` voice that spoke it."""

    features: np.ndarray  # float32 [N, FRAMES, MEL_BANDS]
    labels: np.ndarray  # int64 [N]
    voices: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.labels)

    def inputs(self, steps: int) -> np.ndarray:
        """The model inputs `[N, steps, MEL_BANDS]`: every frame (`steps=98`) or the frames averaged in pairs
        (`steps=49`)."""
        if steps == FRAMES:
            return self.features
        if steps * 2 != FRAMES:
            raise ValueError(f"steps must be {FRAMES} or {FRAMES // 2}, got {steps}")
        return self.features.reshape(len(self), steps, 2, MEL_BANDS).mean(2, dtype=np.float32)


# ----------------------------------------------------------------------------------------------------
# Synthesis
# ----------------------------------------------------------------------------------------------------


def _require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"the spoken-words data set needs {' and '.join(missing)}, not found on PATH; "
                           f"install with: {INSTALL}")


def _speak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """`text` spoken by espeak-ng (22.05 kHz WAV on stdout), resampled by sox to 16 kHz mono float32 in [-1, 1],
    without dither (sox dithers by default when it writes 16-bit samples, which made every call differ)."""
    speaker = subprocess.Popen(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    resampled = subprocess.run(["sox", "-q", "-D", "-t", "wav", "-", "-t", "raw", "-r", str(SAMPLE_RATE),
                                "-e", "floating-point", "-b", "32", "-c", "1", "-"],
                               stdin=speaker.stdout, capture_output=True)
    speaker.stdout.close()
    speaker_error = speaker.stderr.read()
    speaker.stderr.close()
    if speaker.wait() != 0 or resampled.returncode != 0 or not resampled.stdout:
        raise RuntimeError(f"espeak-ng -v {voice} {text!r} | sox failed: "
                           f"{(speaker_error + resampled.stderr).decode(errors='replace').strip()}")
    return np.frombuffer(resampled.stdout, np.float32).copy()


def _trim(audio: np.ndarray) -> np.ndarray:
    """`audio` without the silence espeak-ng puts around a word: from the first to the last 10 ms block whose RMS
    is over 2% of the loudest block's, with one block of margin each side."""
    blocks = len(audio) // HOP_SAMPLES
    rms = np.sqrt((audio[: blocks * HOP_SAMPLES].reshape(blocks, HOP_SAMPLES) ** 2).mean(1))
    active = np.flatnonzero(rms > 0.02 * rms.max())
    first, last = max(active[0] - 1, 0), min(active[-1] + 2, blocks)
    return audio[first * HOP_SAMPLES: last * HOP_SAMPLES]


def _noise(kind: str, length: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-power noise: white, or white shaped by 1/sqrt(f) (pink) or 1/f (brown) in amplitude."""
    white = rng.standard_normal(length)
    if kind != "white":
        spectrum = np.fft.rfft(white)
        frequency = np.maximum(np.fft.rfftfreq(length), 1.0 / length)
        spectrum /= np.sqrt(frequency) if kind == "pink" else frequency
        white = np.fft.irfft(spectrum, length)
    return (white / np.sqrt((white ** 2).mean())).astype(np.float32)


def _window(word: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One second: `word` at a random offset (its middle second if longer), noise at a random SNR over the word's
    own power, a random level from -20 to -1 dB full scale peak."""
    if len(word) > WINDOW_SAMPLES:
        start = (len(word) - WINDOW_SAMPLES) // 2
        word = word[start: start + WINDOW_SAMPLES]
    offset = int(rng.integers(0, WINDOW_SAMPLES - len(word) + 1))
    window = np.zeros(WINDOW_SAMPLES, np.float32)
    window[offset: offset + len(word)] = word
    snr_db = SNRS_DB[rng.integers(len(SNRS_DB))]
    noise = _noise(NOISES[rng.integers(len(NOISES))], WINDOW_SAMPLES, rng)
    window += noise * np.sqrt((word ** 2).mean() / 10 ** (snr_db / 10))
    level = 10 ** (rng.uniform(-20.0, -1.0) / 20)
    return window * (level / np.abs(window).max())


# ----------------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------------


def _mel_filters() -> np.ndarray:
    """`[FFT_SIZE // 2 + 1, MEL_BANDS]` triangular filters, equally spaced on the HTK mel scale."""
    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def to_hz(mel):
        return 700.0 * (10 ** (mel / 2595.0) - 1.0)

    edges = to_hz(np.linspace(to_mel(MEL_RANGE_HZ[0]), to_mel(MEL_RANGE_HZ[1]), MEL_BANDS + 2))
    bins = np.fft.rfftfreq(FFT_SIZE, 1.0 / SAMPLE_RATE)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising, falling = (bins - lower) / (centre - lower), (upper - bins) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling)).T.astype(np.float32)


def log_mel(windows: np.ndarray) -> np.ndarray:
    """`[N, WINDOW_SAMPLES]` audio to `[N, FRAMES, MEL_BANDS]` log-mel power (no centring: frame f covers samples
    `f * HOP_SAMPLES` to `f * HOP_SAMPLES + FRAME_SAMPLES`)."""
    starts = np.arange(FRAMES)[:, None] * HOP_SAMPLES + np.arange(FRAME_SAMPLES)[None, :]
    frames = windows[:, starts] * np.hanning(FRAME_SAMPLES).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, FFT_SIZE, axis=-1)) ** 2
    return np.log(power.astype(np.float32) @ _mel_filters() + LOG_FLOOR).astype(np.float32)


# ----------------------------------------------------------------------------------------------------
# The data set
# ----------------------------------------------------------------------------------------------------


def _utterances(variants: tuple[str, ...], prosodies: int, copies: int, rng: np.random.Generator):
    """Every (accent, variant, word), spoken `prosodies` times at random speeds and pitches, each mixed `copies`
    times: log-mel features, labels and voices, in generation order."""
    features, labels, voices = [], [], []
    for accent in ACCENTS:
        for variant in variants:
            voice = f"{accent}+{variant}"
            windows = []
            for label, word in enumerate(WORDS):
                for _ in range(prosodies):
                    speed, pitch = int(rng.integers(*SPEEDS, endpoint=True)), int(rng.integers(*PITCHES, endpoint=True))
                    spoken = _trim(_speak(word, voice, speed, pitch))
                    windows += [_window(spoken, rng) for _ in range(copies)]
                    labels += [label] * copies
            voices += [voice] * len(windows)
            features.append(log_mel(np.stack(windows)))
    return np.concatenate(features), np.array(labels, np.int64), voices


def _generate(seed: int) -> dict[str, np.ndarray]:
    _require_tools()
    rng = np.random.default_rng(seed)
    train_features, train_labels, train_voices = _utterances(TRAIN_VARIANTS, TRAIN_PROSODIES, TRAIN_NOISY_COPIES, rng)
    test_features, test_labels, test_voices = _utterances(TEST_VARIANTS, TEST_PROSODIES, 1, rng)
    # Per-band statistics of the training split only, so the test split tells nothing to its own normalisation.
    mean = train_features.mean((0, 1), keepdims=True)
    deviation = train_features.std((0, 1), keepdims=True) + 1e-6
    order = rng.permutation(len(train_labels))  # shuffled, so `train` taken in order (calibration) has every word
    return {
        "train_features": ((train_features[order] - mean) / deviation).astype(np.float32),
        "train_labels": train_labels[order],
        "train_voices": np.array(train_voices)[order],
        "test_features": ((test_features - mean) / deviation).astype(np.float32),
        "test_labels": test_labels,
        "test_voices": np.array(test_voices),
    }


def _espeak_version() -> str:
    return subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip()


def dataset(seed: int = 0, verbose: bool = True) -> tuple[Split, Split]:
    """The training split and the held-out-speaker test split, from the cache if made before (see the module
    docstring). The first call synthesizes ~3,600 training and ~600 test utterances with espeak-ng and sox;
    it raises, naming the install command, if either is missing."""
    path = CACHE / f"{VERSION}-seed{seed}.npz"
    start = time.perf_counter()
    if path.exists():
        with np.load(path) as stored:
            arrays = {name: stored[name] for name in stored.files if name != "meta"}
            meta = json.loads(str(stored["meta"]))
        if verbose:
            print(f"spoken words: loaded {path} in {time.perf_counter() - start:.1f} s "
                  f"(generated in {meta['seconds']:.1f} s with {meta['espeak']})")
    else:
        arrays = _generate(seed)
        seconds = time.perf_counter() - start
        meta = {"seconds": seconds, "espeak": _espeak_version(), "version": VERSION, "seed": seed}
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")  # written aside, then renamed: a killed run leaves no half cache
        np.savez(partial, meta=np.array(json.dumps(meta)), **arrays)
        partial.replace(path)
        if verbose:
            print(f"spoken words: generated {len(arrays['train_labels'])} training and {len(arrays['test_labels'])} "
                  f"test windows in {seconds:.1f} s, cached in {path}")
    return tuple(Split(arrays[f"{split}_features"], arrays[f"{split}_labels"], tuple(arrays[f"{split}_voices"]))
                 for split in ("train", "test"))


# ----------------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------------


class KeywordSpotter(RecurrentClassifier):
    """`RecurrentClassifier` (batch-first) over `[1, steps, MEL_BANDS]` frames; `steps` says which framing of
    `Split.inputs` it was trained on, so `evaluate` feeds it the same."""

    def __init__(self, kind: str, layers: int, hidden: int, steps: int):
        super().__init__(kind, features=MEL_BANDS, hidden=hidden, classes=len(WORDS), layers=layers)
        self.steps = steps


def train_model(kind: str = "lstm", layers: int = 1, hidden: int = 64, steps: int = 49, seed: int = 0,
                train: Split | None = None) -> KeywordSpotter:
    """A `kind` ("lstm" or "gru") keyword spotter trained on `train` (default: `dataset(seed)[0]`) with Adam
    (one-cycle learning rate, gradients clipped to norm 1), on one thread, so the weights depend only on the
    arguments. The epochs scale down with `steps * layers` so every size trains in about the same time: 20 s
    to a minute on one busy core."""
    if kind not in ("lstm", "gru"):
        raise ValueError(f"kind must be 'lstm' or 'gru', got {kind!r}")
    if layers not in (1, 2) or steps not in (FRAMES // 2, FRAMES):
        raise ValueError(f"layers must be 1 or 2 and steps {FRAMES // 2} or {FRAMES}, got {layers} and {steps}")
    if train is None:
        train = dataset(seed)[0]
    inputs, labels = torch.from_numpy(train.inputs(steps)), torch.from_numpy(train.labels)
    rng = np.random.default_rng(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a thread count changes reduction order, hence the weights
    try:
        with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
            torch.manual_seed(seed)
            model = KeywordSpotter(kind, layers, hidden, steps).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
            epochs = TRAIN_EPOCHS[steps * layers // (FRAMES // 2)]
            batches = (len(labels) + BATCH - 1) // BATCH
            schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, LEARNING_RATE, total_steps=epochs * batches)
            for _ in range(epochs):
                for batch in np.array_split(rng.permutation(len(labels)), batches):
                    batch = torch.from_numpy(batch)
                    loss = nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    schedule.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def float_accuracy(model: KeywordSpotter, split: Split) -> float:
    with torch.no_grad():
        logits = model(torch.from_numpy(split.inputs(model.steps)))
    return float((logits.argmax(1).numpy() == split.labels).mean())


def evaluate(run: Callable[[np.ndarray], np.ndarray], model: KeywordSpotter, test: Split,
             limit: int | None = None) -> dict[str, float]:
    """`run` (one `[1, T, MEL_BANDS]` float32 input to its logits, a compiled program) against the float `model`
    on `test` (its first `limit` windows if given): task accuracy of both, agreement of the argmax with float,
    mean and worst cosine similarity of the logits to float's."""
    inputs, labels = test.inputs(model.steps), test.labels
    if limit:
        inputs, labels = inputs[:limit], labels[:limit]
    with torch.no_grad():
        reference = model(torch.from_numpy(inputs)).numpy()
    logits = np.stack([np.asarray(run(np.ascontiguousarray(x[None]))).reshape(-1) for x in inputs])
    cosine = (logits * reference).sum(1) / (np.linalg.norm(logits, axis=1) * np.linalg.norm(reference, axis=1)
                                            + 1e-12)
    return {
        "samples": len(labels),
        "float_accuracy": float((reference.argmax(1) == labels).mean()),
        "accuracy": float((logits.argmax(1) == labels).mean()),
        "agreement": float((logits.argmax(1) == reference.argmax(1)).mean()),
        "cosine_mean": float(cosine.mean()),
        "cosine_worst": float(cosine.min()),
    }


# ----------------------------------------------------------------------------------------------------
# The int8 pipelines
# ----------------------------------------------------------------------------------------------------


def imxrt_program(model: nn.Module, example: torch.Tensor, calibration: list[tuple[torch.Tensor]],
                  target: str = "imxrt700-cpu", cell_state: str = "float"):
    """imxrt's `.pte` for ``target`` (``cell_state``: an LSTM's, int8 or float), run on the host runtime
    (bit-exact with the device)."""
    import imxrt
    import imxrt.runtime

    result = imxrt.compile(model, (example,), target=target, calibration=calibration,
                           options=imxrt.CompileOptions(show_progress=False, cell_state=cell_state))
    program = imxrt.runtime.load(result.pte)
    latency = result.report["latency"]["total"]["us"] / 1000
    return lambda x: program.forward(x)[0], f"{len(result.pte)} byte .pte, estimated {latency:.2f} ms on {target}"


def xnnpack_program(model: nn.Module, example: torch.Tensor, calibration: list[tuple[torch.Tensor]],
                    unroll: bool = False):
    """The upstream baseline: XNNPACKQuantizer (symmetric, per-channel weights) PTQ on the same calibration
    samples, lowered with XnnpackPartitioner and run by ExecuTorch's portable_lib pybindings. Its quantizer
    annotates what it has rules for; an `aten.lstm` / `aten.gru` it has none for stays float (only the
    classifier is int8). With `unroll`, torch's own decompositions of `aten.lstm` / `aten.gru` run first, so the
    quantizer sees the per-step gate `linear`s, `add`s and `mul`s and makes those int8 (sigmoid, tanh stay float)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
    from torch._decomp import decomposition_table
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    exported = torch.export.export(model.eval(), (example,), strict=False)
    if unroll:
        aten = torch.ops.aten
        recurrent = (aten.lstm.input, aten.gru.input)
        exported = exported.run_decompositions({op: decomposition_table[op] for op in recurrent})
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
    with torch.no_grad():
        for sample in calibration:
            prepared(*sample)
    converted = convert_pt2e(prepared)
    compute = [node for node in converted.graph.nodes if node.op == "call_function"
               and "quantize_per_" not in str(node.target) and node.target is not operator.getitem]
    annotated = sum("quantization_annotation" in node.meta for node in compute)  # kept by convert_pt2e
    lowered = to_edge_transform_and_lower(torch.export.export(converted, (example,), strict=False),
                                          partitioner=[XnnpackPartitioner()])
    calls = [node for node in lowered.exported_program().graph.nodes
             if node.op == "call_function" and node.target is not operator.getitem]
    delegates = sum("executorch_call_delegate" in str(node.target) for node in calls)
    outside = len(calls) - delegates
    buffer = lowered.to_executorch().buffer
    program = _load_for_executorch_from_buffer(buffer)  # reads `buffer` without a copy: keep it alive with `run`

    def run(x: np.ndarray) -> np.ndarray:
        assert program is not None and buffer is not None
        return program.forward((torch.from_numpy(x),))[0].numpy()

    return run, (f"{annotated} of {len(compute)} compute op(s) int8; {delegates} XNNPACK delegate(s), "
                 f"{outside} op(s) outside")


PIPELINES = {
    "imxrt": imxrt_program,  # imxrt700-cpu, the default (float) cell state
    "imxrt_npu": functools.partial(imxrt_program, target="imxrt700"),
    "imxrt_int8_cell": functools.partial(imxrt_program, cell_state="int8"),
    "imxrt_npu_int8_cell": functools.partial(imxrt_program, target="imxrt700", cell_state="int8"),
    "xnnpack": xnnpack_program,
    "xnnpack_unrolled": functools.partial(xnnpack_program, unroll=True),
}
DEFAULT_PIPELINES = ("imxrt", "imxrt_npu", "imxrt_int8_cell", "imxrt_npu_int8_cell", "xnnpack")


def main(argv=None) -> None:
    import argparse
    import logging
    import warnings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=("lstm", "gru"), default=["lstm", "gru"])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--steps", type=int, choices=(FRAMES // 2, FRAMES), default=FRAMES // 2)
    parser.add_argument("--calibration", type=int, default=64)
    parser.add_argument("--test-samples", type=int, default=0, help="score only the first N test windows (0: all)")
    parser.add_argument("--pipelines", nargs="+", choices=tuple(PIPELINES), default=list(DEFAULT_PIPELINES))
    args = parser.parse_args(argv)
    for name in ("torchao", "torch.utils._pytree", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # batch-1 programs and small batches: a second thread only waits for a busy core

    train, test = dataset()
    print(f"train: {len(train)} windows from {len(set(train.voices))} voices; test: {len(test)} windows from "
          f"{len(set(test.voices))} held-out voices; {len(WORDS)} words")
    example = torch.from_numpy(train.inputs(args.steps)[:1])
    calibration = [(torch.from_numpy(x[None]),) for x in train.inputs(args.steps)[: args.calibration]]
    builders = PIPELINES
    for kind in args.kinds:
        start = time.perf_counter()
        model = train_model(kind, args.layers, args.hidden, args.steps, train=train)
        print(f"\n{kind} x{args.layers}, hidden {args.hidden}, {args.steps} steps: trained in "
              f"{time.perf_counter() - start:.1f} s; float accuracy train {float_accuracy(model, train):.2%}, "
              f"test {float_accuracy(model, test):.2%}")
        print(f"{'pipeline':16s} {'accuracy':>8s} {'float':>7s} {'agree':>7s} {'cos mean':>8s} {'cos worst':>9s} "
              f"{'compile s':>9s} {'eval s':>7s}  program")
        for name in args.pipelines:
            start = time.perf_counter()
            try:
                run, about = builders[name](model, example, calibration)
            except Exception as exc:  # a model a pipeline refuses is a line, not the end of the run
                print(f"{name:16s} failed after {time.perf_counter() - start:.1f} s: {type(exc).__name__}: "
                      f"{(str(exc).strip().splitlines() or [''])[0]}")
                continue
            compiled = time.perf_counter() - start
            start = time.perf_counter()
            scores = evaluate(run, model, test, limit=args.test_samples or None)
            print(f"{name:16s} {scores['accuracy']:8.2%} {scores['float_accuracy']:7.2%} {scores['agreement']:7.2%} "
                  f"{scores['cosine_mean']:8.4f} {scores['cosine_worst']:9.4f} {compiled:9.1f} "
                  f"{time.perf_counter() - start:7.1f}  {about}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
