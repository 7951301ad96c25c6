"""The chosen partitions, pinned as readable reports.

Regenerate after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/test_snapshots.py``
and review the diff: every changed line is a changed decision.
"""

from __future__ import annotations

import functools

import pytest
import torch
from expecttest import TestCase

from benchmarks.models import model_cases
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from tests.joint_graphs import CapturedJoint, capture_joints

CASES = model_cases(layers=1, dim=32, seq=16)


@functools.cache
def joint(name: str) -> CapturedJoint:
    case = CASES[name]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    (captured,) = capture_joints(model, case.inputs(2))
    return captured


def report_text(name: str, **options: object) -> str:
    captured = joint(name)
    *_, report = partition(
        captured.copy(),
        num_fwd_outputs=captured.num_fwd_outputs,
        static_lifetime_input_indices=captured.static_lifetime_input_indices,
        options=RecomputeOptions(device="cpu", **options),
    )
    return report.to_text()


@pytest.fixture(autouse=True, scope="module")
def _native_dropout():
    from recompute_pass import torch_internals as ti

    with ti.inductor_config.patch(fallback_random=True):
        yield


class TestSnapshots(TestCase):
    pass

    def test_mlp_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=1.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 2,048 B (range 256..2,048 B)
saved: 2,048 B in 5 activations (+2 static inputs)
recomputed: 2 ops, 0 FLOP, est. 0 s
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        40.7 us
          512        30.6 us
        1,024        20.2 us
        1,536          10 us
        2,048          10 us
saved activations:
  name       op     shape    dtype    bytes
  primals_3  input  [2, 32]  float32    256
  relu       relu   [2, 64]  float32    512
  mul#2      mul    [2, 64]  float32    512
  mul#3      mul    [2, 32]  float32    256
  add#1      add    [2, 64]  float32    512""",
        )

    def test_mlp_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=0.5),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 1,152 B (range 256..2,048 B)
saved: 1,024 B in 3 activations (+4 static inputs)
recomputed: 10 ops, 8,960 FLOP, est. 10.2 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        40.7 us
          512        30.6 us
        1,024        20.2 us
        1,536          10 us
        2,048          10 us
saved activations:
  name       op     shape    dtype    bytes
  primals_3  input  [2, 32]  float32    256
  fc2/addmm  addmm  [2, 64]  float32    512
  mul#3      mul    [2, 32]  float32    256
recomputed (views, free, not listed: 3):
  name       op     shape    flops
  fc1/addmm  addmm  [2, 64]  8,192
  relu       relu   [2, 64]    128
  mul        mul    [2, 64]    128
  mul#1      mul    [2, 64]    128
  erf        erf    [2, 64]    128
  add        add    [2, 64]    128
  mul#2      mul    [2, 64]    128""",
        )

    def test_mlp_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget=0.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 256 B (range 256..2,048 B)
saved: 256 B in 1 activations (+6 static inputs)
recomputed: 12 ops, 33,536 FLOP, est. 30.7 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        40.7 us
          512        30.6 us
        1,024        20.2 us
        1,536          10 us
        2,048          10 us
saved activations:
  name       op     shape    dtype    bytes
  primals_3  input  [2, 32]  float32    256
recomputed (views, free, not listed: 3):
  name       op     shape     flops
  fc1/addmm  addmm  [2, 64]   8,192
  relu       relu   [2, 64]     128
  fc2/addmm  addmm  [2, 64]  16,384
  mul        mul    [2, 64]     128
  mul#1      mul    [2, 64]     128
  erf        erf    [2, 64]     128
  add        add    [2, 64]     128
  mul#2      mul    [2, 64]     128
  fc3/addmm  addmm  [2, 32]   8,192""",
        )

    def test_mlp_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("mlp", memory_budget_bytes=2_048),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 2,048 B (range 256..2,048 B)
saved: 2,048 B in 5 activations (+2 static inputs)
recomputed: 2 ops, 0 FLOP, est. 0 s
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
          256        40.7 us
          512        30.6 us
        1,024        20.2 us
        1,536          10 us
        2,048          10 us
saved activations:
  name       op     shape    dtype    bytes
  primals_3  input  [2, 32]  float32    256
  relu       relu   [2, 64]  float32    512
  mul#2      mul    [2, 64]  float32    512
  mul#3      mul    [2, 32]  float32    256
  add#1      add    [2, 64]  float32    512""",
        )

    def test_gpt_block_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=1.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 65,664 B (range 24,576..65,664 B)
saved: 65,664 B in 14 activations (+9 static inputs)
recomputed: 26 ops, 24,832 FLOP, est. 49.7 ns
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
       24,576        93.1 us
       24,580        83.1 us
       24,708          73 us
       25,732        52.7 us
       29,828        42.4 us
       36,992        32.2 us
       49,280        21.9 us
       65,664        11.4 us
