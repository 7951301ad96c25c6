"""Hugging Face GPT-2 and Llama from small configs, random weights, no downloads.

Optional: ``available()`` is False without ``transformers`` (the ``bench`` extra), and the
benchmark then skips these models.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn

from benchmarks.harness.models import ModelCase, swiglu_width


def available() -> bool:
    return importlib.util.find_spec("transformers") is not None


class CausalLMLoss(nn.Module):
    """``(tokens, targets) -> loss``, the signature every benchmark model has."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=idx, labels=target).loss


# Every model here: random weights, no KV cache, token 0 as BOS/EOS; nothing is downloaded.
_NO_CACHE = {"use_cache": False, "bos_token_id": 0, "eos_token_id": 0}


def gpt2(*, vocab: int, seq: int, dim: int, heads: int, layers: int) -> CausalLMLoss:
    """GPT-2 with its default dropout (0.1) and explicit ("eager") attention, like nanoGPT."""
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = {"vocab_size": vocab, "n_positions": seq, "n_embd": dim, "n_head": heads, "n_layer": layers}
    model = GPT2LMHeadModel(GPT2Config(**shape, **_NO_CACHE, attn_implementation="eager"))
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
        pad_token_id=0,
        attn_implementation="sdpa",
        **_NO_CACHE,
    )
    return CausalLMLoss(LlamaForCausalLM(config))


def architecture(name: str, *, vocab: int, dim: int, heads: int, layers: int) -> CausalLMLoss:
    """One of ``ARCHITECTURES`` from a small config (random weights, no dropout, no cache):
    the models beyond the zoo's two, to check that nothing is tuned to those. The MLP width
    is SwiGLU's 8/3 of ``dim``, rounded to 8."""
    import transformers

    config_name, model_name, extra = ARCHITECTURES[name]
    hidden = swiglu_width(dim)
    shape = dict(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads)
    config = getattr(transformers, config_name)(**shape, **_width(name, hidden), **extra)
    if name != "bert":
        config.use_cache = False
    model = getattr(transformers, model_name)(config)
    # Without an explicit loss type the model resolves it at run time: a graph break.
    model.loss_type = "ForMaskedLM" if name == "bert" else "ForCausalLM"
    return CausalLMLoss(model)


def _width(name: str, hidden: int) -> dict[str, int]:
    return {"ffn_dim": hidden} if name == "opt" else {"intermediate_size": hidden}


_NO_DROPOUT = {"attention_dropout": 0.0}
_BERT_NO_DROPOUT = {"attention_probs_dropout_prob": 0.0}
# name: (config class, model class, config beyond the shape). What each adds over the zoo:
ARCHITECTURES: dict[str, tuple[str, str, dict[str, object]]] = {
    # grouped-query attention, biases on q/k/v
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 2}),
    # tied head, embeddings scaled by sqrt(dim), RMSNorm of (1 + weight), GELU-tanh MLP
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 2, "head_dim": 16}),
    # parallel attention and MLP from one LayerNorm, partial rotary
    "phi": ("PhiConfig", "PhiForCausalLM", {"resid_pdrop": 0.0, "embd_pdrop": 0.0, **_NO_DROPOUT}),
    # fused QKV, parallel residual
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"hidden_dropout": 0.0, **_NO_DROPOUT}),
    # learned positions with an offset, ReLU MLP
    "opt": ("OPTConfig", "OPTForCausalLM", {"dropout": 0.0, **_NO_DROPOUT}),
    # a bidirectional encoder, post-LayerNorm, masked-LM loss
    "bert": ("BertConfig", "BertForMaskedLM", {"hidden_dropout_prob": 0.0, **_BERT_NO_DROPOUT}),
    # a mixture of experts: a router, top-2 of 4 experts
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_key_value_heads": 2, "num_local_experts": 4}),
}


def gpt2_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.model.transformer.h)  # type: ignore[union-attr, arg-type]


def llama_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.model.model.layers)  # type: ignore[union-attr, arg-type]


# Fine-tuning recipes on the models above: built from configs, so nothing is downloaded.
LORA_ATTENTION = {"llama": ("q_proj", "v_proj"), "gpt2": ("c_attn",)}
LORA_ALL_LINEAR = {
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
}


def peft_available() -> bool:
    return available() and importlib.util.find_spec("peft") is not None


