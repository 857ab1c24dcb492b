"""The sequence models of `benchmarks/sequence.py`: recurrent keyword spotters and a small ViT, with random weights.

Written as users write them: `nn.GRU` / `nn.LSTM` / `nn.RNN` over MFCC frames (1 or 2 layers, batch-first or
time-major), the same recurrences unrolled by hand with `nn.GRUCell` / `nn.LSTMCell`, and a ViT whose attention
is either `nn.MultiheadAttention` or the hand-written `q @ k.transpose(-2, -1)` / softmax / `@ v` of timm-style code.
The classifier classes take their sizes, so `benchmarks/accuracy.py` trains the same code on digits rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

MFCC = (1, 49, 10)  # one second of audio: 49 frames of 10 MFCC coefficients (MLPerf Tiny's KWS front end)
IMAGE = (1, 3, 32, 32)
KWS_CLASSES = 12


class RecurrentClassifier(nn.Module):
    """`nn.GRU`, `nn.LSTM` or `nn.RNN` over a `[batch, time, features]` input, a linear layer on the last step's output.

    With `batch_first=False` the layer is time-major, as in most older speech code: the model transposes its
    `[batch, time, features]` input to `[time, batch, features]` itself, which the compiler then also sees."""

    def __init__(self, cell: str, features: int = MFCC[2], hidden: int = 64, classes: int = KWS_CLASSES,
                 layers: int = 1, batch_first: bool = True):
        super().__init__()
        recurrent = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}[cell]
        self.batch_first = batch_first
        self.rnn = recurrent(features, hidden, num_layers=layers, batch_first=batch_first)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, x):
        if not self.batch_first:
            x = x.transpose(0, 1)
        outputs, _ = self.rnn(x)
        last = outputs[:, -1] if self.batch_first else outputs[-1]
        return self.classifier(last)


class CellLoopClassifier(nn.Module):
    """The recurrence unrolled by hand: `nn.GRUCell` / `nn.LSTMCell` called once per frame from zero state."""

    def __init__(self, cell: str, features: int = MFCC[2], hidden: int = 64, classes: int = KWS_CLASSES):
        super().__init__()
        self.is_lstm = cell == "lstm"
        self.cell = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}[cell](features, hidden)
        self.hidden = hidden
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, x):
        state = x.new_zeros(x.shape[0], self.hidden)
        memory = x.new_zeros(x.shape[0], self.hidden)
        for step in range(x.shape[1]):  # unrolled at export: the time length is static
            if self.is_lstm:
                state, memory = self.cell(x[:, step], (state, memory))
            else:
                state = self.cell(x[:, step], state)
        return self.classifier(state)


class MatmulAttention(nn.Module):
    """Multi-head self-attention as timm writes it: one qkv projection, `q @ k^T`, scale, softmax, `@ v`."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, tokens, dim))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder layer: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)), GELU MLP."""

    def __init__(self, dim: int, heads: int, attention: str, mlp_ratio: int = 2):
        super().__init__()
        self.uses_mha = attention == "mha"
        self.norm1 = nn.LayerNorm(dim)
        self.attention = (nn.MultiheadAttention(dim, heads, batch_first=True) if self.uses_mha
                          else MatmulAttention(dim, heads))
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Linear(dim * mlp_ratio, dim))

    def forward(self, x):
        y = self.norm1(x)
        y = self.attention(y, y, y, need_weights=False)[0] if self.uses_mha else self.attention(y)
        x = x + y
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """A small vision transformer: patch-embedding conv, learned position embedding, encoder blocks, final
    LayerNorm, mean over tokens, linear head."""

    def __init__(self, attention: str, dim: int = 64, heads: int = 4, depth: int = 2, patch: int = 8,
                 size: int = IMAGE[2], classes: int = 10):
        super().__init__()
        self.patch_embedding = nn.Conv2d(IMAGE[1], dim, patch, patch)
        self.position = nn.Parameter(torch.randn(1, (size // patch) ** 2, dim) * 0.02)
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads, attention) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        tokens = self.patch_embedding(x).flatten(2).transpose(1, 2) + self.position
        return self.head(self.norm(self.blocks(tokens)).mean(1))


# name -> (builder, example input shape)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "gru1": (lambda: RecurrentClassifier("gru"), MFCC),
    "gru2": (lambda: RecurrentClassifier("gru", layers=2), MFCC),
    "gru1_time_major": (lambda: RecurrentClassifier("gru", batch_first=False), MFCC),
    "gru2_time_major": (lambda: RecurrentClassifier("gru", layers=2, batch_first=False), MFCC),
    "lstm1": (lambda: RecurrentClassifier("lstm"), MFCC),
    "lstm2": (lambda: RecurrentClassifier("lstm", layers=2), MFCC),
    "lstm1_time_major": (lambda: RecurrentClassifier("lstm", batch_first=False), MFCC),
    "lstm2_time_major": (lambda: RecurrentClassifier("lstm", layers=2, batch_first=False), MFCC),
    "rnn1": (lambda: RecurrentClassifier("rnn"), MFCC),
    "gru_cell_loop": (lambda: CellLoopClassifier("gru"), MFCC),
    "lstm_cell_loop": (lambda: CellLoopClassifier("lstm"), MFCC),
    "vit_mha": (lambda: ViT("mha"), IMAGE),
    "vit_matmul": (lambda: ViT("matmul"), IMAGE),
}


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[int, ...]]:
    """The model `name` with seeded random weights, in eval mode, and its example input shape."""
    builder, shape = MODELS[name]
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(seed)
        model = builder()
    return model.eval(), shape
