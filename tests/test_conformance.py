"""A fast, representative subset of the conformance suite (``python benchmarks/conformance.py`` runs all of
ExecuTorch's own NXP and Cortex-M test models, each in a child process): upstream Cortex-M test cases, each
on both targets, with the checks the suite makes. Every case compiles, or is refused with an ImxrtError;
every NPU partition gives TFLM's numbers on the int8 tensors it received; the ``.pte`` gives the quantized
program's numbers within the README's rounding bound; and, where a case is listed as int8, no float op is
left on the CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here compiles upstream test models

CONFORMANCE = Path(__file__).resolve().parent.parent / "benchmarks" / "conformance.py"
TARGETS = ("imxrt700", "imxrt700-cpu")
# Upstream case -> whether it must run with no float op here (upstream's Cortex-M backend lowers it to int8).
SUBSET = {
    "cortex_m/test_activation::test_cases[conv2d_relu6_stride]": True,
    "cortex_m/test_add::test_cases[tensor_tensor]": True,
    "cortex_m/test_avg_pool2d::test_cases[avgpool_3x3_s2_pad1_countinc]": True,
    "cortex_m/test_batch_matmul::test_cases[bmm_small]": True,
    "cortex_m/test_activation_quant::test_cases[silu_inplace]": True,
    "cortex_m/test_maximum::test_cases[broadcast_scalar]": True,
    "cortex_m/test_mul::test_cases[broadcast_channels_1]": True,
    "cortex_m/test_sub::test_cases[rank_4_channels_last]": True,
    "cortex_m/test_conv::test_cases[depthwise_conv2d_multiplier]": True,
    "cortex_m/test_conv_transpose::test_cases[conv_transpose2d_depthwise]": False,
    "cortex_m/test_conv_transpose::test_cases[conv_transpose2d_output_padding_1]": True,
    "cortex_m/test_deep_autoencoder::test_cases[deep_autoencoder]": True,
    "cortex_m/test_linear::test_cases[linear_rank3_neg]": True,
    "cortex_m/test_max_pool2d::test_cases[maxpool_3x3_s2_pad1]": True,
    "cortex_m/test_mul::test_cases[self_rank_4_small]": True,
    "cortex_m/test_nn_modules::test_cases[conv_bn_relu]": True,
    "cortex_m/test_softmax::test_cases[rank2]": True,
    "cortex_m/test_torch_functions::test_cases[inverted_residual]": True,
    "cortex_m/test_transpose::test_cases[transpose_1_2]": True,
    "cortex_m/test_div::test_cases[tensor_rank_4]": True,
    "cortex_m/test_avg_pool2d::ceil_mode_test_cases[avgpool_3x3_s2_pad1_countinc_ceil_mode]": True,
    "cortex_m/test_max_pool2d::fallback_test_cases[maxpool_dilation]": True,
    "cortex_m/test_batch_matmul::matmul_test_cases[matmul_rank4]": True,
    "cortex_m/test_activation::test_cases[standalone_clamp_tensor]": True,
    "cortex_m/test_activation_quant::test_cases[rsqrt]": True,
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The subset through benchmarks/conformance.py in a process of its own (each case in a forked child
    there): collecting the cases imports ExecuTorch's cortex_m test modules, whose op module takes the
    cortex_m definitions over for the rest of the process it runs in."""
    out = tmp_path_factory.mktemp("conformance") / "records.json"
    command = [sys.executable, str(CONFORMANCE), "--source", "cortex_m", "--jobs", "2", "--json", str(out),
               *[f"--target={t}" for t in TARGETS], *[f"--case={name}" for name in SUBSET]]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    found = {(r["case"], r["target"]): r for r in json.loads(out.read_text())}
    assert {name for name, _ in found} == set(SUBSET), f"upstream cases missing: {set(SUBSET) - set(found)}"
    return found


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(SUBSET))
def test_upstream_case(records, name, target):
    record = records[(name, target)]
    assert record["status"] in ("compiled", "refused"), record.get("traceback", record.get("message"))
    if record["status"] == "refused":
        pytest.fail(f"refused: {record['message']}")
    assert record["problems"] == []
    assert record["tflm_exact"] and record["pte_matches"]
    if SUBSET[name]:
        assert record["int8_only"], "a float op is left on the CPU"