def lora(model: CausalLMLoss, targets: tuple[str, ...], *, rank: int = 8) -> CausalLMLoss:
    """``peft.get_peft_model`` with LoRA adapters on ``targets``: the base model frozen,
    only the adapters trained. No adapter dropout, so that eager and compiled steps draw
    nothing and compare exactly."""
    from peft import LoraConfig, get_peft_model

    # GPT-2's Conv1D layers store their weights transposed: peft needs fan_in_fan_out.
    fan_in_fan_out = model.model.config.model_type == "gpt2"  # type: ignore[union-attr]
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=list(targets),
        fan_in_fan_out=fan_in_fan_out,
    )
    model.model = get_peft_model(model.model, config)  # type: ignore[assignment, arg-type]
    return model


def freeze_lower(model: CausalLMLoss, blocks: list[nn.Module], *, fraction: float = 0.5) -> CausalLMLoss:
    """The "freeze the first k layers" recipe: token (and position) embeddings and the
    lower ``fraction`` of the blocks get no gradients."""
    embeddings = model.model.get_input_embeddings()  # type: ignore[operator]
    embeddings.requires_grad_(False)
    position = getattr(getattr(model.model, "transformer", None), "wpe", None)
    if position is not None:
        position.requires_grad_(False)
    for block in blocks[: int(len(blocks) * fraction)]:
        block.requires_grad_(False)
    return model


def peft_blocks(model: nn.Module) -> list[nn.Module]:
    """The decoder blocks of a peft-wrapped GPT-2 or Llama."""
    inner = model.model.get_base_model()  # type: ignore[union-attr, operator]
    base = getattr(inner, "model", None) or inner.transformer
    return list(base.layers if hasattr(base, "layers") else base.h)


def without_dropout(model: CausalLMLoss) -> CausalLMLoss:
    """Dropout off (p = 0): the model draws nothing, so every system compares with eager."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def recipe(
    name: str, *, layers: int, dim: int, seq: int, vocab: int, heads: int = 4
) -> tuple[CausalLMLoss, list[nn.Module]]:
    """A model by the name the studies use and its blocks (what checkpointing wraps):
    ``hf_<llama|gpt2>`` (full training; GPT-2's dropout off, so every system compares with
    eager), then ``_frozen``, ``_lora`` (LoRA on attention) or ``_lora_all`` (every linear)."""
    arch, _, kind = name.removeprefix("hf_").partition("_")
    shape = dict(vocab=vocab, seq=seq, dim=dim, heads=heads, layers=layers)
    torch.manual_seed(0)
    if arch == "llama":
        model, blocks = llama(**shape, hidden=swiglu_width(dim)), llama_blocks
    elif arch == "gpt2":
        model, blocks = without_dropout(gpt2(**shape)), gpt2_blocks
    else:
        raise ValueError(f"unknown model {name!r}")
    if kind == "frozen":
        return freeze_lower(model, blocks(model)), blocks(model)
    if kind in ("lora", "lora_all"):
        model = lora(model, (LORA_ATTENTION if kind == "lora" else LORA_ALL_LINEAR)[arch])
        return model, peft_blocks(model)
    if kind == "":
        return model, blocks(model)
    raise ValueError(f"unknown recipe in {name!r}")


def finetune_model_cases(
    *, layers: int = 2, dim: int = 64, seq: int = 32, vocab: int = 128
) -> dict[str, ModelCase]:
    """Test-sized fine-tuning cases (``benchmarks.harness.models.ModelCase``): LoRA on a Llama's
    attention, on every linear layer of a GPT-2 (dropout off: compared with eager at any
    budget without replaying draws), and a Llama with its embeddings and lower half frozen."""
    shape = dict(vocab=vocab, seq=seq, dim=dim, heads=4, layers=layers)
    hidden = swiglu_width(dim)

    def tokens(batch: int) -> tuple[torch.Tensor, ...]:
        return torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq))

    def frozen() -> CausalLMLoss:
        model = llama(**shape, hidden=hidden)
        return freeze_lower(model, llama_blocks(model))

    cases = [
        ModelCase("llama_lora", lambda: lora(llama(**shape, hidden=hidden), LORA_ATTENTION["llama"]), tokens),
        ModelCase(
            "gpt2_lora_all", lambda: lora(without_dropout(gpt2(**shape)), LORA_ALL_LINEAR["gpt2"]), tokens
        ),
        ModelCase("llama_frozen", frozen, tokens),
        ModelCase("llama_full", lambda: llama(**shape, hidden=hidden), tokens),
    ]
    return {case.name: case for case in cases}
