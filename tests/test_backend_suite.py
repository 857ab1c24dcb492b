"""ExecuTorch's backend test suite through imxrt's flows (``tests/backend_suite_flow.py``).

A fixed sample of the suite's operator tests runs through ``benchmarks/backend_suite.py`` (each test function in a
child process, every subtest, the suite's own reference and tolerances) on both targets: a wrong output, an internal
error, a crash or a timeout fails, and each sampled case must end as listed (``pass``, or a refusal whose reason the
listing names). ``python benchmarks/backend_suite.py`` runs all of it. The plugin itself is checked the way a user
loads it: pytest collects and runs the suite's cases for imxrt's flows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles the suite's cases in child processes

HERE = Path(__file__).resolve().parent
BENCHMARK = HERE.parent / "benchmarks" / "backend_suite.py"
FLOWS = ("imxrt700", "imxrt700_cpu")
# Case -> how each of its subtests ends on both flows (one outcome for all, or one per subtest). One or two test
# functions per op family, with the cases that once failed: integer and boolean inputs, a tuple input, pools the stock
# runtime has no kernel for, PReLU, tuple results, float64, 3-D convolutions (refused: no kernel runs them).
SAMPLE = {
    "operators/test_add::test_add_f32_alpha": "pass",
    "operators/test_conv2d::test_conv2d_depthwise": "pass",
    "operators/test_linear::test_linear_unbatched": "pass",
    "operators/test_sigmoid::test_sigmoid_f32_multi_dim": "pass",
    "operators/test_cat::test_cat_negative_dim": "pass",
    "operators/test_upsample_bilinear2d::test_upsample_bilinear2d_scale_factors": "pass",
    "operators/test_lstm::test_lstm_dtype[float32]": "pass",
    "operators/test_embedding::test_embedding_sizes": "pass",
    "operators/test_masked_fill::test_masked_fill_broadcast": "pass",
    "operators/test_index_put::test_index_put_two_indices": "pass",
    "operators/test_adaptive_maxpool2d::test_adaptive_maxpool2d_output_size": "pass",
    "operators/test_maxpool3d::test_maxpool3d_stride": "pass",
    "operators/test_prelu::test_prelu_f32_per_channel_parameter": "pass",
    "operators/test_median::test_median_dim": "pass",
    "operators/test_median::test_median_with_indices": "refused at quantize",
    "operators/test_mean::test_mean_output_dtype": ("pass", "refused at quantize", "refused at quantize"),
    "operators/test_conv3d::test_conv3d_basic": "refused at lower",
}
BAD = ("wrong output", "internal error", "timeout or crash")


def _run_sample(tmp_path: Path) -> list[dict]:
    cases, report = tmp_path / "cases.txt", tmp_path / "records.json"
    cases.write_text("\n".join(SAMPLE) + "\n")
    done = subprocess.run([sys.executable, str(BENCHMARK), "--flow", *FLOWS, "--cases", str(cases), "--jobs", "2",
                           "--json", str(report)], capture_output=True, text=True, timeout=1200)
    assert report.exists(), done.stdout + done.stderr
    return json.loads(report.read_text())


def test_a_sample_of_the_suite_passes_or_is_refused_as_listed(tmp_path):
    records = _run_sample(tmp_path)
    bad = [f"{r['flow']} {r['case']}: {r['outcome']}: {r['message']}" for r in records if r["outcome"] in BAD]
    assert not bad, "\n".join(bad)
    outcomes = defaultdict(list)
    for record in sorted(records, key=lambda r: r.get("subtest", 0)):
        outcomes[record["case"], record["flow"]].append(record["outcome"])
    assert set(outcomes) == {(case, flow) for case in SAMPLE for flow in FLOWS}  # every sampled test ran
    unexpected = [f"{flow} {case}: {got} (listed: {SAMPLE[case]})" for (case, flow), got in sorted(outcomes.items())
                  if tuple(got) != (SAMPLE[case] if isinstance(SAMPLE[case], tuple) else (SAMPLE[case],) * len(got))]
    assert not unexpected, "\n".join(unexpected)


def test_the_plugin_registers_imxrt_flows_for_pytest(tmp_path):
    """``-p backend_suite_flow`` adds both flows to the suite's registry before its conftest parametrizes the
    cases: the suite's own test runs for them under pytest and passes."""
    import executorch.backends.test.suite as suite

    relu = Path(suite.__file__).parent / "operators" / "test_relu.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "backend_suite_flow", "-p", "no:cacheprovider",
                           "-m", "flow_imxrt700 or flow_imxrt700_cpu", "-k", "test_relu_f32_single_dim", str(relu),
                           "-c", os.devnull, "--rootdir", str(tmp_path), "-q", "-rA"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED ::test_relu_f32_single_dim[imxrt700]" in done.stdout
    assert "PASSED ::test_relu_f32_single_dim[imxrt700_cpu]" in done.stdout
