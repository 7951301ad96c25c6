"""The chosen partitions, pinned as readable reports.

Regenerate after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/eager/test_snapshots.py``
and review the diff: every changed line is a changed decision.
"""

from __future__ import annotations

import functools

import pytest
import torch
from expecttest import TestCase

from benchmarks.harness.models import model_cases
from recompute_pass.capture import CapturedStep
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from tests.support.joint_graphs import capture_joints

CASES = model_cases(layers=1, dim=32, seq=16)


@functools.cache
def joint(name: str) -> CapturedStep:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    (captured,) = capture_joints(model, case.inputs(2))
    return captured


@functools.cache
def lora_joint() -> CapturedStep:
    """The Llama block with LoRA adapters (peft, rank 4) on its query and value projections:
    the base weights frozen, only the adapters trained."""
    from peft import LoraConfig, get_peft_model

    case = CASES["llama_block"]
    torch.manual_seed(0)
    model = get_peft_model(case.build(), LoraConfig(r=4, target_modules=["wq", "wv"], lora_dropout=0.0))
    torch.manual_seed(1)
    (captured,) = capture_joints(model, case.inputs(2))
    return captured


def report_text(name: str, *, compiler: str | None = None, **options: object) -> str:
    """``compiler="inductor"``: partitioned as under ``torch.compile`` (Inductor's memory plan)."""
    captured = lora_joint() if name == "lora_llama_block" else joint(name)
    *_, report = partition(
        captured.copy(),
        num_fwd_outputs=captured.num_fwd_outputs,
        static_lifetime_input_indices=captured.static_lifetime_input_indices,
        options=RecomputeOptions(device="cpu", **options),
        compiler=compiler,
    )
    return report.to_text()


@pytest.fixture(autouse=True, scope="module")
def _native_dropout():
    from recompute_pass import torch_internals as ti

    with ti.inductor_config.patch(fallback_random=True):
        yield