saved activations:
  name                                     op       shape           dtype     bytes
  block.ln1/mul                            mul      [2, 16, 32]     float32   4,096
  block.attn/clone                         clone    [2, 4, 16, 8]   float32   4,096
  block.attn/clone#1                       clone    [2, 4, 8, 16]   float32   4,096
  block.attn/div                           div      [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[0]   getitem  [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[1]   getitem  [2, 4, 16, 16]  bool      2,048
  block.attn/clone#2                       clone    [2, 4, 16, 8]   float32   4,096
  block.attn/clone#3                       clone    [2, 16, 4, 8]   float32   4,096
  block.attn.resid_drop/native_dropout[1]  getitem  [2, 16, 32]     bool      1,024
  block.ln2/mul                            mul      [2, 16, 32]     float32   4,096
  block.fc/addmm                           addmm    [32, 128]       float32  16,384
  block.drop/native_dropout[1]             getitem  [2, 16, 32]     bool      1,024
  mul                                      mul      [2, 16, 32]     float32   4,096
  div#1                                    div      [2, 16, 1]      float32     128
recomputed (views, free, not listed: 16):
  name                    op           shape           flops
  block.ln1/mul#1         mul          [2, 16, 32]     1,024
  block.ln1/add#1         add          [2, 16, 32]     1,024
  block.attn/bitwise_not  bitwise_not  [1, 1, 16, 16]    256
  block.ln2/mul#1         mul          [2, 16, 32]     1,024
  block.ln2/add#1         add          [2, 16, 32]     1,024
  block/mul               mul          [2, 16, 128]    4,096
  block/mul#1             mul          [2, 16, 128]    4,096
  block/erf               erf          [2, 16, 128]    4,096
  block/add#1             add          [2, 16, 128]    4,096
  block/mul#2             mul          [2, 16, 128]    4,096""",
        )

    def test_gpt_block_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.5),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 45,120 B (range 24,576..65,664 B)
saved: 42,116 B in 15 activations (+10 static inputs)
recomputed: 34 ops, 329,984 FLOP, est. 21.1 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       24,576        93.1 us
       24,580        83.1 us
       24,708          73 us
       25,732        52.7 us
       29,828        42.4 us
       36,992        32.2 us
       49,280        21.9 us
       65,664        11.4 us
saved activations:
  name                                     op             shape           dtype    bytes
  block.ln1/mul                            mul            [2, 16, 32]     float32  4,096
  block.attn/clone                         clone          [2, 4, 16, 8]   float32  4,096
  block.attn/clone#1                       clone          [2, 4, 8, 16]   float32  4,096
  block.attn/scalar_tensor                 scalar_tensor  []              float32      4
  block.attn/amax                          amax           [2, 4, 16, 1]   float32    512
  block.attn/sum                           sum            [2, 4, 16, 1]   float32    512
  block.attn.attn_drop/native_dropout[0]   getitem        [2, 4, 16, 16]  float32  8,192
  block.attn.attn_drop/native_dropout[1]   getitem        [2, 4, 16, 16]  bool     2,048
  block.attn/clone#2                       clone          [2, 4, 16, 8]   float32  4,096
  block.attn/clone#3                       clone          [2, 16, 4, 8]   float32  4,096
  block.attn.resid_drop/native_dropout[1]  getitem        [2, 16, 32]     bool     1,024
  block.ln2/rsqrt                          rsqrt          [2, 16, 1]      float32    128
  block.ln2/mul                            mul            [2, 16, 32]     float32  4,096
  block.drop/native_dropout[1]             getitem        [2, 16, 32]     bool     1,024
  mul                                      mul            [2, 16, 32]     float32  4,096
recomputed (views, free, not listed: 17):
  name                    op           shape             flops
  block.ln1/mul#1         mul          [2, 16, 32]       1,024
  block.ln1/add#1         add          [2, 16, 32]       1,024
  block.attn/bmm          bmm          [8, 16, 16]      32,768
  block.attn/mul          mul          [2, 4, 16, 16]    2,048
  block.attn/bitwise_not  bitwise_not  [1, 1, 16, 16]      256
  block.attn/where        where        [2, 4, 16, 16]    2,048
  block.attn/sub          sub          [2, 4, 16, 16]    2,048
  block.attn/exp          exp          [2, 4, 16, 16]    2,048
  block.attn/div          div          [2, 4, 16, 16]    2,048
  block.ln2/mul#1         mul          [2, 16, 32]       1,024
  block.ln2/add#1         add          [2, 16, 32]       1,024
  block.fc/addmm          addmm        [32, 128]       262,144
  block/mul               mul          [2, 16, 128]      4,096
  block/mul#1             mul          [2, 16, 128]      4,096
  block/erf               erf          [2, 16, 128]      4,096
  block/add#1             add          [2, 16, 128]      4,096
  block/mul#2             mul          [2, 16, 128]      4,096""",
        )

    def test_gpt_block_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget=0.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 24,576 B (range 24,576..65,664 B)
