"""Attention as users write it (hand-written multi-head ``q @ k.transpose(-2, -1)``, ``nn.MultiheadAttention``
in its forms, ``F.scaled_dot_product_attention`` with a mask, keys shared by query heads): int8 end to end, one
NPU partition with BATCH_MATMUL and SOFTMAX over the last dim, TFLM's numbers on the partition; int8 on the
CPU-only target."""

from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from edge_graphs import aten_passes
from program_checks import check_case

from imxrt.npu.compilers.reference import litert_ops
from imxrt.pipeline import CompileOptions, compile

pytestmark = pytest.mark.slow  # every test here compiles models

DIM, HEADS, TOKENS = 32, 4, 10


class HandWritten(nn.Module):
    """timm's ViT attention: one qkv projection, heads split by a rank-5 permute, rank-4 matmuls."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(DIM, DIM * 3), nn.Linear(DIM, DIM)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        attention = ((q @ k.transpose(-2, -1)) * (c // HEADS) ** -0.5).softmax(dim=-1)
        return x + self.proj((attention @ v).transpose(1, 2).reshape(b, n, c))


class Multihead(nn.Module):
    def __init__(self, need_weights=False, batch_first=True):
        super().__init__()
        self.attention = nn.MultiheadAttention(DIM, HEADS, batch_first=batch_first)
        self.need_weights, self.batch_first = need_weights, batch_first

    def forward(self, x):
        y = x if self.batch_first else x.transpose(0, 1)
        y = self.attention(y, y, y, need_weights=self.need_weights)[0]
        return x + (y if self.batch_first else y.transpose(0, 1))


class MaskedSdpa(nn.Module):
    """A constant additive mask (a relative-position bias)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, DIM * 3)
        self.register_buffer("bias", torch.randn(1, 1, TOKENS, TOKENS))

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(1, TOKENS, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias).transpose(1, 2).reshape(1, TOKENS, DIM)


class SharedKeys(nn.Module):
    """Keys and values shared by query heads: multi-query attention as MobileNetV4's mobile MQA passes it to
    SDPA (one key head [B, 1, S, E] broadcast over the query heads), or grouped-query attention (``enable_gqa``,
    two key heads for four query heads); optionally a constant mask per query head."""

    def __init__(self, key_heads=1, mask=False):
        super().__init__()
        self.key_heads = key_heads
        self.q, self.kv = nn.Linear(DIM, DIM), nn.Linear(DIM, 2 * key_heads * (DIM // HEADS))
        self.register_buffer("bias", torch.randn(1, HEADS, TOKENS, TOKENS) if mask else None)

    def forward(self, x):
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, HEADS, c // HEADS).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, self.key_heads, c // HEADS).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias, enable_gqa=self.key_heads > 1)
        return x + o.transpose(1, 2).reshape(b, n, c)


FORMS = {
    "hand_written": HandWritten,
    "multihead": Multihead,
    "multihead_weights": lambda: Multihead(need_weights=True),
    "multihead_sequence_first": lambda: Multihead(batch_first=False),
    "sdpa_mask": MaskedSdpa,
    "multi_query": SharedKeys,
    "multi_query_mask": lambda: SharedKeys(mask=True),
    "grouped_query": lambda: SharedKeys(key_heads=2),
    "grouped_query_mask": lambda: SharedKeys(key_heads=2, mask=True),
}


def _compile(form, target):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, TOKENS, DIM, generator=generator),) for _ in range(6)]
    model = FORMS[form]().eval()
    return model, compile(model, cal[0], target, cal, CompileOptions(show_progress=False)), cal


@pytest.mark.parametrize("form", sorted(FORMS))
def test_attention_is_one_npu_partition_with_batch_matmul_and_softmax(form):
    model, result, cal = _compile(form, "imxrt700")
    summary = result.report["summary"]
    assert (summary["partitions"], summary["ops_cpu_float"]) == (1, 0)
    ops = Counter(op for tflite in result.partitions for op in litert_ops(tflite))
    assert ops["BATCH_MATMUL"] == 2 and ops["SOFTMAX"] == 1, ops
    on_cpu = [op["op"] for op in result.report["ops"] if op["placement"] == "cpu"
              and "quantize" not in op["op"]]
    assert on_cpu == []
    for inputs in cal[:2]:
        check_case(result, inputs, model)


@pytest.mark.parametrize("form", ["hand_written", "multihead"])
def test_attention_is_int8_on_the_cpu_target(form):
    model, result, cal = _compile(form, "imxrt700-cpu")
    assert result.report["summary"]["ops_cpu_float"] == 0
    check_case(result, cal[1], model)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_attention_rewrites_compute_the_model(form):
    torch.manual_seed(0)
    model = FORMS[form]().eval()
    x = torch.randn(1, TOKENS, DIM)
    graph = aten_passes(torch.export.export(model, (x,), strict=False).module(check_guards=False))
    targets = {n.target for n in graph.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.scaled_dot_product_attention.default not in targets
    torch.testing.assert_close(graph(x), model(x), atol=1e-5, rtol=1e-5)


def test_batch_matmul_operands_are_quantized_at_zero_point_0():
    """Neutron's BATCH_MATMUL takes zero point 0: q, k, v are quantized symmetric, the softmax's fixed
    range (zero point -128) is rescaled to one."""
    _, result, _ = _compile("hand_written", "imxrt700")
    bmms = [n for n in result.quantized.graph.nodes if n.target == torch.ops.aten.bmm.default]
    assert len(bmms) == 2
    for bmm in bmms:
        for operand in bmm.args[:2]:
            assert "dequantize_per_tensor" in str(operand.target) and operand.args[2] == 0, operand.args


class ClassToken(nn.Module):
    """A ViT's class token: a parameter expanded over the batch and joined before the patch tokens."""

    def __init__(self):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, 1, DIM))
        self.embed, self.head = nn.Linear(DIM, DIM), nn.Linear(DIM, 4)

    def forward(self, x):
        tokens = torch.cat([self.token.expand(x.shape[0], -1, -1), self.embed(x)], dim=1)
        return self.head(tokens)


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_class_token_joined_to_the_tokens_is_int8(target):
    """The expanded token is a constant once values computed from constants alone are folded; the cat of
    it and the patch tokens had no int8 annotation (its first input was a constant) and ran in float."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, TOKENS, DIM, generator=generator),) for _ in range(6)]
    model = ClassToken().eval()
    result = compile(model, cal[0], target, cal, CompileOptions(show_progress=False))
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert result.report["summary"]["partitions"] == 1
    for inputs in cal[:2]:
        check_case(result, inputs, model)