class TestSnapshots(TestCase):
    def test_lora_llama_block_peak_0_5(self) -> None:
        pytest.importorskip("peft")
        self.assertExpectedInline(
            report_text("lora_llama_block", memory_budget=0.5),
            """\
solver: peak, device: cpu
budget (peak): ratio 0.5 -> 75,652 B (range 64,644..86,660 B)
saved: 43,520 B in 8 activations (+14 static inputs)
recomputed: 73 ops, 181,376 FLOP, est. 91.3 us
predicted peak: 73,220 B (backward: base_model.model.block/exp; graph model)
gradients: 512 of 13,248 static-input elements in 4 of 15 tensors (parameters, buffers)
note: peak search over 16 plans, 5 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
      64,644         143 us
      68,740         123 us
      73,220        92.3 us
      82,052        32.1 us
      86,660        1.19 us
saved activations:
  name                                                                   shape          dtype     bytes
  primals_1                                                              [2, 16, 32]    float32   4,096
  base_model.model.block.wq/add                                          [2, 16, 32]    float32   4,096
  base_model.model.block/_scaled_dot_product_flash_attention_for_cpu[0]  [2, 4, 16, 8]  float32   4,096
  base_model.model.block/_scaled_dot_product_flash_attention_for_cpu[1]  [2, 4, 16]     float32     512
  base_model.model.block/add#2                                           [2, 16, 32]    float32   4,096
  base_model.model.block.w_gate/mm                                       [32, 88]       float32  11,264
  base_model.model.block.w_up/mm                                         [32, 88]       float32  11,264
  mul                                                                    [2, 16, 32]    float32   4,096
recomputed (views, free, not listed: 38):
  name                                         shape              flops
  base_model.model.block.attn_norm/pow         [2, 16, 32]        1,024
  base_model.model.block.attn_norm/mean        [2, 16, 1]         1,024
  base_model.model.block.attn_norm/add         [2, 16, 1]            32
  base_model.model.block.attn_norm/rsqrt       [2, 16, 1]            32
  base_model.model.block.attn_norm/mul         [2, 16, 32]        1,024
  base_model.model.block.attn_norm/mul#1       [2, 16, 32]        1,024
  base_model.model.block.wq.lora_A.default/mm  [32, 4]            8,192
  base_model.model.block.wk/mm                 [32, 32]          65,536
  base_model.model.block.wv.base_layer/mm      [32, 32]          65,536
  base_model.model.block.wv.lora_A.default/mm  [32, 4]            8,192
  base_model.model.block.wv.lora_B.default/mm  [32, 32]           8,192
  base_model.model.block.wv/mul                [2, 16, 32]        1,024
  base_model.model.block.wv/add                [2, 16, 32]        1,024
  base_model.model.block/mul                   [2, 4, 16, 4]        512
  base_model.model.block/mul#1                 [2, 4, 16, 4]        512
  base_model.model.block/sub                   [2, 4, 16, 4]        512
  base_model.model.block/mul#2                 [2, 4, 16, 4]        512
  base_model.model.block/mul#3                 [2, 4, 16, 4]        512
  base_model.model.block/add                   [2, 4, 16, 4]        512
  base_model.model.block/cat                   [2, 4, 16, 4, 2]       0
  base_model.model.block/mul#4                 [2, 4, 16, 4]        512
  base_model.model.block/mul#5                 [2, 4, 16, 4]        512
  base_model.model.block/sub#1                 [2, 4, 16, 4]        512
  base_model.model.block/mul#6                 [2, 4, 16, 4]        512
  base_model.model.block/mul#7                 [2, 4, 16, 4]        512
  base_model.model.block/add#1                 [2, 4, 16, 4]        512
  base_model.model.block/cat#1                 [2, 4, 16, 4, 2]       0
  base_model.model.block.mlp_norm/pow          [2, 16, 32]        1,024
  base_model.model.block.mlp_norm/mean         [2, 16, 1]         1,024
  base_model.model.block.mlp_norm/add          [2, 16, 1]            32
  base_model.model.block.mlp_norm/rsqrt        [2, 16, 1]            32
  base_model.model.block/neg                   [2, 16, 88]        2,816
  base_model.model.block/exp                   [2, 16, 88]        2,816
  base_model.model.block/add#3                 [2, 16, 88]        2,816
  base_model.model.block/div                   [2, 16, 88]        2,816""",
        )

    def test_gpt_block_peak_1(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=1.0),
            """\
solver: peak, device: cpu
budget (peak): ratio 1 -> 146,692 B (range ?..146,692 B)
saved: 65,664 B in 14 activations (+9 static inputs)
recomputed: 26 ops, 24,832 FLOP, est. 49.7 ns
predicted peak: 146,692 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: budget 1: only plans as cheap as the fastest searched
note: peak search over 1 plans, 1 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
     146,692        1.44 us
saved activations:
  name                                     shape           dtype     bytes
  block.ln1/mul                            [2, 16, 32]     float32   4,096
  block.attn/clone                         [2, 4, 16, 8]   float32   4,096
  block.attn/clone#1                       [2, 4, 8, 16]   float32   4,096
  block.attn/div                           [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[0]   [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[1]   [2, 4, 16, 16]  bool      2,048
  block.attn/clone#2                       [2, 4, 16, 8]   float32   4,096
  block.attn/clone#3                       [2, 16, 4, 8]   float32   4,096
  block.attn.resid_drop/native_dropout[1]  [2, 16, 32]     bool      1,024
  block.ln2/mul                            [2, 16, 32]     float32   4,096
  block.fc/addmm                           [32, 128]       float32  16,384
  block.drop/native_dropout[1]             [2, 16, 32]     bool      1,024
  mul                                      [2, 16, 32]     float32   4,096
  div#1                                    [2, 16, 1]      float32     128
recomputed (views, free, not listed: 16):
  name                    shape           flops
  block.ln1/mul#1         [2, 16, 32]     1,024
  block.ln1/add#1         [2, 16, 32]     1,024
  block.attn/bitwise_not  [1, 1, 16, 16]    256
  block.ln2/mul#1         [2, 16, 32]     1,024
  block.ln2/add#1         [2, 16, 32]     1,024
  block/mul               [2, 16, 128]    4,096
  block/mul#1             [2, 16, 128]    4,096
  block/erf               [2, 16, 128]    4,096
  block/add#1             [2, 16, 128]    4,096
  block/mul#2             [2, 16, 128]    4,096""",
        )

    def test_gpt_block_peak_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.5),
            """\
solver: peak, device: cpu
budget (peak): ratio 0.5 -> 126,052 B (range 105,412..146,692 B)
saved: 43,968 B in 8 activations (+10 static inputs)
recomputed: 65 ops, 268,672 FLOP, est. 51.5 us
predicted peak: 120,900 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: peak search over 16 plans, 6 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
     105,412        62.9 us
     120,900        52.5 us
     126,148        42.7 us
     131,332        32.4 us
     138,500        22.2 us
     146,692        1.44 us
saved activations:
  name                                           shape           dtype     bytes
  primals_3                                      [2, 16, 32]     float32   4,096
  block.attn/div                                 [2, 4, 16, 16]  float32   8,192
  block.attn.resid_drop/native_dropout[1]        [2, 16, 32]     bool      1,024
  block/add                                      [2, 16, 32]     float32   4,096
  block.fc/addmm                                 [32, 128]       float32  16,384
  block.drop/native_dropout[1]                   [2, 16, 32]     bool      1,024
  mul                                            [2, 16, 32]     float32   4,096
  block.attn.attn_drop/native_dropout/rng_state  [5056]          uint8     5,056
recomputed (views, free, not listed: 38):
  name                                 shape             flops
  block.ln1/var_mean                   -                 1,024
  block.ln1/add                        [2, 16, 1]           32
  block.ln1/rsqrt                      [2, 16, 1]           32
  block.ln1/sub                        [2, 16, 32]       1,024
  block.ln1/mul                        [2, 16, 32]       1,024
  block.ln1/mul#1                      [2, 16, 32]       1,024
  block.ln1/add#1                      [2, 16, 32]       1,024
  block.attn.qkv/addmm                 [32, 96]        196,608
  block.attn/clone                     [2, 4, 16, 8]     1,024
  block.attn/clone#1                   [2, 4, 8, 16]     1,024
  block.attn/bitwise_not               [1, 1, 16, 16]      256
  block.attn.attn_drop/native_dropout  -                 4,096
  block.attn/clone#2                   [2, 4, 16, 8]     1,024
  block.attn/bmm#1                     [8, 16, 8]       32,768
  block.attn/clone#3                   [2, 16, 4, 8]     1,024
  block.ln2/var_mean                   -                 1,024
  block.ln2/add                        [2, 16, 1]           32
  block.ln2/rsqrt                      [2, 16, 1]           32
  block.ln2/sub                        [2, 16, 32]       1,024
  block.ln2/mul                        [2, 16, 32]       1,024
  block.ln2/mul#1                      [2, 16, 32]       1,024
  block.ln2/add#1                      [2, 16, 32]       1,024
  block/mul                            [2, 16, 128]      4,096
  block/mul#1                          [2, 16, 128]      4,096
  block/erf                            [2, 16, 128]      4,096
  block/add#1                          [2, 16, 128]      4,096
  block/mul#2                          [2, 16, 128]      4,096""",
        )

    def test_gpt_block_peak_0(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.0),
            """\
solver: peak, device: cpu
budget (peak): ratio 0 -> 105,412 B (range 105,412..146,692 B)
saved: 60,352 B in 9 activations (+10 static inputs)
recomputed: 62 ops, 254,336 FLOP, est. 61.7 us
predicted peak: 105,412 B (forward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: peak search over 16 plans, 6 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
     105,412        62.9 us
     120,900        52.5 us
     126,148        42.7 us
     131,332        32.4 us
     138,500        22.2 us
     146,692        1.44 us
saved activations:
  name                                           shape           dtype     bytes
  primals_3                                      [2, 16, 32]     float32   4,096
  block.attn/sub                                 [2, 4, 16, 16]  float32   8,192
  block.attn.resid_drop/native_dropout[1]        [2, 16, 32]     bool      1,024
  block/add                                      [2, 16, 32]     float32   4,096
  block/mul#2                                    [2, 16, 128]    float32  16,384
  block.drop/native_dropout[1]                   [2, 16, 32]     bool      1,024
  mul                                            [2, 16, 32]     float32   4,096
  add                                            [2, 16, 128]    float32  16,384
  block.attn.attn_drop/native_dropout/rng_state  [5056]          uint8     5,056
recomputed (views, free, not listed: 37):
  name                                 shape             flops
  block.ln1/var_mean                   -                 1,024
  block.ln1/add                        [2, 16, 1]           32
  block.ln1/rsqrt                      [2, 16, 1]           32
  block.ln1/sub                        [2, 16, 32]       1,024
  block.ln1/mul                        [2, 16, 32]       1,024
  block.ln1/mul#1                      [2, 16, 32]       1,024
  block.ln1/add#1                      [2, 16, 32]       1,024
  block.attn.qkv/addmm                 [32, 96]        196,608
  block.attn/clone                     [2, 4, 16, 8]     1,024
  block.attn/clone#1                   [2, 4, 8, 16]     1,024
  block.attn/bitwise_not               [1, 1, 16, 16]      256
  block.attn/exp                       [2, 4, 16, 16]    2,048
  block.attn/sum                       [2, 4, 16, 1]     2,048
  block.attn/div                       [2, 4, 16, 16]    2,048
  block.attn.attn_drop/native_dropout  -                 4,096
  block.attn/clone#2                   [2, 4, 16, 8]     1,024
  block.attn/bmm#1                     [8, 16, 8]       32,768
  block.attn/clone#3                   [2, 16, 4, 8]     1,024
  block.ln2/var_mean                   -                 1,024
  block.ln2/add                        [2, 16, 1]           32
  block.ln2/rsqrt                      [2, 16, 1]           32
  block.ln2/sub                        [2, 16, 32]       1,024
  block.ln2/mul                        [2, 16, 32]       1,024
  block.ln2/mul#1                      [2, 16, 32]       1,024
  block.ln2/add#1                      [2, 16, 32]       1,024""",
        )

    def test_llama_block_peak_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.5),
            """\
solver: peak, device: cpu
budget (peak): ratio 0.5 -> 98,692 B (range 88,196..109,188 B)
saved: 38,912 B in 7 activations (+11 static inputs)
recomputed: 56 ops, 219,968 FLOP, est. 61.3 us
predicted peak: 96,388 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: peak search over 13 plans, 6 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
      88,196        92.7 us
      92,292        72.7 us
      96,388        62.2 us
     100,484        42.2 us
     104,580          32 us
     109,188        1.18 us
saved activations:
  name                 shape          dtype     bytes
  block.attn_norm/mul  [2, 16, 32]    float32   4,096
  block/sub#1          [2, 4, 16, 4]  float32   2,048
  block/add#1          [2, 4, 16, 4]  float32   2,048
  block/add#2          [2, 16, 32]    float32   4,096
  block.w_gate/mm      [32, 88]       float32  11,264
  block.w_up/mm        [32, 88]       float32  11,264
  mul                  [2, 16, 32]    float32   4,096
recomputed (views, free, not listed: 32):
  name                                               shape              flops
  block.attn_norm/mul#1                              [2, 16, 32]        1,024
  block.wq/mm                                        [32, 32]          65,536
  block.wv/mm                                        [32, 32]          65,536
  block/mul                                          [2, 4, 16, 4]        512
  block/mul#1                                        [2, 4, 16, 4]        512
  block/sub                                          [2, 4, 16, 4]        512
  block/mul#2                                        [2, 4, 16, 4]        512
  block/mul#3                                        [2, 4, 16, 4]        512
  block/add                                          [2, 4, 16, 4]        512
  block/cat                                          [2, 4, 16, 4, 2]       0
  block/cat#1                                        [2, 4, 16, 4, 2]       0
  block/_scaled_dot_product_flash_attention_for_cpu  -                 65,536
  block/clone                                        [2, 16, 4, 8]      1,024
  block.mlp_norm/pow                                 [2, 16, 32]        1,024
  block.mlp_norm/mean                                [2, 16, 1]         1,024
  block.mlp_norm/add                                 [2, 16, 1]            32
  block.mlp_norm/rsqrt                               [2, 16, 1]            32
  block.mlp_norm/mul                                 [2, 16, 32]        1,024
  block.mlp_norm/mul#1                               [2, 16, 32]        1,024
  block/neg                                          [2, 16, 88]        2,816
  block/exp                                          [2, 16, 88]        2,816
  block/add#3                                        [2, 16, 88]        2,816
  block/div                                          [2, 16, 88]        2,816
  block/mul#8                                        [2, 16, 88]        2,816""",
        )

    def test_llama_block_peak_cap(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", peak_memory_bytes=150_000),
            """\
solver: peak, device: cpu
budget (peak): absolute -> 150,000 B (range 88,196..109,188 B)
saved: 51,840 B in 11 activations (+11 static inputs)
recomputed: 31 ops, 18,176 FLOP, est. 36.4 ns
predicted peak: 109,188 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: peak search over 13 plans, 6 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
      88,196        92.7 us
      92,292        72.7 us
      96,388        62.2 us
     100,484        42.2 us
     104,580          32 us
     109,188        1.18 us
saved activations:
  name                                                  shape             dtype     bytes
  block.attn_norm/mul                                   [2, 16, 32]       float32   4,096
  block.wv/mm                                           [32, 32]          float32   4,096
  block/cat                                             [2, 4, 16, 4, 2]  float32   4,096
  block/cat#1                                           [2, 4, 16, 4, 2]  float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  [2, 4, 16, 8]     float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  [2, 4, 16]        float32     512
  block/add#2                                           [2, 16, 32]       float32   4,096
  block.mlp_norm/rsqrt                                  [2, 16, 1]        float32     128
  block.w_gate/mm                                       [32, 88]          float32  11,264
  block.w_up/mm                                         [32, 88]          float32  11,264
  mul                                                   [2, 16, 32]       float32   4,096
recomputed (views, free, not listed: 22):
  name                   shape          flops
  block.attn_norm/mul#1  [2, 16, 32]    1,024
  block/clone            [2, 16, 4, 8]  1,024
  block.mlp_norm/mul     [2, 16, 32]    1,024
  block.mlp_norm/mul#1   [2, 16, 32]    1,024
  block/neg              [2, 16, 88]    2,816
  block/exp              [2, 16, 88]    2,816
  block/add#3            [2, 16, 88]    2,816
  block/div              [2, 16, 88]    2,816
  block/mul#8            [2, 16, 88]    2,816""",
        )

    def test_llama_block_peak_0_5_under_inductor(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.5, compiler="inductor"),
            """\
solver: peak, device: cpu
budget (peak): ratio 0.5 -> 92,488 B (range 83,976..101,000 B)
saved: 38,912 B in 7 activations (+11 static inputs)
recomputed: 56 ops, 219,968 FLOP, est. 61.3 us
predicted peak: 88,072 B (backward: mul#6; inductor model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: peak search over 13 plans, 6 checked
frontier (what other budgets buy):
  peak bytes  est. overhead
      83,976        72.7 us
      88,072        62.2 us
      96,392        42.2 us
     100,488          32 us
     101,000        1.18 us
saved activations:
  name                 shape          dtype     bytes
  block.attn_norm/mul  [2, 16, 32]    float32   4,096
  block/sub#1          [2, 4, 16, 4]  float32   2,048
  block/add#1          [2, 4, 16, 4]  float32   2,048
  block/add#2          [2, 16, 32]    float32   4,096
  block.w_gate/mm      [32, 88]       float32  11,264
  block.w_up/mm        [32, 88]       float32  11,264
  mul                  [2, 16, 32]    float32   4,096
recomputed (views, free, not listed: 32):
  name                                               shape              flops
  block.attn_norm/mul#1                              [2, 16, 32]        1,024
  block.wq/mm                                        [32, 32]          65,536
  block.wv/mm                                        [32, 32]          65,536
  block/mul                                          [2, 4, 16, 4]        512
  block/mul#1                                        [2, 4, 16, 4]        512
  block/sub                                          [2, 4, 16, 4]        512
  block/mul#2                                        [2, 4, 16, 4]        512
  block/mul#3                                        [2, 4, 16, 4]        512
  block/add                                          [2, 4, 16, 4]        512
  block/cat                                          [2, 4, 16, 4, 2]       0
  block/cat#1                                        [2, 4, 16, 4, 2]       0
  block/_scaled_dot_product_flash_attention_for_cpu  -                 65,536
  block/clone                                        [2, 16, 4, 8]      1,024
  block.mlp_norm/pow                                 [2, 16, 32]        1,024
  block.mlp_norm/mean                                [2, 16, 1]         1,024
  block.mlp_norm/add                                 [2, 16, 1]            32
  block.mlp_norm/rsqrt                               [2, 16, 1]            32
  block.mlp_norm/mul                                 [2, 16, 32]        1,024
  block.mlp_norm/mul#1                               [2, 16, 32]        1,024
  block/neg                                          [2, 16, 88]        2,816
  block/exp                                          [2, 16, 88]        2,816
  block/add#3                                        [2, 16, 88]        2,816
  block/div                                          [2, 16, 88]        2,816
  block/mul#8                                        [2, 16, 88]        2,816""",
        )

    def test_mlp_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=1.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 2,048 B (range 256..2,048 B)
