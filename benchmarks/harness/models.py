"""Small reference models shared by the tests, the benchmarks and the demo.

Each is built from a config so that the same architecture can be sized for a quick
CPU test or for a real sweep. All are deterministic given ``torch.manual_seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.fc3(x).square().mean()


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class CNN(nn.Module):
    """A ResNet-style stem, residual blocks with BatchNorm, pooling and a classifier."""

    def __init__(self, channels: int = 8, blocks: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.head(x), target)


@dataclass(frozen=True)
class _Decoder:
    """A decoder's shape; the defaults are the tests' size."""

    vocab: int = 128
    seq: int = 32
    dim: int = 64
    heads: int = 4


@dataclass(frozen=True)
class GPTConfig(_Decoder):
    """nanoGPT: the shape, its depth and its dropout."""

    layers: int = 2
    dropout: float = 0.1


class CausalSelfAttention(nn.Module):
    """nanoGPT attention with the scores materialised (no SDPA), so the partitioner sees them."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.seq, cfg.seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_drop(self.proj(y))


class GPTBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.out = nn.Linear(4 * cfg.dim, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """A nanoGPT-style decoder: token and position embeddings, blocks, tied LM head, loss."""

    def __init__(self, cfg: GPTConfig = GPTConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(GPTBlock(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight
        self.apply(_gpt2_init)

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def _gpt2_init(module: nn.Module) -> None:
    """GPT-2's initialisation (N(0, 0.02) weights, zero biases): sane logits at step 0."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class BlockLoss(nn.Module):
    """One block with a scalar loss: the smallest graph that has every op of the block
    (``gpt_block``: a GPT-2 block, ``llama_block``: a Llama block)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x).square().mean()


@dataclass(frozen=True)
class LlamaConfig(_Decoder):
    """Llama: the shape, the SwiGLU width (``swiglu_width``) and its depth."""

    hidden: int = 176
    layers: int = 2


def swiglu_width(dim: int) -> int:
    """SwiGLU's MLP width: 8/3 of ``dim``, rounded up to a multiple of 8 (Llama's rule)."""
    return (8 * dim // 3 + 7) // 8 * 8


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    t = x.shape[-2]
    cos, sin = cos[:t], sin[:t]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class LlamaBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.attn_norm = RMSNorm(cfg.dim)
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.mlp_norm = RMSNorm(cfg.dim)
        self.w_gate = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w_down = nn.Linear(cfg.hidden, cfg.dim, bias=False)
        cos, sin = rope_tables(cfg.seq, cfg.dim // cfg.heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, self.heads, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig = LlamaConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(LlamaBlock(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.apply(_gpt2_init)

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())


@dataclass(frozen=True)
class ModelCase:
    """A model and a function making its inputs; ``batch`` scales the activations."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[torch.Tensor, ...]]
    has_dropout: bool = False


def _tokens(vocab: int, seq: int) -> Callable[[int], tuple[torch.Tensor, ...]]:
    def make(batch: int) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq)))

    return make


def model_cases(*, layers: int = 2, dim: int = 64, seq: int = 32) -> dict[str, ModelCase]:
    """The reference models, keyed by name; sizes are small by default (CPU tests)."""
    gpt = GPTConfig(seq=seq, dim=dim, layers=layers)
    llama = LlamaConfig(seq=seq, dim=dim, layers=layers, hidden=swiglu_width(dim))
    cases = [
        ModelCase("mlp", lambda: MLP(dim, 2 * dim), lambda b: (torch.randn(b, dim),)),
        ModelCase(
            "cnn",
            lambda: CNN(channels=8, blocks=layers),
            lambda b: (torch.randn(b, 3, 16, 16), torch.randint(0, 10, (b,))),
        ),
        ModelCase("gpt_block", lambda: BlockLoss(GPTBlock(gpt)), lambda b: (torch.randn(b, seq, dim),), True),
        ModelCase("llama_block", lambda: BlockLoss(LlamaBlock(llama)), lambda b: (torch.randn(b, seq, dim),)),
        ModelCase("gpt", lambda: GPT(gpt), _tokens(gpt.vocab, seq), True),
        ModelCase("llama", lambda: Llama(llama), _tokens(llama.vocab, seq)),
    ]
    return {case.name: case for case in cases}
