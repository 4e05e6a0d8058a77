"""A tiny language model built in code (no downloads), whose activations grow with batch x sequence."""

import torch
from torch import nn

from gpu_mem_quota.pytorch import Checkpointed

VOCAB, WIDTH = 64, 32


class TinyLM(nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.Sequential(*[
            Checkpointed(nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)))
            for _ in range(blocks)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def setup(seed: int = 0, lr: float = 1e-2):
    torch.manual_seed(seed)
    model = TinyLM()
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def next_token_loss(model: nn.Module):
    def loss_of(tokens: torch.Tensor) -> torch.Tensor:
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    return loss_of


def batch(size: int, seq_len: int, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, VOCAB, (size, seq_len + 1), generator=generator)