saved: 24,576 B in 7 activations (+11 static inputs)
recomputed: 67 ops, 570,688 FLOP, est. 82.5 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       24,576        93.1 us
       24,580        83.1 us
       24,708          73 us
       25,732        52.7 us
       29,828        42.4 us
       36,992        32.2 us
       49,280        21.9 us
       65,664        11.4 us
saved activations:
  name                                     op       shape           dtype    bytes
  block.ln1/mul                            mul      [2, 16, 32]     float32  4,096
  block.attn.attn_drop/native_dropout[0]   getitem  [2, 4, 16, 16]  float32  8,192
  block.attn.attn_drop/native_dropout[1]   getitem  [2, 4, 16, 16]  bool     2,048
  block.attn.resid_drop/native_dropout[1]  getitem  [2, 16, 32]     bool     1,024
  block/add                                add      [2, 16, 32]     float32  4,096
  block.drop/native_dropout[1]             getitem  [2, 16, 32]     bool     1,024
  mul                                      mul      [2, 16, 32]     float32  4,096
recomputed (views, free, not listed: 36):
  name                      op             shape             flops
  block.ln1/mul#1           mul            [2, 16, 32]       1,024
  block.ln1/add#1           add            [2, 16, 32]       1,024
  block.attn.qkv/addmm      addmm          [32, 96]        196,608
  block.attn/clone          clone          [2, 4, 16, 8]     1,024
  block.attn/clone#1        clone          [2, 4, 8, 16]     1,024
  block.attn/bmm            bmm            [8, 16, 16]      32,768
  block.attn/mul            mul            [2, 4, 16, 16]    2,048
  block.attn/bitwise_not    bitwise_not    [1, 1, 16, 16]      256
  block.attn/scalar_tensor  scalar_tensor  []                    0
  block.attn/where          where          [2, 4, 16, 16]    2,048
  block.attn/amax           amax           [2, 4, 16, 1]     2,048
  block.attn/sub            sub            [2, 4, 16, 16]    2,048
  block.attn/exp            exp            [2, 4, 16, 16]    2,048
  block.attn/sum            sum            [2, 4, 16, 1]     2,048
  block.attn/div            div            [2, 4, 16, 16]    2,048
  block.attn/clone#2        clone          [2, 4, 16, 8]     1,024
  block.attn/bmm#1          bmm            [8, 16, 8]       32,768
  block.attn/clone#3        clone          [2, 16, 4, 8]     1,024
  block.ln2/var_mean        var_mean       -                 1,024
  block.ln2/add             add            [2, 16, 1]           32
  block.ln2/rsqrt           rsqrt          [2, 16, 1]           32
  block.ln2/sub             sub            [2, 16, 32]       1,024
  block.ln2/mul             mul            [2, 16, 32]       1,024
  block.ln2/mul#1           mul            [2, 16, 32]       1,024
  block.ln2/add#1           add            [2, 16, 32]       1,024
  block.fc/addmm            addmm          [32, 128]       262,144
  block/mul                 mul            [2, 16, 128]      4,096
  block/mul#1               mul            [2, 16, 128]      4,096
  block/erf                 erf            [2, 16, 128]      4,096
  block/add#1               add            [2, 16, 128]      4,096
  block/mul#2               mul            [2, 16, 128]      4,096""",
        )

    def test_gpt_block_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("gpt_block", memory_budget_bytes=60_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 60,000 B (range 24,576..65,664 B)
saved: 58,500 B in 16 activations (+9 static inputs)
recomputed: 33 ops, 67,840 FLOP, est. 10.4 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
       24,576        93.1 us
       24,580        83.1 us
       24,708          73 us
       25,732        52.7 us
       29,828        42.4 us
       36,992        32.2 us
       49,280        21.9 us
       65,664        11.4 us
saved activations:
  name                                     op             shape           dtype     bytes
  block.ln1/mul                            mul            [2, 16, 32]     float32   4,096
  block.attn/clone                         clone          [2, 4, 16, 8]   float32   4,096
  block.attn/clone#1                       clone          [2, 4, 8, 16]   float32   4,096
  block.attn/scalar_tensor                 scalar_tensor  []              float32       4
  block.attn/amax                          amax           [2, 4, 16, 1]   float32     512
  block.attn/sum                           sum            [2, 4, 16, 1]   float32     512
  block.attn.attn_drop/native_dropout[0]   getitem        [2, 4, 16, 16]  float32   8,192
  block.attn.attn_drop/native_dropout[1]   getitem        [2, 4, 16, 16]  bool      2,048
  block.attn/clone#2                       clone          [2, 4, 16, 8]   float32   4,096
  block.attn/clone#3                       clone          [2, 16, 4, 8]   float32   4,096
  block.attn.resid_drop/native_dropout[1]  getitem        [2, 16, 32]     bool      1,024
  block.ln2/rsqrt                          rsqrt          [2, 16, 1]      float32     128
  block.ln2/mul                            mul            [2, 16, 32]     float32   4,096
  block.fc/addmm                           addmm          [32, 128]       float32  16,384
  block.drop/native_dropout[1]             getitem        [2, 16, 32]     bool      1,024
  mul                                      mul            [2, 16, 32]     float32   4,096
recomputed (views, free, not listed: 17):
  name                    op           shape            flops
  block.ln1/mul#1         mul          [2, 16, 32]      1,024
  block.ln1/add#1         add          [2, 16, 32]      1,024
  block.attn/bmm          bmm          [8, 16, 16]     32,768
  block.attn/mul          mul          [2, 4, 16, 16]   2,048
  block.attn/bitwise_not  bitwise_not  [1, 1, 16, 16]     256
  block.attn/where        where        [2, 4, 16, 16]   2,048
  block.attn/sub          sub          [2, 4, 16, 16]   2,048
  block.attn/exp          exp          [2, 4, 16, 16]   2,048
  block.attn/div          div          [2, 4, 16, 16]   2,048
  block.ln2/mul#1         mul          [2, 16, 32]      1,024
  block.ln2/add#1         add          [2, 16, 32]      1,024
  block/mul               mul          [2, 16, 128]     4,096
  block/mul#1             mul          [2, 16, 128]     4,096
  block/erf               erf          [2, 16, 128]     4,096
  block/add#1             add          [2, 16, 128]     4,096
  block/mul#2             mul          [2, 16, 128]     4,096""",
        )

    def test_llama_block_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=1.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 51,840 B (range 8,704..51,840 B)