saved: 2,048 B in 5 activations (+2 static inputs)
recomputed: 2 ops, 0 FLOP, est. 0 s
predicted peak: 33,924 B (backward: sum#2; graph model)
gradients: 8,352 of 8,352 static-input elements in 6 of 6 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        30.7 us
          512        20.6 us
        1,024        10.2 us
        1,536        44.4 ns
        2,048        41.6 ns
saved activations:
  name       shape    dtype    bytes
  primals_3  [2, 32]  float32    256
  relu       [2, 64]  float32    512
  mul#2      [2, 64]  float32    512
  mul#3      [2, 32]  float32    256
  add#1      [2, 64]  float32    512""",
        )

    def test_mlp_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=0.5, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 1,152 B (range 256..2,048 B)
saved: 1,024 B in 3 activations (+4 static inputs)
recomputed: 10 ops, 8,960 FLOP, est. 10.2 us
predicted peak: 33,924 B (backward: sum#2; graph model)
gradients: 8,352 of 8,352 static-input elements in 6 of 6 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        30.7 us
          512        20.6 us
        1,024        10.2 us
        1,536        44.4 ns
        2,048        41.6 ns
saved activations:
  name       shape    dtype    bytes
  primals_3  [2, 32]  float32    256
  fc2/addmm  [2, 64]  float32    512
  mul#3      [2, 32]  float32    256
recomputed (views, free, not listed: 3):
  name       shape    flops
  fc1/addmm  [2, 64]  8,192
  relu       [2, 64]    128
  mul        [2, 64]    128
  mul#1      [2, 64]    128
  erf        [2, 64]    128
  add        [2, 64]    128
  mul#2      [2, 64]    128""",
        )

    def test_mlp_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=0.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 256 B (range 256..2,048 B)
