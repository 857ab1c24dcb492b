"""Inputs for the real-model benchmark, made here and deterministic: speech, sung-like notes and photos, each in a
calibration split and a disjoint evaluation split.

- `utterances(split, count)`: 16 kHz speech for voice activity: sentences spoken by `espeak-ng` (resampled by
  `sox` without dither), two per utterance with silences before, between and after, white / pink /
  brown noise at 30 to 5 dB SNR, a random level. The splits use different sentences and different voices.
- `notes(split, count)`: 16 kHz notes of known f0 (65 Hz to 1 kHz): harmonics with a random spectral tilt and
  phases, vibrato, a glide, noise at 40 to 10 dB SNR; each split its own seed.
- `sentences(split, count)`: plain espeak-ng speech (no noise) for the pitch networks, the same split of voices
  and sentences as `utterances`.
- `photos(split)`: scikit-image's sample photos as float RGB [H, W, 3] in 0..255 (grey ones repeated over
  three channels); the splits hold different photos, one with a human face each.
- `lfw(split)`: scikit-image's 25x25 Labeled Faces in the Wild subset (100 faces, 100 non-faces) as
  (is_face, float32 RGB in 0..255); each split holds half of the faces and half of the non-faces, and their
  mirror images.

Every random draw comes from a `numpy.random.default_rng` seeded by the split, so the same call gives the same
arrays. Needs `espeak-ng` and `sox` (`apt-get install -y espeak-ng sox`) and scikit-image.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spoken_words import _noise, _require_tools, _speak, _trim  # noqa: E402

SAMPLE_RATE = 16_000
SPLITS = ("calibration", "evaluation")
SEEDS = {"calibration": 1, "evaluation": 2}

# (espeak-ng voice, sentence) pools per split: no sentence and no voice appears in both.
VOICES = {
    "calibration": ("en-us+m3", "en-gb-x-rp+f2", "de+m1", "fr-fr+f4", "es+m5", "it+klatt"),
    "evaluation": ("en+m7", "en-us-nyc+f5", "de+f3", "fr-fr+m4", "es+f1", "nl+klatt2", "pt+m2", "en-gb-scotland+m6"),
}
SENTENCES = {
    "calibration": {
        "en": ("The quick brown fox jumps over the lazy dog.", "Please call me back when you get home tonight.",
               "We walked along the river until the sun went down."),
        "de": ("Der Zug nach Berlin hat heute zehn Minuten Verspätung.", "Ich trinke morgens gern einen Kaffee."),
        "fr": ("Le petit chat dort sur le canapé du salon.", "Nous partons en vacances au mois de juillet."),
        "es": ("Mañana vamos a visitar a mis abuelos en el campo.", "El mercado abre a las ocho de la mañana."),
        "it": ("La pizza margherita è nata a Napoli.", "Domani piove su tutta la regione."),
    },
    "evaluation": {
        "en": ("She sells sea shells by the sea shore every summer.", "How much wood would a woodchuck chuck today?",
               "The library closes early on public holidays.", "My neighbour plays the violin every evening.",
               "Turn left at the second traffic light, then keep straight on."),
        "de": ("Wir haben gestern Abend im Garten gegrillt.", "Die Kinder spielen im Schnee vor dem Haus.",
               "Können Sie mir bitte den Weg zum Bahnhof zeigen?"),
        "fr": ("Il fait très beau aujourd'hui sur la côte.", "Le musée est fermé le mardi toute la journée.",
               "Je voudrais une baguette et deux croissants, s'il vous plaît."),
        "es": ("Los pájaros cantan en el jardín cada mañana.", "¿Dónde está la estación de autobuses más cercana?",
               "Mi hermana trabaja en un hospital de la ciudad."),
        "nl": ("De fiets staat achter het huis in de schuur.", "Morgen gaan we met de trein naar Amsterdam."),
        "pt": ("O comboio para Lisboa parte às nove horas.", "A minha avó faz o melhor bolo de laranja."),
    },
}
SNRS_DB = (30.0, 20.0, 10.0, 5.0)
NOISES = ("white", "pink", "brown")

PHOTOS = {  # skimage.data names; one photo with a human face in each split
    "calibration": ("astronaut", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "page", "brick"),
    "evaluation": ("camera", "chelsea", "clock", "moon", "text", "gravel", "colorwheel"),
}


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {SPLITS}")


def _language(voice: str) -> str:
    return voice.split("-")[0].split("+")[0]


def _spoken(split: str, rng: np.random.Generator) -> np.ndarray:
    """One sentence of ``split`` in one of its voices (a voice of the sentence's language when there is one),
    at a random speed and pitch, its leading and trailing silence trimmed."""
    voices = VOICES[split]
    voice = voices[rng.integers(len(voices))]
    language = _language(voice)
    pool = SENTENCES[split].get(language) or SENTENCES[split]["en"]
    sentence = pool[rng.integers(len(pool))]
    return _trim(_speak(sentence, voice, int(rng.integers(130, 190)), int(rng.integers(25, 75))))


def sentences(split: str, count: int) -> list[np.ndarray]:
    """``count`` clean spoken sentences of ``split`` (float32, 16 kHz)."""
    _check_split(split)
    _require_tools()
    rng = np.random.default_rng(SEEDS[split] * 1000 + 7)
    return [_spoken(split, rng) * np.float32(0.5) for _ in range(count)]


def utterances(split: str, count: int) -> list[np.ndarray]:
    """``count`` noisy utterances of ``split`` for voice activity (float32, 16 kHz, 4 to 12 s each)."""
    _check_split(split)
    _require_tools()
    rng = np.random.default_rng(SEEDS[split])
    made = []
    for _ in range(count):
        parts = [np.zeros(int(rng.uniform(0.3, 1.5) * SAMPLE_RATE), np.float32)]
        for _ in range(2):
            parts.append(_spoken(split, rng))
            parts.append(np.zeros(int(rng.uniform(0.2, 1.2) * SAMPLE_RATE), np.float32))
        speech = np.concatenate(parts)
        power = float((np.concatenate(parts[1::2]) ** 2).mean())
        snr_db = SNRS_DB[rng.integers(len(SNRS_DB))]
        noise = _noise(NOISES[rng.integers(len(NOISES))], len(speech), rng)
        mixed = speech + noise * np.float32(np.sqrt(power / 10 ** (snr_db / 10)))
        level = 10 ** (rng.uniform(-24.0, -2.0) / 20)
        made.append((mixed * (level / np.abs(mixed).max())).astype(np.float32))
    return made


def notes(split: str, count: int, seconds: float = 0.4) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` notes of ``split``: (audio float32 at 16 kHz, f0 in Hz per sample)."""
    _check_split(split)
    rng = np.random.default_rng(SEEDS[split] * 1000 + 11)
    length = int(seconds * SAMPLE_RATE)
    time = np.arange(length) / SAMPLE_RATE
    made = []
    for _ in range(count):
        f0 = 65.0 * 2 ** rng.uniform(0.0, 4.0)  # 65 Hz (C2) to 1040 Hz
        vibrato_cents = rng.uniform(0.0, 60.0) * np.sin(2 * np.pi * rng.uniform(4.0, 7.0) * time + rng.uniform(0, 6.3))
        glide_cents = rng.uniform(-150.0, 150.0) * time / seconds
        frequency = f0 * 2 ** ((vibrato_cents + glide_cents) / 1200)
        phase = 2 * np.pi * np.cumsum(frequency) / SAMPLE_RATE
        tilt = rng.uniform(0.5, 2.0)
        harmonics = int(rng.integers(1, 13))
        audio = np.zeros(length)
        for k in range(1, harmonics + 1):
            if k * frequency.max() < SAMPLE_RATE / 2:
                audio += k ** -tilt * np.sin(k * phase + rng.uniform(0, 2 * np.pi))
        envelope = np.minimum(1.0, np.minimum(time, seconds - time) / 0.02)  # 20 ms attack and release
        audio *= envelope
        power = float((audio ** 2).mean())
        audio += _noise("white", length, rng) * np.sqrt(power / 10 ** (rng.uniform(10.0, 40.0) / 10))
        level = 10 ** (rng.uniform(-20.0, -2.0) / 20)
        made.append(((audio * level / np.abs(audio).max()).astype(np.float32), frequency.astype(np.float32)))
    return made


def photos(split: str) -> list[tuple[str, np.ndarray]]:
    """(name, float32 RGB [H, W, 3] in 0..255) of each photo of ``split``."""
    _check_split(split)
    import skimage.data

    made = []
    for name in PHOTOS[split]:
        image = np.asarray(getattr(skimage.data, name)(), np.float32)
        if image.ndim == 2:
            image = np.repeat(image[:, :, None], 3, axis=2)
        made.append((name, np.ascontiguousarray(image[:, :, :3])))
    return made


LFW_FACES = 100  # skimage.data.lfw_subset(): the first 100 images are faces, the next 100 not


def lfw(split: str) -> list[tuple[bool, np.ndarray]]:
    """(is_face, float32 RGB [25, 25, 3] in 0..255) of ``split``'s half of the faces and of the non-faces, each
    also mirrored."""
    _check_split(split)
    import skimage.data

    images = np.asarray(skimage.data.lfw_subset(), np.float32) * 255.0
    half = LFW_FACES // 2
    first = 0 if split == "calibration" else half
    made = []
    for index in [*range(first, first + half), *range(LFW_FACES + first, LFW_FACES + first + half)]:
        rgb = np.repeat(images[index][:, :, None], 3, axis=2)
        made.extend((index < LFW_FACES, np.ascontiguousarray(image)) for image in (rgb, rgb[:, ::-1]))
    return made