saved: 51,840 B in 11 activations (+11 static inputs)
recomputed: 31 ops, 18,176 FLOP, est. 36.4 ns
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        8,704         123 us
        8,960         103 us
       17,152        62.6 us
       21,120        52.4 us
       25,216          42 us
       29,312        31.8 us
       51,840        11.2 us
saved activations:
  name                                                  op       shape             dtype     bytes
  block.attn_norm/mul                                   mul      [2, 16, 32]       float32   4,096
  block.wv/mm                                           mm       [32, 32]          float32   4,096
  block/cat                                             cat      [2, 4, 16, 4, 2]  float32   4,096
  block/cat#1                                           cat      [2, 4, 16, 4, 2]  float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  getitem  [2, 4, 16, 8]     float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  getitem  [2, 4, 16]        float32     512
  block/add#2                                           add      [2, 16, 32]       float32   4,096
  block.mlp_norm/rsqrt                                  rsqrt    [2, 16, 1]        float32     128
  block.w_gate/mm                                       mm       [32, 88]          float32  11,264
  block.w_up/mm                                         mm       [32, 88]          float32  11,264
  mul                                                   mul      [2, 16, 32]       float32   4,096
recomputed (views, free, not listed: 22):
  name                   op     shape          flops
  block.attn_norm/mul#1  mul    [2, 16, 32]    1,024
  block/clone            clone  [2, 16, 4, 8]  1,024
  block.mlp_norm/mul     mul    [2, 16, 32]    1,024
  block.mlp_norm/mul#1   mul    [2, 16, 32]    1,024
  block/neg              neg    [2, 16, 88]    2,816
  block/exp              exp    [2, 16, 88]    2,816
  block/add#3            add    [2, 16, 88]    2,816
  block/div              div    [2, 16, 88]    2,816
  block/mul#8            mul    [2, 16, 88]    2,816""",
        )

    def test_llama_block_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.5),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 30,272 B (range 8,704..51,840 B)
saved: 29,312 B in 9 activations (+11 static inputs)
recomputed: 33 ops, 378,624 FLOP, est. 21.1 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        8,704         123 us
        8,960         103 us
       17,152        62.6 us
       21,120        52.4 us
       25,216          42 us
       29,312        31.8 us
       51,840        11.2 us