saved: 256 B in 1 activations (+6 static inputs)
recomputed: 12 ops, 33,536 FLOP, est. 30.7 us
predicted peak: 33,924 B (backward: sum#2; graph model)
gradients: 8,352 of 8,352 static-input elements in 6 of 6 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        30.7 us
          512        20.6 us
        1,024        10.2 us
        1,536        44.4 ns
        2,048        41.6 ns
saved activations:
  name       shape    dtype    bytes
  primals_3  [2, 32]  float32    256
recomputed (views, free, not listed: 3):
  name       shape     flops
  fc1/addmm  [2, 64]   8,192
  relu       [2, 64]     128
  fc2/addmm  [2, 64]  16,384
  mul        [2, 64]     128
  mul#1      [2, 64]     128
  erf        [2, 64]     128
  add        [2, 64]     128
  mul#2      [2, 64]     128
  fc3/addmm  [2, 32]   8,192""",
        )

    def test_mlp_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget_bytes=2_048),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 2,048 B (range 256..2,048 B)
saved: 2,048 B in 5 activations (+2 static inputs)
recomputed: 2 ops, 0 FLOP, est. 0 s
predicted peak: 33,924 B (backward: sum#2; graph model)
gradients: 8,352 of 8,352 static-input elements in 6 of 6 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        30.7 us
          512        20.6 us
        1,024        10.2 us
        1,536        44.4 ns
        2,048        41.6 ns
saved activations:
  name       shape    dtype    bytes
  primals_3  [2, 32]  float32    256
  relu       [2, 64]  float32    512
  mul#2      [2, 64]  float32    512
  mul#3      [2, 32]  float32    256
  add#1      [2, 64]  float32    512""",
        )

    def test_gpt_block_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=1.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 65,664 B (range 19,264..65,664 B)
saved: 65,664 B in 14 activations (+9 static inputs)
recomputed: 26 ops, 24,832 FLOP, est. 49.7 ns
predicted peak: 146,692 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
       19,264         135 us
       19,328         104 us
       19,392        83.3 us
       19,520        73.2 us
       20,544        52.9 us
       24,640        42.7 us
       29,824        32.4 us
       36,992        22.2 us
       49,280        11.9 us
       65,664        1.44 us
