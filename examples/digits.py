"""Handwritten digits (scikit-learn's 8×8 set, 1797 images): a small CNN trained in seconds → 10 classes.

Real labelled data for the accuracy report: ``model()`` trains on a fixed split with a fixed seed (a
few seconds on one CPU core, nothing cached on disk); ``evaluation_data()`` is the held-out split.
``train(module)`` fine-tunes any module on the training split: the QAT ``train_fn``.
"""

import torch
from sklearn.datasets import load_digits
from torch import nn

INPUT_SHAPE = (1, 1, 8, 8)
TEST_FRACTION = 0.25
SEED = 0


def _split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # pixels 0..16 -> [0, 1]
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SEED))
    held_out = int(len(labels) * TEST_FRACTION)
    test, train_ = order[:held_out], order[held_out:]
    return images[train_], labels[train_], images[test], labels[test]


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def train(module, epochs: int = 2, lr: float = 1e-3, seed: int = SEED):
    """Fine-tune ``module`` (an ``nn.Module`` or a pt2e-prepared graph) on the training split, in place."""
    images, labels, _, _ = _split()
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    for _ in range(epochs):
        for batch in torch.randperm(len(labels), generator=generator).split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(module(images[batch]), labels[batch]).backward()
            optimizer.step()
    return module


def model():
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(SEED)
        net = DigitsNet().train()
        train(net, epochs=8, lr=3e-3)
    return net.eval()


def example_inputs():
    return (_split()[2][:1],)


def calibration_inputs():
    images = _split()[0]
    return [(images[i:i + 1],) for i in range(0, 256, 8)]  # 32 samples


def evaluation_data():
    _, _, images, labels = _split()
    return [((images[i:i + 1],), int(labels[i])) for i in range(len(labels))]
