"""A fast, representative subset of the conformance suite (``python benchmarks/conformance.py`` runs all of
ExecuTorch's own NXP and Cortex-M test models, each in a child process): upstream Cortex-M test cases, each
on both targets, with the checks the suite makes. Every case compiles, or is refused with an ImxrtError;
every NPU partition gives TFLM's numbers on the int8 tensors it received; the ``.pte`` gives the quantized
program's numbers within the README's rounding bound; and, where a case is listed as int8, no float op is
left on the CPU."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _conformance_cases  # noqa: E402
import conformance  # noqa: E402

# Upstream case -> whether it must run with no float op here (upstream's Cortex-M backend lowers it to int8).
SUBSET = {
    "cortex_m/test_activation::test_cases[conv2d_relu6_stride]": True,
    "cortex_m/test_add::test_cases[tensor_tensor]": True,
    "cortex_m/test_avg_pool2d::test_cases[avgpool_3x3_s2_pad1_countinc]": True,
    "cortex_m/test_batch_matmul::test_cases[bmm_small]": True,
    "cortex_m/test_conv::test_cases[conv1d]": True,
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
}


@pytest.fixture(scope="module")
def cases():
    found = {case.name: case for case in _conformance_cases.cortex_m_cases() if case.name in SUBSET}
    assert sorted(found) == sorted(SUBSET), f"upstream cases missing: {sorted(set(SUBSET) - set(found))}"
    return found


@pytest.mark.parametrize("target", conformance.TARGETS)
@pytest.mark.parametrize("name", sorted(SUBSET))
def test_upstream_case(cases, name, target):
    record = conformance.run_case(cases[name], target)
    assert record["status"] in ("compiled", "refused"), record.get("traceback", record.get("message"))
    if record["status"] == "refused":
        pytest.fail(f"refused: {record['message']}")
    assert record["problems"] == []
    assert record["tflm_exact"] and record["pte_matches"]
    if SUBSET[name]:
        assert record["int8_only"], "a float op is left on the CPU"