saved activations:
  name                                     shape           dtype     bytes
  block.ln1/mul                            [2, 16, 32]     float32   4,096
  block.attn/clone                         [2, 4, 16, 8]   float32   4,096
  block.attn/clone#1                       [2, 4, 8, 16]   float32   4,096
  block.attn/div                           [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[0]   [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[1]   [2, 4, 16, 16]  bool      2,048
  block.attn/clone#2                       [2, 4, 16, 8]   float32   4,096
  block.attn/clone#3                       [2, 16, 4, 8]   float32   4,096
  block.attn.resid_drop/native_dropout[1]  [2, 16, 32]     bool      1,024
  block.ln2/mul                            [2, 16, 32]     float32   4,096
  block.fc/addmm                           [32, 128]       float32  16,384
  block.drop/native_dropout[1]             [2, 16, 32]     bool      1,024
  mul                                      [2, 16, 32]     float32   4,096
  div#1                                    [2, 16, 1]      float32     128
recomputed (views, free, not listed: 16):
  name                    shape           flops
  block.ln1/mul#1         [2, 16, 32]     1,024
  block.ln1/add#1         [2, 16, 32]     1,024
  block.attn/bitwise_not  [1, 1, 16, 16]    256
  block.ln2/mul#1         [2, 16, 32]     1,024
  block.ln2/add#1         [2, 16, 32]     1,024
  block/mul               [2, 16, 128]    4,096
  block/mul#1             [2, 16, 128]    4,096
  block/erf               [2, 16, 128]    4,096
  block/add#1             [2, 16, 128]    4,096
  block/mul#2             [2, 16, 128]    4,096""",
        )

    def test_gpt_block_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.5, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 42,464 B (range 19,264..65,664 B)
saved: 42,112 B in 14 activations (+10 static inputs)
recomputed: 35 ops, 329,984 FLOP, est. 21.1 us
predicted peak: 143,620 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       19,264         135 us
       19,328         104 us
       19,392        83.3 us
       19,520        73.2 us
       20,544        52.9 us
       24,640        42.7 us
       29,824        32.4 us
       36,992        22.2 us
       49,280        11.9 us
       65,664        1.44 us
saved activations:
  name                                     shape           dtype    bytes
  block.ln1/mul                            [2, 16, 32]     float32  4,096
  block.attn/clone                         [2, 4, 16, 8]   float32  4,096
  block.attn/clone#1                       [2, 4, 8, 16]   float32  4,096
  block.attn/amax                          [2, 4, 16, 1]   float32    512
  block.attn/sum                           [2, 4, 16, 1]   float32    512
  block.attn.attn_drop/native_dropout[0]   [2, 4, 16, 16]  float32  8,192
  block.attn.attn_drop/native_dropout[1]   [2, 4, 16, 16]  bool     2,048
  block.attn/clone#2                       [2, 4, 16, 8]   float32  4,096
  block.attn/clone#3                       [2, 16, 4, 8]   float32  4,096
  block.attn.resid_drop/native_dropout[1]  [2, 16, 32]     bool     1,024
  block.ln2/rsqrt                          [2, 16, 1]      float32    128
  block.ln2/mul                            [2, 16, 32]     float32  4,096
  block.drop/native_dropout[1]             [2, 16, 32]     bool     1,024
  mul                                      [2, 16, 32]     float32  4,096
recomputed (views, free, not listed: 17):
  name                      shape             flops
  block.ln1/mul#1           [2, 16, 32]       1,024
  block.ln1/add#1           [2, 16, 32]       1,024
  block.attn/bmm            [8, 16, 16]      32,768
  block.attn/mul            [2, 4, 16, 16]    2,048
  block.attn/bitwise_not    [1, 1, 16, 16]      256
  block.attn/scalar_tensor  []                    0
  block.attn/where          [2, 4, 16, 16]    2,048
  block.attn/sub            [2, 4, 16, 16]    2,048
  block.attn/exp            [2, 4, 16, 16]    2,048
  block.attn/div            [2, 4, 16, 16]    2,048
  block.ln2/mul#1           [2, 16, 32]       1,024
  block.ln2/add#1           [2, 16, 32]       1,024
  block.fc/addmm            [32, 128]       262,144
  block/mul                 [2, 16, 128]      4,096
  block/mul#1               [2, 16, 128]      4,096
  block/erf                 [2, 16, 128]      4,096
  block/add#1               [2, 16, 128]      4,096
  block/mul#2               [2, 16, 128]      4,096""",
        )

    def test_gpt_block_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 19,264 B (range 19,264..65,664 B)
saved: 19,264 B in 4 activations (+13 static inputs)
recomputed: 86 ops, 911,744 FLOP, est. 134 us
predicted peak: 155,140 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       19,264         135 us
       19,328         104 us
       19,392        83.3 us
       19,520        73.2 us
       20,544        52.9 us
       24,640        42.7 us
       29,824        32.4 us
       36,992        22.2 us
       49,280        11.9 us
       65,664        1.44 us
saved activations:
  name                                            shape        dtype    bytes
  primals_3                                       [2, 16, 32]  float32  4,096
  block.attn.attn_drop/native_dropout/rng_state   [5056]       uint8    5,056
  block.attn.resid_drop/native_dropout/rng_state  [5056]       uint8    5,056
  block.drop/native_dropout/rng_state             [5056]       uint8    5,056
recomputed (views, free, not listed: 43):
  name                                  shape             flops
  block.ln1/var_mean                    -                 1,024
  block.ln1/add                         [2, 16, 1]           32
  block.ln1/rsqrt                       [2, 16, 1]           32
  block.ln1/sub                         [2, 16, 32]       1,024
  block.ln1/mul                         [2, 16, 32]       1,024
  block.ln1/mul#1                       [2, 16, 32]       1,024
  block.ln1/add#1                       [2, 16, 32]       1,024
  block.attn.qkv/addmm                  [32, 96]        196,608
  block.attn/clone                      [2, 4, 16, 8]     1,024
  block.attn/clone#1                    [2, 4, 8, 16]     1,024
  block.attn/bmm                        [8, 16, 16]      32,768
  block.attn/mul                        [2, 4, 16, 16]    2,048
  block.attn/bitwise_not                [1, 1, 16, 16]      256
  block.attn/scalar_tensor              []                    0
  block.attn/where                      [2, 4, 16, 16]    2,048
  block.attn/amax                       [2, 4, 16, 1]     2,048
  block.attn/sub                        [2, 4, 16, 16]    2,048
  block.attn/exp                        [2, 4, 16, 16]    2,048
  block.attn/sum                        [2, 4, 16, 1]     2,048
  block.attn/div                        [2, 4, 16, 16]    2,048
  block.attn.attn_drop/native_dropout   -                 4,096
  block.attn/clone#2                    [2, 4, 16, 8]     1,024
  block.attn/bmm#1                      [8, 16, 8]       32,768
  block.attn/clone#3                    [2, 16, 4, 8]     1,024
  block.attn.proj/addmm                 [32, 32]         65,536
  block.attn.resid_drop/native_dropout  -                 2,048
  block/add                             [2, 16, 32]       1,024
  block.ln2/var_mean                    -                 1,024
  block.ln2/add                         [2, 16, 1]           32
  block.ln2/rsqrt                       [2, 16, 1]           32
  block.ln2/sub                         [2, 16, 32]       1,024
  block.ln2/mul                         [2, 16, 32]       1,024
  block.ln2/mul#1                       [2, 16, 32]       1,024
  block.ln2/add#1                       [2, 16, 32]       1,024
  block.fc/addmm                        [32, 128]       262,144
  block/mul                             [2, 16, 128]      4,096
  block/mul#1                           [2, 16, 128]      4,096
  block/erf                             [2, 16, 128]      4,096
  block/add#1                           [2, 16, 128]      4,096
  block/mul#2                           [2, 16, 128]      4,096
  block.out/addmm                       [32, 32]        262,144
  block.drop/native_dropout             -                 2,048
  block/add#2                           [2, 16, 32]       1,024""",
        )

    def test_gpt_block_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget_bytes=60_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 60,000 B (range 19,264..65,664 B)