saved activations:
  name                                                  op       shape             dtype    bytes
  block.attn_norm/mul                                   mul      [2, 16, 32]       float32  4,096
  block.wv/mm                                           mm       [32, 32]          float32  4,096
  block/cat                                             cat      [2, 4, 16, 4, 2]  float32  4,096
  block/cat#1                                           cat      [2, 4, 16, 4, 2]  float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  getitem  [2, 4, 16, 8]     float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  getitem  [2, 4, 16]        float32    512
  block/add#2                                           add      [2, 16, 32]       float32  4,096
  block.mlp_norm/rsqrt                                  rsqrt    [2, 16, 1]        float32    128
  mul                                                   mul      [2, 16, 32]       float32  4,096
recomputed (views, free, not listed: 22):
  name                   op     shape            flops
  block.attn_norm/mul#1  mul    [2, 16, 32]      1,024
  block/clone            clone  [2, 16, 4, 8]    1,024
  block.mlp_norm/mul     mul    [2, 16, 32]      1,024
  block.mlp_norm/mul#1   mul    [2, 16, 32]      1,024
  block.w_gate/mm        mm     [32, 88]       180,224
  block/neg              neg    [2, 16, 88]      2,816
  block/exp              exp    [2, 16, 88]      2,816
  block/add#3            add    [2, 16, 88]      2,816
  block/div              div    [2, 16, 88]      2,816
  block.w_up/mm          mm     [32, 88]       180,224
  block/mul#8            mul    [2, 16, 88]      2,816""",
        )

    def test_llama_block_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget=0.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 8,704 B (range 8,704..51,840 B)
saved: 8,704 B in 3 activations (+11 static inputs)
recomputed: 79 ops, 834,432 FLOP, est. 113 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        8,704         123 us
        8,960         103 us
       17,152        62.6 us
       21,120        52.4 us
       25,216          42 us
       29,312        31.8 us
       51,840        11.2 us
saved activations:
  name                                                  op       shape          dtype    bytes
  primals_1                                             input    [2, 16, 32]    float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  getitem  [2, 4, 16, 8]  float32  4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  getitem  [2, 4, 16]     float32    512
