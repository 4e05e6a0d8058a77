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


class Attention(nn.Module):
    """Causal self-attention written out (no fused kernel): the scores and their softmax, micro-batch x
    heads x seq x seq each, are saved for the backward pass, so memory grows with micro-batch x seq²."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / (w // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, w))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


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