saved: 58,496 B in 15 activations (+9 static inputs)
recomputed: 34 ops, 67,840 FLOP, est. 10.4 us
predicted peak: 139,524 B (backward: mul#6; graph model)
gradients: 12,704 of 12,960 static-input elements in 12 of 13 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       19,264         135 us
       19,328         104 us
       19,392        83.3 us
       19,520        73.2 us
       20,544        52.9 us
       24,640        42.7 us
       29,824        32.4 us
       36,992        22.2 us
       49,280        11.9 us
       65,664        1.44 us
saved activations:
  name                                     shape           dtype     bytes
  block.ln1/mul                            [2, 16, 32]     float32   4,096
  block.attn/clone                         [2, 4, 16, 8]   float32   4,096
  block.attn/clone#1                       [2, 4, 8, 16]   float32   4,096
  block.attn/amax                          [2, 4, 16, 1]   float32     512
  block.attn/sum                           [2, 4, 16, 1]   float32     512
  block.attn.attn_drop/native_dropout[0]   [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[1]   [2, 4, 16, 16]  bool      2,048
  block.attn/clone#2                       [2, 4, 16, 8]   float32   4,096
  block.attn/clone#3                       [2, 16, 4, 8]   float32   4,096
  block.attn.resid_drop/native_dropout[1]  [2, 16, 32]     bool      1,024
  block.ln2/rsqrt                          [2, 16, 1]      float32     128
  block.ln2/mul                            [2, 16, 32]     float32   4,096
  block.fc/addmm                           [32, 128]       float32  16,384
  block.drop/native_dropout[1]             [2, 16, 32]     bool      1,024
  mul                                      [2, 16, 32]     float32   4,096
recomputed (views, free, not listed: 17):
  name                      shape            flops
  block.ln1/mul#1           [2, 16, 32]      1,024
  block.ln1/add#1           [2, 16, 32]      1,024
  block.attn/bmm            [8, 16, 16]     32,768
  block.attn/mul            [2, 4, 16, 16]   2,048
  block.attn/bitwise_not    [1, 1, 16, 16]     256
  block.attn/scalar_tensor  []                   0
  block.attn/where          [2, 4, 16, 16]   2,048
  block.attn/sub            [2, 4, 16, 16]   2,048
  block.attn/exp            [2, 4, 16, 16]   2,048
  block.attn/div            [2, 4, 16, 16]   2,048
  block.ln2/mul#1           [2, 16, 32]      1,024
  block.ln2/add#1           [2, 16, 32]      1,024
  block/mul                 [2, 16, 128]     4,096
  block/mul#1               [2, 16, 128]     4,096
  block/erf                 [2, 16, 128]     4,096
  block/add#1               [2, 16, 128]     4,096
  block/mul#2               [2, 16, 128]     4,096""",
        )

    def test_llama_block_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=1.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 51,840 B (range 4,096..51,840 B)
saved: 51,840 B in 11 activations (+11 static inputs)
recomputed: 31 ops, 18,176 FLOP, est. 36.4 ns
predicted peak: 109,188 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        4,096         124 us
        4,352         104 us
       12,544        62.8 us
       16,512        52.7 us
       20,608        42.2 us
       24,704          32 us
       29,312        21.8 us
       51,840        1.18 us
saved activations:
  name                                                  shape             dtype     bytes
  block.attn_norm/mul                                   [2, 16, 32]       float32   4,096
  block.wv/mm                                           [32, 32]          float32   4,096
  block/cat                                             [2, 4, 16, 4, 2]  float32   4,096
  block/cat#1                                           [2, 4, 16, 4, 2]  float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  [2, 4, 16, 8]     float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  [2, 4, 16]        float32     512
  block/add#2                                           [2, 16, 32]       float32   4,096
  block.mlp_norm/rsqrt                                  [2, 16, 1]        float32     128
  block.w_gate/mm                                       [32, 88]          float32  11,264
  block.w_up/mm                                         [32, 88]          float32  11,264
  mul                                                   [2, 16, 32]       float32   4,096
recomputed (views, free, not listed: 22):
  name                   shape          flops
  block.attn_norm/mul#1  [2, 16, 32]    1,024
  block/clone            [2, 16, 4, 8]  1,024
  block.mlp_norm/mul     [2, 16, 32]    1,024
  block.mlp_norm/mul#1   [2, 16, 32]    1,024
  block/neg              [2, 16, 88]    2,816
  block/exp              [2, 16, 88]    2,816
  block/add#3            [2, 16, 88]    2,816
  block/div              [2, 16, 88]    2,816
  block/mul#8            [2, 16, 88]    2,816""",
        )

    def test_llama_block_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.5, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 27,968 B (range 4,096..51,840 B)
saved: 25,216 B in 8 activations (+11 static inputs)
recomputed: 34 ops, 444,160 FLOP, est. 31.3 us
predicted peak: 105,092 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        4,096         124 us
        4,352         104 us
       12,544        62.8 us
       16,512        52.7 us
       20,608        42.2 us
       24,704          32 us
       29,312        21.8 us
       51,840        1.18 us
saved activations:
  name                                                  shape             dtype    bytes
  block.attn_norm/mul                                   [2, 16, 32]       float32  4,096
  block/cat                                             [2, 4, 16, 4, 2]  float32  4,096
  block/cat#1                                           [2, 4, 16, 4, 2]  float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  [2, 4, 16, 8]     float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  [2, 4, 16]        float32    512
  block/add#2                                           [2, 16, 32]       float32  4,096
  block.mlp_norm/rsqrt                                  [2, 16, 1]        float32    128
  mul                                                   [2, 16, 32]       float32  4,096
recomputed (views, free, not listed: 22):
  name                   shape            flops
  block.attn_norm/mul#1  [2, 16, 32]      1,024
  block.wv/mm            [32, 32]        65,536
  block/clone            [2, 16, 4, 8]    1,024
  block.mlp_norm/mul     [2, 16, 32]      1,024
  block.mlp_norm/mul#1   [2, 16, 32]      1,024
  block.w_gate/mm        [32, 88]       180,224
  block/neg              [2, 16, 88]      2,816
  block/exp              [2, 16, 88]      2,816
  block/add#3            [2, 16, 88]      2,816
  block/div              [2, 16, 88]      2,816
  block.w_up/mm          [32, 88]       180,224
  block/mul#8            [2, 16, 88]      2,816""",
        )

    def test_llama_block_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 4,096 B (range 4,096..51,840 B)
saved: 4,096 B in 1 activations (+11 static inputs)
recomputed: 81 ops, 899,968 FLOP, est. 123 us
predicted peak: 117,380 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        4,096         124 us
        4,352         104 us
       12,544        62.8 us
       16,512        52.7 us
       20,608        42.2 us
       24,704          32 us
       29,312        21.8 us
       51,840        1.18 us
saved activations:
  name       shape        dtype    bytes
  primals_1  [2, 16, 32]  float32  4,096