recomputed (views, free, not listed: 38):
  name                   op     shape               flops
  block.attn_norm/pow    pow    [2, 16, 32]         1,024
  block.attn_norm/mean   mean   [2, 16, 1]          1,024
  block.attn_norm/add    add    [2, 16, 1]             32
  block.attn_norm/rsqrt  rsqrt  [2, 16, 1]             32
  block.attn_norm/mul    mul    [2, 16, 32]         1,024
  block.attn_norm/mul#1  mul    [2, 16, 32]         1,024
  block.wq/mm            mm     [32, 32]           65,536
  block.wk/mm            mm     [32, 32]           65,536
  block.wv/mm            mm     [32, 32]           65,536
  block/mul              mul    [2, 4, 16, 4]         512
  block/mul#1            mul    [2, 4, 16, 4]         512
  block/sub              sub    [2, 4, 16, 4]         512
  block/mul#2            mul    [2, 4, 16, 4]         512
  block/mul#3            mul    [2, 4, 16, 4]         512
  block/add              add    [2, 4, 16, 4]         512
  block/cat              cat    [2, 4, 16, 4, 2]        0
  block/mul#4            mul    [2, 4, 16, 4]         512
  block/mul#5            mul    [2, 4, 16, 4]         512
  block/sub#1            sub    [2, 4, 16, 4]         512
  block/mul#6            mul    [2, 4, 16, 4]         512
  block/mul#7            mul    [2, 4, 16, 4]         512
  block/add#1            add    [2, 4, 16, 4]         512
  block/cat#1            cat    [2, 4, 16, 4, 2]        0
  block/clone            clone  [2, 16, 4, 8]       1,024
  block.wo/mm            mm     [32, 32]           65,536
  block/add#2            add    [2, 16, 32]         1,024
  block.mlp_norm/pow     pow    [2, 16, 32]         1,024
  block.mlp_norm/mean    mean   [2, 16, 1]          1,024
  block.mlp_norm/add     add    [2, 16, 1]             32
  block.mlp_norm/rsqrt   rsqrt  [2, 16, 1]             32
  block.mlp_norm/mul     mul    [2, 16, 32]         1,024
  block.mlp_norm/mul#1   mul    [2, 16, 32]         1,024
  block.w_gate/mm        mm     [32, 88]          180,224
  block/neg              neg    [2, 16, 88]         2,816
  block/exp              exp    [2, 16, 88]         2,816
  block/add#3            add    [2, 16, 88]         2,816
  block/div              div    [2, 16, 88]         2,816
  block.w_up/mm          mm     [32, 88]          180,224
  block/mul#8            mul    [2, 16, 88]         2,816
  block.w_down/mm        mm     [32, 32]          180,224
  block/add#4            add    [2, 16, 32]         1,024""",
        )

    def test_llama_block_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("llama_block", memory_budget_bytes=60_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 60,000 B (range 8,704..51,840 B)
saved: 51,840 B in 11 activations (+11 static inputs)
recomputed: 31 ops, 18,176 FLOP, est. 36.4 ns
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        8,704         123 us
        8,960         103 us
       17,152        62.6 us
       21,120        52.4 us
       25,216          42 us
       29,312        31.8 us
       51,840        11.2 us
saved activations:
  name                                                  op       shape             dtype     bytes
  block.attn_norm/mul                                   mul      [2, 16, 32]       float32   4,096
  block.wv/mm                                           mm       [32, 32]          float32   4,096
  block/cat                                             cat      [2, 4, 16, 4, 2]  float32   4,096
  block/cat#1                                           cat      [2, 4, 16, 4, 2]  float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[0]  getitem  [2, 4, 16, 8]     float32   4,096
  block/_scaled_dot_product_flash_attention_for_cpu[1]  getitem  [2, 4, 16]        float32     512
  block/add#2                                           add      [2, 16, 32]       float32   4,096
  block.mlp_norm/rsqrt                                  rsqrt    [2, 16, 1]        float32     128
  block.w_gate/mm                                       mm       [32, 88]          float32  11,264
  block.w_up/mm                                         mm       [32, 88]          float32  11,264
  mul                                                   mul      [2, 16, 32]       float32   4,096
recomputed (views, free, not listed: 22):
  name                   op     shape          flops
  block.attn_norm/mul#1  mul    [2, 16, 32]    1,024
  block/clone            clone  [2, 16, 4, 8]  1,024
  block.mlp_norm/mul     mul    [2, 16, 32]    1,024
  block.mlp_norm/mul#1   mul    [2, 16, 32]    1,024
  block/neg              neg    [2, 16, 88]    2,816
  block/exp              exp    [2, 16, 88]    2,816
  block/add#3            add    [2, 16, 88]    2,816
  block/div              div    [2, 16, 88]    2,816
  block/mul#8            mul    [2, 16, 88]    2,816""",
        )

    def test_cnn_budget_1(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=1.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 1 -> 88,426 B (range 6,160..88,426 B)
saved: 88,426 B in 16 activations (+8 static inputs)
recomputed: 13 ops, 24,576 FLOP, est. 49.2 ns
note: unbudgeted optimum fits the budget
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         155 us
        6,166         135 us
        6,170         125 us
        6,186         105 us
        6,378        74.1 us
        6,442        63.8 us
        6,506        53.8 us
        6,570        43.8 us
       39,338        22.1 us
       55,722          12 us
       88,426        11.9 us
saved activations:
  name                        op                    shape           dtype     bytes
  primals_2                   input                 [2, 3, 16, 16]  float32   6,144
  bn/rsqrt                    rsqrt                 [1, 8, 1, 1]    float32      32
  relu                        relu                  [2, 8, 16, 16]  float32  16,384
  blocks.0.bn1/rsqrt          rsqrt                 [1, 8, 1, 1]    float32      32
  blocks.0/relu               relu                  [2, 8, 16, 16]  float32  16,384
  blocks.0.conv2/convolution  convolution           [2, 8, 16, 16]  float32  16,384
  blocks.0.bn2/var_mean[1]    getitem               [1, 8, 1, 1]    float32      32
  blocks.0.bn2/rsqrt          rsqrt                 [1, 8, 1, 1]    float32      32
  mean                        mean                  [2, 8, 1, 1]    float32      64
  sub#1                       sub                   [2, 10]         float32      80
  scalar_tensor#1             scalar_tensor         []              float32       4
  convert_element_type        convert_element_type  []              float32       4
  ne#1                        ne                    [2, 1]          bool          2
  scatter                     scatter               [2, 10]         float32      80
  sub#6                       sub                   [2, 8, 16, 16]  float32  16,384
  sub#9                       sub                   [2, 8, 16, 16]  float32  16,384
recomputed (views, free, not listed: 7):
  name                op    shape           flops
  blocks.0.bn2/sub    sub   [2, 8, 16, 16]  4,096
  blocks.0.bn2/mul    mul   [2, 8, 16, 16]  4,096
  blocks.0.bn2/mul#6  mul   [2, 8, 16, 16]  4,096
  blocks.0.bn2/add#4  add   [2, 8, 16, 16]  4,096
  blocks.0/add        add   [2, 8, 16, 16]  4,096
  blocks.0/relu#1     relu  [2, 8, 16, 16]  4,096""",
        )

    def test_cnn_budget_0_5(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=0.5),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0.5 -> 47,293 B (range 6,160..88,426 B)
