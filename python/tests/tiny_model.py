"""A tiny language model built in code (no downloads), whose activations grow with batch x sequence."""

import importlib.util
import sys
from pathlib import Path

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


# The decoder's blocks are the guide-scenario benchmark's own (python/bench/torch_schedule.py): the
# model the tests fit is the one the benchmark measures.
_spec = importlib.util.spec_from_file_location(
    "torch_schedule", Path(__file__).resolve().parents[1] / "bench" / "torch_schedule.py")
_bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _bench  # dataclasses look their module up
_spec.loader.exec_module(_bench)
Attention, Block = _bench.Attention, _bench.DecoderBlock


class TinyDecoder(nn.Module):
    """A decoder-only transformer (pre-norm blocks, learned positions), small enough for the CPU."""

    def __init__(self, width: int = 16, heads: int = 2, blocks: int = 2, max_len: int = 512) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Embedding(max_len, width)
        self.blocks = nn.Sequential(*[Checkpointed(Block(width, heads)) for _ in range(blocks)])
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1])
        return self.head(self.blocks(self.embed(tokens) + self.position(positions)))


def setup_decoder(seed: int = 0, lr: float = 1e-2, **shape):
    torch.manual_seed(seed)
    model = TinyDecoder(**shape)
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