recomputed (views, free, not listed: 39):
  name                                               shape               flops
  block.attn_norm/pow                                [2, 16, 32]         1,024
  block.attn_norm/mean                               [2, 16, 1]          1,024
  block.attn_norm/add                                [2, 16, 1]             32
  block.attn_norm/rsqrt                              [2, 16, 1]             32
  block.attn_norm/mul                                [2, 16, 32]         1,024
  block.attn_norm/mul#1                              [2, 16, 32]         1,024
  block.wq/mm                                        [32, 32]           65,536
  block.wk/mm                                        [32, 32]           65,536
  block.wv/mm                                        [32, 32]           65,536
  block/mul                                          [2, 4, 16, 4]         512
  block/mul#1                                        [2, 4, 16, 4]         512
  block/sub                                          [2, 4, 16, 4]         512
  block/mul#2                                        [2, 4, 16, 4]         512
  block/mul#3                                        [2, 4, 16, 4]         512
  block/add                                          [2, 4, 16, 4]         512
  block/cat                                          [2, 4, 16, 4, 2]        0
  block/mul#4                                        [2, 4, 16, 4]         512
  block/mul#5                                        [2, 4, 16, 4]         512
  block/sub#1                                        [2, 4, 16, 4]         512
  block/mul#6                                        [2, 4, 16, 4]         512
  block/mul#7                                        [2, 4, 16, 4]         512
  block/add#1                                        [2, 4, 16, 4]         512
  block/cat#1                                        [2, 4, 16, 4, 2]        0
  block/_scaled_dot_product_flash_attention_for_cpu  -                  65,536
  block/clone                                        [2, 16, 4, 8]       1,024
  block.wo/mm                                        [32, 32]           65,536
  block/add#2                                        [2, 16, 32]         1,024
  block.mlp_norm/pow                                 [2, 16, 32]         1,024
  block.mlp_norm/mean                                [2, 16, 1]          1,024
  block.mlp_norm/add                                 [2, 16, 1]             32
  block.mlp_norm/rsqrt                               [2, 16, 1]             32
  block.mlp_norm/mul                                 [2, 16, 32]         1,024
  block.mlp_norm/mul#1                               [2, 16, 32]         1,024
  block.w_gate/mm                                    [32, 88]          180,224
  block/neg                                          [2, 16, 88]         2,816
  block/exp                                          [2, 16, 88]         2,816
  block/add#3                                        [2, 16, 88]         2,816
  block/div                                          [2, 16, 88]         2,816
  block.w_up/mm                                      [32, 88]          180,224
  block/mul#8                                        [2, 16, 88]         2,816
  block.w_down/mm                                    [32, 32]          180,224
  block/add#4                                        [2, 16, 32]         1,024""",
        )

    def test_llama_block_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget_bytes=60_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 60,000 B (range 4,096..51,840 B)
saved: 51,840 B in 11 activations (+11 static inputs)
recomputed: 31 ops, 18,176 FLOP, est. 36.4 ns
predicted peak: 109,188 B (backward: mul#4; graph model)
gradients: 12,608 of 12,736 static-input elements in 9 of 11 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        4,096         124 us
        4,352         104 us
       12,544        62.8 us
       16,512        52.7 us
       20,608        42.2 us
       24,704          32 us
       29,312        21.8 us
       51,840        1.18 us
saved activations:
  name                                                  shape             dtype     bytes
  block.attn_norm/mul                                   [2, 16, 32]       float32   4,096
  block.wv/mm                                           [32, 32]          float32   4,096
  block/cat                                             [2, 4, 16, 4, 2]  float32   4,096
  block/cat#1                                           [2, 4, 16, 4, 2]  float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  [2, 4, 16, 8]     float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  [2, 4, 16]        float32     512
  block/add#2                                           [2, 16, 32]       float32   4,096
  block.mlp_norm/rsqrt                                  [2, 16, 1]        float32     128
  block.w_gate/mm                                       [32, 88]          float32  11,264
  block.w_up/mm                                         [32, 88]          float32  11,264
  mul                                                   [2, 16, 32]       float32   4,096
recomputed (views, free, not listed: 22):
  name                   shape          flops
  block.attn_norm/mul#1  [2, 16, 32]    1,024
  block/clone            [2, 16, 4, 8]  1,024
  block.mlp_norm/mul     [2, 16, 32]    1,024
  block.mlp_norm/mul#1   [2, 16, 32]    1,024
  block/neg              [2, 16, 88]    2,816
  block/exp              [2, 16, 88]    2,816
  block/add#3            [2, 16, 88]    2,816
  block/div              [2, 16, 88]    2,816
  block/mul#8            [2, 16, 88]    2,816""",
        )

    def test_cnn_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=1.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 88,356 B (range 6,160..88,356 B)
saved: 88,356 B in 14 activations (+8 static inputs)
recomputed: 15 ops, 24,576 FLOP, est. 49.2 ns
predicted peak: 131,784 B (backward: blocks.0.bn2/mul; graph model)
gradients: 1,506 of 1,557 static-input elements in 11 of 20 tensors (parameters, buffers)
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         125 us
        6,164         115 us
        6,180        95.1 us
        6,436        53.8 us
        6,500        43.8 us
       39,268        22.1 us
       55,652          12 us
       88,356        11.9 us
saved activations:
  name                        shape           dtype     bytes
  primals_2                   [2, 3, 16, 16]  float32   6,144
  primals_22                  [2]             int64        16
  bn/rsqrt                    [1, 8, 1, 1]    float32      32
  relu                        [2, 8, 16, 16]  float32  16,384
  blocks.0.bn1/rsqrt          [1, 8, 1, 1]    float32      32
  blocks.0/relu               [2, 8, 16, 16]  float32  16,384
  blocks.0.conv2/convolution  [2, 8, 16, 16]  float32  16,384
  blocks.0.bn2/var_mean[1]    [1, 8, 1, 1]    float32      32
  blocks.0.bn2/rsqrt          [1, 8, 1, 1]    float32      32
  mean                        [2, 8, 1, 1]    float32      64
  convert_element_type        []              float32       4
  exp#1                       [2, 10]         float32      80
  sub#6                       [2, 8, 16, 16]  float32  16,384
  sub#9                       [2, 8, 16, 16]  float32  16,384
recomputed (views, free, not listed: 7):
  name                shape           flops
  blocks.0.bn2/sub    [2, 8, 16, 16]  4,096
  blocks.0.bn2/mul    [2, 8, 16, 16]  4,096
  blocks.0.bn2/mul#6  [2, 8, 16, 16]  4,096
  blocks.0.bn2/add#4  [2, 8, 16, 16]  4,096
  blocks.0/add        [2, 8, 16, 16]  4,096
  blocks.0/relu#1     [2, 8, 16, 16]  4,096
  scalar_tensor       []                  0
  scalar_tensor#1     []                  0""",
        )

    def test_cnn_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=0.5, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 47,258 B (range 6,160..88,356 B)
saved: 39,268 B in 13 activations (+10 static inputs)
recomputed: 36 ops, 286,720 FLOP, est. 11.3 us
predicted peak: 117,768 B (backward: convolution_backward; graph model)
gradients: 1,506 of 1,557 static-input elements in 11 of 20 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         125 us
        6,164         115 us
        6,180        95.1 us
        6,436        53.8 us
        6,500        43.8 us
       39,268        22.1 us
       55,652          12 us
       88,356        11.9 us