saved: 39,338 B in 15 activations (+10 static inputs)
recomputed: 34 ops, 286,720 FLOP, est. 11.3 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         155 us
        6,166         135 us
        6,170         125 us
        6,186         105 us
        6,378        74.1 us
        6,442        63.8 us
        6,506        53.8 us
        6,570        43.8 us
       39,338        22.1 us
       55,722          12 us
       88,426        11.9 us
saved activations:
  name                        op                    shape           dtype     bytes
  primals_2                   input                 [2, 3, 16, 16]  float32   6,144
  bn/var_mean[1]              getitem               [1, 8, 1, 1]    float32      32
  bn/rsqrt                    rsqrt                 [1, 8, 1, 1]    float32      32
  blocks.0.conv1/convolution  convolution           [2, 8, 16, 16]  float32  16,384
  blocks.0.bn1/var_mean[1]    getitem               [1, 8, 1, 1]    float32      32
  blocks.0.bn1/rsqrt          rsqrt                 [1, 8, 1, 1]    float32      32
  blocks.0.conv2/convolution  convolution           [2, 8, 16, 16]  float32  16,384
  blocks.0.bn2/var_mean[1]    getitem               [1, 8, 1, 1]    float32      32
  blocks.0.bn2/rsqrt          rsqrt                 [1, 8, 1, 1]    float32      32
  mean                        mean                  [2, 8, 1, 1]    float32      64
  scalar_tensor#1             scalar_tensor         []              float32       4
  convert_element_type        convert_element_type  []              float32       4
  ne#1                        ne                    [2, 1]          bool          2
  scatter                     scatter               [2, 10]         float32      80
  exp#1                       exp                   [2, 10]         float32      80
