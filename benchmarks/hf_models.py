"""Hugging Face GPT-2 and Llama from small configs, random weights, no downloads.

Optional: ``available()`` is False without ``transformers`` (the ``bench`` extra), and the
benchmark then skips these models.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn


def available() -> bool:
    return importlib.util.find_spec("transformers") is not None


class CausalLMLoss(nn.Module):
    """``(tokens, targets) -> loss``, the signature every benchmark model has."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, labels=target).loss


def gpt2(*, vocab: int, seq: int, dim: int, heads: int, layers: int) -> CausalLMLoss:
    """GPT-2 with its default dropout (0.1) and explicit ("eager") attention, like nanoGPT."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab,
        n_positions=seq,
        n_embd=dim,
        n_head=heads,
        n_layer=layers,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config)
    # Without an explicit loss type GPT-2 resolves it at run time: a graph break.
    model.loss_type = "ForCausalLM"
    return CausalLMLoss(model)


def llama(*, vocab: int, seq: int, dim: int, heads: int, hidden: int, layers: int) -> CausalLMLoss:
    """Llama (RMSNorm, SwiGLU, RoPE) with SDPA attention and no dropout."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=dim,
        intermediate_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=seq,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    return CausalLMLoss(LlamaForCausalLM(config))


def gpt2_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.model.transformer.h)  # type: ignore[union-attr, arg-type]


def llama_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.model.model.layers)  # type: ignore[union-attr, arg-type]
