"""The benchmark's models at two sizes, with the blocks ``torch.utils.checkpoint`` wraps.

``quick`` is the test size of ``benchmarks.harness.models`` (seconds per configuration); ``full``
makes activations dominate parameters (so every budget means something to PyTorch's
partitioner, whose budget range counts parameters) while keeping 2 layers, because Inductor
compile time grows with the graph, not with the dimensions; ``large`` is GPT-2-small width
and context for a GPU (``--device cuda --size large``), where ``full`` is launch-bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from benchmarks.harness import hf_models
from benchmarks.harness.models import CNN, GPT, GPTConfig, Llama, LlamaConfig, swiglu_width

SIZES = ("quick", "full", "large")


@dataclass(frozen=True)
class Shape:
    vocab: int
    seq: int
    dim: int
    heads: int
    layers: int
    batch: int
    channels: int  # CNN
    image: int  # CNN input side
    cnn_batch: int

    @property
    def hidden(self) -> int:
        return swiglu_width(self.dim)


SHAPES = {
    "quick": Shape(vocab=128, seq=32, dim=64, heads=4, layers=2, batch=4, channels=8, image=16, cnn_batch=4),
    "full": Shape(
        vocab=512, seq=128, dim=128, heads=4, layers=2, batch=8, channels=32, image=32, cnn_batch=16
    ),
    "large": Shape(
        vocab=8192, seq=1024, dim=768, heads=12, layers=2, batch=8, channels=128, image=64, cnn_batch=64
    ),
}


@dataclass(frozen=True)
class BenchCase:
    """A model, its inputs and its repeated blocks, at one size."""

    name: str
    description: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    blocks: Callable[[nn.Module], list[nn.Module]]
    has_dropout: bool
    finetune: bool = False  # a fine-tuning recipe: run by name (``--models``), not by default


def _tokens(shape: Shape) -> Callable[[], tuple[torch.Tensor, ...]]:
    def make() -> tuple[torch.Tensor, ...]:
        size = (shape.batch, shape.seq)
        return torch.randint(0, shape.vocab, size), torch.randint(0, shape.vocab, size)

    return make


def _images(shape: Shape) -> Callable[[], tuple[torch.Tensor, ...]]:
    def make() -> tuple[torch.Tensor, ...]:
        x = torch.randn(shape.cnn_batch, 3, shape.image, shape.image)
        return x, torch.randint(0, 10, (shape.cnn_batch,))

    return make


def _own_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.blocks)  # type: ignore[arg-type]


def bench_cases(size: str = "full") -> dict[str, BenchCase]:
    """Every model this environment can build, keyed by name (HF ones need ``transformers``)."""
    s = SHAPES[size]
    gpt = GPTConfig(vocab=s.vocab, seq=s.seq, dim=s.dim, heads=s.heads, layers=s.layers, dropout=0.1)
    llama = LlamaConfig(vocab=s.vocab, seq=s.seq, dim=s.dim, heads=s.heads, hidden=s.hidden, layers=s.layers)
    tokens = _tokens(s)
    cases = [
        BenchCase(
            "gpt",
            "nanoGPT: explicit attention, dropout 0.1, GELU MLP, LayerNorm",
            lambda: GPT(gpt),
            tokens,
            _own_blocks,
            True,
        ),
        BenchCase(
            "llama", "Llama: RMSNorm, SwiGLU, RoPE, SDPA", lambda: Llama(llama), tokens, _own_blocks, False
        ),
        BenchCase(
            "cnn",
            "ResNet-style CNN: BatchNorm, residual blocks",
            lambda: CNN(channels=s.channels, blocks=s.layers),
            _images(s),
            _own_blocks,
            False,
        ),
    ]
    if hf_models.available():
        kw = dict(vocab=s.vocab, seq=s.seq, dim=s.dim, heads=s.heads, layers=s.layers)
        cases += [
            BenchCase(
                "hf_gpt2",
                "HF GPT-2 (eager attention, dropout 0.1)",
                lambda: hf_models.gpt2(**kw),
                tokens,
                hf_models.gpt2_blocks,
                True,
            ),
            BenchCase(
                "hf_llama",
                "HF Llama (SDPA)",
                lambda: hf_models.llama(**kw, hidden=s.hidden),
                tokens,
                hf_models.llama_blocks,
                False,
            ),
        ]
        cases += _finetune_cases(s, kw, tokens)
    return {case.name: case for case in cases}


def _finetune_cases(
    s: Shape, kw: dict[str, int], tokens: Callable[[], tuple[torch.Tensor, ...]]
) -> list[BenchCase]:
    """Fine-tuning recipes on the HF models: LoRA (peft) on attention or on every linear
    layer, and frozen embeddings with the lower half of the blocks frozen. Full training of
    the same models is ``hf_llama`` and ``hf_gpt2``."""
    builders: dict[
        str, tuple[Callable[[], hf_models.CausalLMLoss], Callable[[nn.Module], list[nn.Module]], bool]
    ]
    builders = {
        "llama": (lambda: hf_models.llama(**kw, hidden=s.hidden), hf_models.llama_blocks, False),
        "gpt2": (lambda: hf_models.gpt2(**kw), hf_models.gpt2_blocks, True),
    }
    cases = []
    for arch, (build, blocks, dropout) in builders.items():
        cases.append(
            BenchCase(
                f"hf_{arch}_frozen",
                f"HF {arch}: embeddings and the lower half of the blocks frozen",
                lambda build=build, blocks=blocks: _frozen(build, blocks),
                tokens,
                blocks,
                dropout,
                finetune=True,
            )
        )
        if not hf_models.peft_available():
            continue
        for suffix, targets in (("lora", hf_models.LORA_ATTENTION), ("lora_all", hf_models.LORA_ALL_LINEAR)):
            where = "attention" if suffix == "lora" else "every linear layer"
            cases.append(
                BenchCase(
                    f"hf_{arch}_{suffix}",
                    f"HF {arch}, LoRA r=8 on {where} (peft; base frozen)",
                    lambda build=build, targets=targets[arch]: hf_models.lora(build(), targets),
                    tokens,
                    hf_models.peft_blocks,
                    dropout,
                    finetune=True,
                )
            )
    return cases


def _frozen(
    build: Callable[[], hf_models.CausalLMLoss], blocks: Callable[[nn.Module], list[nn.Module]]
) -> nn.Module:
    model = build()
    return hf_models.freeze_lower(model, blocks(model))
