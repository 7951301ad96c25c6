"""The recipes of the README's "Trainers" section, each inside the trainer people run.

A tiny HF Llama built from a config trains a few steps under each trainer twice: with our
partitioner and without compiling (same seeds, same data, SGD so that the later losses
follow the gradients). Each run checks that our partitioner made every compiled graph's
plan (a report per graph, none a fallback) and that the losses equal eager's within fp32
noise. Caches are off, so every graph is partitioned afresh.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

import recompute_pass
from recompute_pass import PartitionReport, capture_reports
from tests.support.harness import autograd_cache_off

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

STEPS = 3
BATCH, SEQ, VOCAB = 2, 16, 64
OPTIONS = {"memory_budget": 0.5, "fallback": False}
# Our plan recomputes some forward values in backward and Inductor fuses differently: the
# same arithmetic in another order, a few float32 ulps apart.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def _llama(layers: int = 1) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator) for _ in range(STEPS)]


class _Tokens(torch.utils.data.Dataset):
    """The batches' rows, in order (``Trainer`` and Lightning batch them again)."""

    def __init__(self) -> None:
        self.rows = [row for batch in _batches() for row in batch]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


@contextlib.contextmanager
def _fresh_compiles() -> Iterator[list[PartitionReport]]:
    """Every graph compiled inside is compiled now (no cache, no earlier graph), counted in
    ``counters["stats"]["unique_graphs"]``; the reports published meanwhile."""
    torch.compiler.reset()
    counters.clear()
    with autograd_cache_off(), capture_reports() as reports:
        yield reports
    torch.compiler.reset()


def _check_ours(reports: list[PartitionReport]) -> None:
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1 and len(reports) == graphs, (len(reports), graphs)
    assert all(report.fallback is None for report in reports), [r.fallback for r in reports]


def _against_eager(run: Callable[[str], list[float]]) -> None:
    """Run the recipe with our partitioner ("ours") and without compiling ("eager"); compare."""
    with _fresh_compiles() as reports:
        ours = run("ours")
    _check_ours(reports)
    eager = run("eager")
    assert len(ours) == STEPS
    torch.testing.assert_close(ours, eager, **TOLERANCE)


def _ours(mode: str) -> contextlib.AbstractContextManager[object]:
    return recompute_pass.install(**OPTIONS) if mode == "ours" else contextlib.nullcontext()


def test_hf_trainer_with_torch_compile_and_install(tmp_path: Path) -> None:
    """``TrainingArguments(torch_compile=True)`` compiles through accelerate, which refuses
    backend names outside its enum (``torch_compile_backend="recompute"`` raises): ``install``."""
    from accelerate.state import AcceleratorState
    from transformers import Trainer, TrainingArguments

    base = _llama()
    lr = 0.5

    class Recording(Trainer):
        losses: list[float]

        def compute_loss(self, *args: object, **kwargs: object) -> torch.Tensor:
            loss = super().compute_loss(*args, **kwargs)
            self.losses.append(loss.item())
            return loss

    def run(mode: str) -> list[float]:
        args = TrainingArguments(
            output_dir=str(tmp_path / mode),
            torch_compile=mode != "eager",
            use_cpu=True,
            report_to=[],
            max_steps=STEPS,
            per_device_train_batch_size=BATCH,
            learning_rate=lr,
            optim="sgd",
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=0.0,  # plain SGD steps, as the eager reference takes
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        )
        trainer = Recording(model=copy.deepcopy(base), args=args, train_dataset=_Tokens())
        trainer.losses = []
        with _ours(mode):
            trainer.train()
        AcceleratorState._reset_state(True)
        return trainer.losses

    _against_eager(run)


def test_hf_trainer_refuses_our_backend_name(tmp_path: Path) -> None:
    """Why the README shows ``install`` for HF Trainer: accelerate's enum of backends."""
    from accelerate.state import AcceleratorState
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path), torch_compile=True, torch_compile_backend="recompute", use_cpu=True
    )
    try:
        with pytest.raises(ValueError, match="'RECOMPUTE' is not a valid DynamoBackend"):
            Trainer(model=_llama(), args=args, train_dataset=_Tokens())
    finally:
        AcceleratorState._reset_state(True)


def test_accelerate_with_dynamo_backend_inductor_and_install() -> None:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    base = _llama()
    lr = 0.5

    def run(mode: str) -> list[float]:
        accelerator = Accelerator(cpu=True, dynamo_backend="no" if mode == "eager" else "inductor")
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        model, optimizer = accelerator.prepare(model, optimizer)
        losses = []
        with _ours(mode):
            for batch in _batches():
                loss = model(input_ids=batch, labels=batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(loss.item())
        AcceleratorState._reset_state(True)
        return losses

    _against_eager(run)


def test_lightning_with_the_backend_by_name() -> None:
    """Lightning compiles nothing itself and takes a compiled LightningModule: the backend
    goes by name (options from ``recompute_pass.config``)."""
    pl = pytest.importorskip("pytorch_lightning")

    base = _llama()
    lr = 0.5

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = copy.deepcopy(base)
            self.losses: list[float] = []

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
            return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

        def on_train_batch_end(self, outputs: dict[str, torch.Tensor], batch: object, index: int) -> None:
            # Here, not in the compiled training_step: there, each append grew a guarded
            # length and recompiled the step every step.
            self.losses.append(outputs["loss"].item())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=lr)

    def run(mode: str) -> list[float]:
        module = Module()
        compiled = module if mode == "eager" else torch.compile(module, backend="recompute")
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=STEPS,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        loader = torch.utils.data.DataLoader(_Tokens(), batch_size=BATCH, shuffle=False)
        with recompute_pass.config.patch(**OPTIONS):
            trainer.fit(compiled, train_dataloaders=loader)
        return module.losses

    _against_eager(run)


def test_torchtitan_style_per_block_compile_by_name() -> None:
    """torchtitan compiles each transformer block alone (``block.compile(backend=...)``,
    ``fullgraph=True``); the name reaches us through the ``torch_dynamo_backends`` entry
    point of the installed package."""
    assert "recompute" in torch._dynamo.list_backends()
    base = _llama(layers=2)
    lr = 0.5

    def run(mode: str) -> list[float]:
        model = copy.deepcopy(base)
        for block in model.model.layers if mode != "eager" else ():
            block.compile(backend="recompute", fullgraph=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        losses = []
        with recompute_pass.config.patch(**OPTIONS):
            for batch in _batches():
                loss = model(input_ids=batch, labels=batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(loss.item())
        return losses

    _against_eager(run)