saved activations:
  name                        shape           dtype     bytes
  primals_2                   [2, 3, 16, 16]  float32   6,144
  primals_22                  [2]             int64        16
  bn/var_mean[1]              [1, 8, 1, 1]    float32      32
  bn/rsqrt                    [1, 8, 1, 1]    float32      32
  blocks.0.conv1/convolution  [2, 8, 16, 16]  float32  16,384
  blocks.0.bn1/var_mean[1]    [1, 8, 1, 1]    float32      32
  blocks.0.bn1/rsqrt          [1, 8, 1, 1]    float32      32
  blocks.0.conv2/convolution  [2, 8, 16, 16]  float32  16,384
  blocks.0.bn2/var_mean[1]    [1, 8, 1, 1]    float32      32
  blocks.0.bn2/rsqrt          [1, 8, 1, 1]    float32      32
  mean                        [2, 8, 1, 1]    float32      64
  convert_element_type        []              float32       4
  exp#1                       [2, 10]         float32      80
recomputed (views, free, not listed: 17):
  name                shape             flops
  stem/convolution    [2, 8, 16, 16]  221,184
  bn/sub              [2, 8, 16, 16]    4,096
  bn/mul              [2, 8, 16, 16]    4,096
  bn/mul#6            [2, 8, 16, 16]    4,096
  bn/add#4            [2, 8, 16, 16]    4,096
  relu                [2, 8, 16, 16]    4,096
  blocks.0.bn1/sub    [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul    [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6  [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4  [2, 8, 16, 16]    4,096
  blocks.0/relu       [2, 8, 16, 16]    4,096
  blocks.0.bn2/sub    [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul    [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6  [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4  [2, 8, 16, 16]    4,096
  blocks.0/add        [2, 8, 16, 16]    4,096
  blocks.0/relu#1     [2, 8, 16, 16]    4,096
  scalar_tensor       []                    0
  scalar_tensor#1     []                    0""",
        )

    def test_cnn_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=0.0, budget_mode="saved"),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 6,160 B (range 6,160..88,356 B)
saved: 6,160 B in 2 activations (+11 static inputs)
recomputed: 64 ops, 1,483,227 FLOP, est. 115 us
predicted peak: 119,560 B (backward: le; graph model)
gradients: 1,506 of 1,557 static-input elements in 11 of 20 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         125 us
        6,164         115 us
        6,180        95.1 us
        6,436        53.8 us
        6,500        43.8 us
       39,268        22.1 us
       55,652          12 us
       88,356        11.9 us
saved activations:
  name        shape           dtype    bytes
  primals_2   [2, 3, 16, 16]  float32  6,144
  primals_22  [2]             int64       16
recomputed (views, free, not listed: 23):
  name                        shape             flops
  stem/convolution            [2, 8, 16, 16]  221,184
  bn/var_mean                 -                 4,096
  bn/add#1                    [1, 8, 1, 1]          8
  bn/rsqrt                    [1, 8, 1, 1]          8
  bn/sub                      [2, 8, 16, 16]    4,096
  bn/mul                      [2, 8, 16, 16]    4,096
  bn/mul#6                    [2, 8, 16, 16]    4,096
  bn/add#4                    [2, 8, 16, 16]    4,096
  relu                        [2, 8, 16, 16]    4,096
  blocks.0.conv1/convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn1/var_mean       -                 4,096
  blocks.0.bn1/add#1          [1, 8, 1, 1]          8
  blocks.0.bn1/rsqrt          [1, 8, 1, 1]          8
  blocks.0.bn1/sub            [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul            [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6          [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4          [2, 8, 16, 16]    4,096
  blocks.0/relu               [2, 8, 16, 16]    4,096
  blocks.0.conv2/convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn2/var_mean       -                 4,096
  blocks.0.bn2/add#1          [1, 8, 1, 1]          8
  blocks.0.bn2/rsqrt          [1, 8, 1, 1]          8
  blocks.0.bn2/sub            [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul            [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6          [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4          [2, 8, 16, 16]    4,096
  blocks.0/add                [2, 8, 16, 16]    4,096
  blocks.0/relu#1             [2, 8, 16, 16]    4,096
  mean                        [2, 8, 1, 1]      4,096
  head/addmm                  [2, 10]             320
  amax                        [2, 1]               20
  sub                         [2, 10]              20
  exp                         [2, 10]              20
  sum                         [2, 1]               20
  log                         [2, 1]                2
  sub#1                       [2, 10]              20
  ne                          [2]                   2
  scalar_tensor               []                    0
  scalar_tensor#1             []                    0
  sum#1                       []                    2
  convert_element_type        []                    1""",
        )

    def test_cnn_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget_bytes=20_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 20,000 B (range 6,160..88,356 B)
saved: 6,500 B in 11 activations (+10 static inputs)
recomputed: 38 ops, 1,466,368 FLOP, est. 33.6 us
predicted peak: 131,848 B (backward: blocks.0.bn2/mul; graph model)
gradients: 1,506 of 1,557 static-input elements in 11 of 20 tensors (parameters, buffers)
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         125 us
        6,164         115 us
        6,180        95.1 us
        6,436        53.8 us
        6,500        43.8 us
       39,268        22.1 us
       55,652          12 us
       88,356        11.9 us
saved activations:
  name                      shape           dtype    bytes
  primals_2                 [2, 3, 16, 16]  float32  6,144
  primals_22                [2]             int64       16
  bn/var_mean[1]            [1, 8, 1, 1]    float32     32
  bn/rsqrt                  [1, 8, 1, 1]    float32     32
  blocks.0.bn1/var_mean[1]  [1, 8, 1, 1]    float32     32
  blocks.0.bn1/rsqrt        [1, 8, 1, 1]    float32     32
  blocks.0.bn2/var_mean[1]  [1, 8, 1, 1]    float32     32
  blocks.0.bn2/rsqrt        [1, 8, 1, 1]    float32     32
  mean                      [2, 8, 1, 1]    float32     64
  convert_element_type      []              float32      4
  exp#1                     [2, 10]         float32     80
recomputed (views, free, not listed: 17):
  name                        shape             flops
  stem/convolution            [2, 8, 16, 16]  221,184
  bn/sub                      [2, 8, 16, 16]    4,096
  bn/mul                      [2, 8, 16, 16]    4,096
  bn/mul#6                    [2, 8, 16, 16]    4,096
  bn/add#4                    [2, 8, 16, 16]    4,096
  relu                        [2, 8, 16, 16]    4,096
  blocks.0.conv1/convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn1/sub            [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul            [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6          [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4          [2, 8, 16, 16]    4,096
  blocks.0/relu               [2, 8, 16, 16]    4,096
  blocks.0.conv2/convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn2/sub            [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul            [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6          [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4          [2, 8, 16, 16]    4,096
  blocks.0/add                [2, 8, 16, 16]    4,096
  blocks.0/relu#1             [2, 8, 16, 16]    4,096
  scalar_tensor               []                    0
  scalar_tensor#1             []                    0""",
        )
