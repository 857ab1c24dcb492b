"""A spoken-command intent classifier on token ids: an embedding of 64 tokens, their mean, a linear layer → 4 intents.

The program's input is the int64 token ids as they are (not quantized); the embedding table is int8 and the
lookup runs as ExecuTorch's portable ``embedding`` kernel on it. ``model()`` trains on a synthetic task in well
under a second on one core (each intent has 8 keyword tokens; an utterance holds keywords of one intent among filler
tokens), so its decisions have margins an int8 program keeps.
"""

import torch
from torch import nn

VOCABULARY, DIMENSION, INTENTS, TOKENS = 64, 16, 4, 10
KEYWORDS = 8  # tokens [8 i, 8 i + 8) belong to intent i; the rest are filler
SEED = 0


class IntentNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, DIMENSION)
        self.classifier = nn.Linear(DIMENSION, INTENTS)

    def forward(self, tokens):
        return self.classifier(self.embedding(tokens).mean(1))


def utterances(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` token sequences [count, TOKENS] (int64) and their intents: 2-4 keywords of one intent
    at random places among filler tokens."""
    generator = torch.Generator().manual_seed(seed)
    intents = torch.randint(0, INTENTS, (count,), generator=generator)
    filler = INTENTS * KEYWORDS
    tokens = torch.randint(filler, VOCABULARY, (count, TOKENS), generator=generator)
    for row, intent in enumerate(intents.tolist()):
        keywords = int(torch.randint(2, 5, (), generator=generator))
        places = torch.randperm(TOKENS, generator=generator)[:keywords]
        tokens[row, places] = intent * KEYWORDS + torch.randint(0, KEYWORDS, (keywords,), generator=generator)
    return tokens, intents


def model():
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(SEED)
        net = IntentNet()
        tokens, intents = utterances(512, seed=SEED)
        # the mean of the embedded tokens is each token's share times its row: trained as that product, the
        # embedding's backward (slow on a busy core) is never run
        shares = nn.functional.one_hot(tokens, VOCABULARY).float().mean(1)
        for _ in range(200):
            net.zero_grad()
            logits = net.classifier(shares @ net.embedding.weight)
            nn.functional.cross_entropy(logits, intents).backward()
            with torch.no_grad():
                for parameter in net.parameters():
                    parameter -= 4.0 * parameter.grad
    return net.eval()


def example_inputs():
    return (utterances(1, seed=1)[0],)


def calibration_inputs():
    tokens, _ = utterances(16, seed=2)
    return [(row.unsqueeze(0),) for row in tokens]


def evaluation_data():
    tokens, intents = utterances(64, seed=3)
    return [((row.unsqueeze(0),), int(intent)) for row, intent in zip(tokens, intents, strict=True)]