recomputed (views, free, not listed: 17):
  name                op           shape             flops
  stem/convolution    convolution  [2, 8, 16, 16]  221,184
  bn/sub              sub          [2, 8, 16, 16]    4,096
  bn/mul              mul          [2, 8, 16, 16]    4,096
  bn/mul#6            mul          [2, 8, 16, 16]    4,096
  bn/add#4            add          [2, 8, 16, 16]    4,096
  relu                relu         [2, 8, 16, 16]    4,096
  blocks.0.bn1/sub    sub          [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul    mul          [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6  mul          [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4  add          [2, 8, 16, 16]    4,096
  blocks.0/relu       relu         [2, 8, 16, 16]    4,096
  blocks.0.bn2/sub    sub          [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul    mul          [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6  mul          [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4  add          [2, 8, 16, 16]    4,096
  blocks.0/add        add          [2, 8, 16, 16]    4,096
  blocks.0/relu#1     relu         [2, 8, 16, 16]    4,096""",
        )

    def test_cnn_budget_0(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget=0.0),
            """\
solver: milp (optimal), device: cpu
budget: ratio 0 -> 6,160 B (range 6,160..88,426 B)
saved: 6,160 B in 2 activations (+11 static inputs)
recomputed: 64 ops, 1,483,227 FLOP, est. 135 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         155 us
        6,166         135 us
        6,170         125 us
        6,186         105 us
        6,378        74.1 us
        6,442        63.8 us
        6,506        53.8 us
        6,570        43.8 us
       39,338        22.1 us
       55,722          12 us
       88,426        11.9 us
saved activations:
  name        op     shape           dtype    bytes
  primals_2   input  [2, 3, 16, 16]  float32  6,144
  primals_22  input  [2]             int64       16
recomputed (views, free, not listed: 23):
  name                        op                    shape             flops
  stem/convolution            convolution           [2, 8, 16, 16]  221,184
  bn/var_mean                 var_mean              -                 4,096
  bn/add#1                    add                   [1, 8, 1, 1]          8
  bn/rsqrt                    rsqrt                 [1, 8, 1, 1]          8
  bn/sub                      sub                   [2, 8, 16, 16]    4,096
  bn/mul                      mul                   [2, 8, 16, 16]    4,096
  bn/mul#6                    mul                   [2, 8, 16, 16]    4,096
  bn/add#4                    add                   [2, 8, 16, 16]    4,096
  relu                        relu                  [2, 8, 16, 16]    4,096
  blocks.0.conv1/convolution  convolution           [2, 8, 16, 16]  589,824
  blocks.0.bn1/var_mean       var_mean              -                 4,096
  blocks.0.bn1/add#1          add                   [1, 8, 1, 1]          8
  blocks.0.bn1/rsqrt          rsqrt                 [1, 8, 1, 1]          8
  blocks.0.bn1/sub            sub                   [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul            mul                   [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6          mul                   [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4          add                   [2, 8, 16, 16]    4,096
  blocks.0/relu               relu                  [2, 8, 16, 16]    4,096
  blocks.0.conv2/convolution  convolution           [2, 8, 16, 16]  589,824
  blocks.0.bn2/var_mean       var_mean              -                 4,096
  blocks.0.bn2/add#1          add                   [1, 8, 1, 1]          8
  blocks.0.bn2/rsqrt          rsqrt                 [1, 8, 1, 1]          8
  blocks.0.bn2/sub            sub                   [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul            mul                   [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6          mul                   [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4          add                   [2, 8, 16, 16]    4,096
  blocks.0/add                add                   [2, 8, 16, 16]    4,096
  blocks.0/relu#1             relu                  [2, 8, 16, 16]    4,096
  mean                        mean                  [2, 8, 1, 1]      4,096
  head/addmm                  addmm                 [2, 10]             320
  amax                        amax                  [2, 1]               20
  sub                         sub                   [2, 10]              20
  exp                         exp                   [2, 10]              20
  sum                         sum                   [2, 1]               20
  log                         log                   [2, 1]                2
  sub#1                       sub                   [2, 10]              20
  ne                          ne                    [2]                   2
  scalar_tensor               scalar_tensor         []                    0
  scalar_tensor#1             scalar_tensor         []                    0
  sum#1                       sum                   []                    2
  convert_element_type        convert_element_type  []                    1""",
        )

    def test_cnn_absolute(self) -> None:
        self.assertExpectedInline(
            report_text("cnn", memory_budget_bytes=20_000),
            """\
solver: milp (optimal), device: cpu
budget: absolute -> 20,000 B (range 6,160..88,426 B)
saved: 6,570 B in 13 activations (+10 static inputs)
recomputed: 36 ops, 1,466,368 FLOP, est. 33.6 us
note: MILP optimal
frontier (what other budgets buy):
  saved bytes  est. overhead
        6,160         155 us
        6,166         135 us
        6,170         125 us
        6,186         105 us
        6,378        74.1 us
        6,442        63.8 us
        6,506        53.8 us
        6,570        43.8 us
       39,338        22.1 us
       55,722          12 us
       88,426        11.9 us
saved activations:
  name                      op                    shape           dtype    bytes
  primals_2                 input                 [2, 3, 16, 16]  float32  6,144
  bn/var_mean[1]            getitem               [1, 8, 1, 1]    float32     32
  bn/rsqrt                  rsqrt                 [1, 8, 1, 1]    float32     32
  blocks.0.bn1/var_mean[1]  getitem               [1, 8, 1, 1]    float32     32
  blocks.0.bn1/rsqrt        rsqrt                 [1, 8, 1, 1]    float32     32
  blocks.0.bn2/var_mean[1]  getitem               [1, 8, 1, 1]    float32     32
  blocks.0.bn2/rsqrt        rsqrt                 [1, 8, 1, 1]    float32     32
  mean                      mean                  [2, 8, 1, 1]    float32     64
  scalar_tensor#1           scalar_tensor         []              float32      4
  convert_element_type      convert_element_type  []              float32      4
  ne#1                      ne                    [2, 1]          bool         2
  scatter                   scatter               [2, 10]         float32     80
  exp#1                     exp                   [2, 10]         float32     80
recomputed (views, free, not listed: 17):
  name                        op           shape             flops
  stem/convolution            convolution  [2, 8, 16, 16]  221,184
  bn/sub                      sub          [2, 8, 16, 16]    4,096
  bn/mul                      mul          [2, 8, 16, 16]    4,096
  bn/mul#6                    mul          [2, 8, 16, 16]    4,096
  bn/add#4                    add          [2, 8, 16, 16]    4,096
  relu                        relu         [2, 8, 16, 16]    4,096
  blocks.0.conv1/convolution  convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn1/sub            sub          [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul            mul          [2, 8, 16, 16]    4,096
  blocks.0.bn1/mul#6          mul          [2, 8, 16, 16]    4,096
  blocks.0.bn1/add#4          add          [2, 8, 16, 16]    4,096
  blocks.0/relu               relu         [2, 8, 16, 16]    4,096
  blocks.0.conv2/convolution  convolution  [2, 8, 16, 16]  589,824
  blocks.0.bn2/sub            sub          [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul            mul          [2, 8, 16, 16]    4,096
  blocks.0.bn2/mul#6          mul          [2, 8, 16, 16]    4,096
  blocks.0.bn2/add#4          add          [2, 8, 16, 16]    4,096
  blocks.0/add                add          [2, 8, 16, 16]    4,096
  blocks.0/relu#1             relu         [2, 8, 16, 16]    4,096""",
        )
