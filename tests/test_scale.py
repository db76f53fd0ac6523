"""``simdist scale``: the alpha-beta model, the fit, and a small real run."""

from __future__ import annotations

import importlib.util
import json
import math
import os

import pytest

from simdist import cli
from simdist.bench import alpha_beta, scaling
from simdist._errors import InvalidValue


def test_ring_allreduce_is_2_d_minus_1_latencies_plus_2_d_minus_1_over_d_bandwidth_terms():
    alpha, beta, n = 5e-6, 12.5e9, 1 << 20
    for d in (2, 3, 8, 1024):
        want = 2 * (d - 1) * alpha + 2 * (d - 1) / d * n / beta
        assert alpha_beta.allreduce_seconds(n, d, alpha, beta, "ring") == pytest.approx(want)


def test_recursive_doubling_and_tree_take_log2_rounds_of_a_whole_message():
    alpha, beta, n = 5e-6, 12.5e9, 4096
    for d, rounds in ((2, 1), (4, 2), (5, 3), (1024, 10)):
        one = alpha + n / beta
        assert alpha_beta.allreduce_seconds(n, d, alpha, beta, "recursive_doubling") == pytest.approx(rounds * one)
        assert alpha_beta.allreduce_seconds(n, d, alpha, beta, "tree") == pytest.approx(2 * rounds * one)


def test_one_device_needs_no_allreduce_and_scales_linearly_from_itself():
    rows = alpha_beta.project(1e-3, [100, 200], 32, [1, 2, 4], 5e-6, 1e9, "ring")
    assert rows[0]["allreduce_s"] == 0 and rows[0]["efficiency"] == 1.0
    assert rows[0]["throughput"] == pytest.approx(32 / 1e-3)
    for r in rows[1:]:
        step = 1e-3 + sum(alpha_beta.allreduce_seconds(n, r["devices"], 5e-6, 1e9) for n in (100, 200))
        assert r["step_s"] == pytest.approx(step)
        assert r["throughput"] == pytest.approx(r["devices"] * 32 / step)
        assert r["efficiency"] == pytest.approx(1e-3 / step)


def test_unknown_algorithm_is_refused_by_name():
    with pytest.raises(InvalidValue, match="algorithm='butterfly'"):
        alpha_beta.allreduce_seconds(8, 2, 1e-6, 1e9, "butterfly")


@pytest.mark.parametrize("algorithm", alpha_beta.ALGORITHMS)
def test_fit_recovers_alpha_and_beta_from_synthetic_times(algorithm):
    alpha, beta = 7e-6, 3e9
    samples = [(d, b, alpha_beta.allreduce_seconds(b, d, alpha, beta, algorithm))
               for d in (2, 4) for b in (8, 16 << 10, 256 << 10, 1 << 20)]
    fit = alpha_beta.fit_alpha_beta(samples, algorithm)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-9)
    assert fit["beta_Bps"] == pytest.approx(beta, rel=1e-9)
    assert fit["max_rel_error"] < 1e-9


def test_fit_keeps_alpha_non_negative():
    samples = [(2, b, b / 1e9 - 1e-7) for b in (1 << 20, 2 << 20, 4 << 20)]  # a negative intercept
    fit = alpha_beta.fit_alpha_beta(samples)
    assert fit["alpha_s"] == 0 and math.isfinite(fit["beta_Bps"]) and fit["beta_Bps"] > 0


def test_gradient_bytes_are_the_parameter_sizes():
    assert scaling.gradient_tensors(64) == {"W1": 64 * 64 * 4, "b1": 64 * 4, "W2": 64 * 10 * 4, "b2": 10 * 4}
    assert sum(scaling.gradient_tensors(8, "float64").values()) == (64 * 8 + 8 + 8 * 10 + 10) * 8


SMALL = ["scale", "--measure-n", "1,2", "--fit-n", "2", "--devices", "1,2,8,1024", "--steps", "20",
         "--repeats", "1"]


@pytest.mark.slow
def test_small_run_writes_json_with_the_schema(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert cli.main(SMALL + ["--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) == {"assumptions", "parameters", "projection", "checks", "machine"}
    assert report["assumptions"] and all(isinstance(a, str) for a in report["assumptions"])
    p = report["parameters"]
    assert p["compute_s"] > 0 and p["alpha_s"] >= 0 and p["beta_Bps"] > 0
    assert p["gradient_bytes"] == sum(scaling.gradient_tensors(64).values())
    assert [r["devices"] for r in report["projection"]] == [1, 2, 8, 1024]
    assert [c["devices"] for c in report["checks"]] == [1, 2]
    for c in report["checks"]:
        assert c["measured_step_s"] > 0 and c["ratio"] == pytest.approx(c["measured_step_s"] / c["model_step_s"])
    text = capsys.readouterr().out
    assert "efficiency" in text and "measured/model" in text and "assumptions:" in text


def test_given_alpha_and_beta_skip_the_fit(tmp_path):
    out = tmp_path / "scale.json"
    argv = ["scale", "--measure-n", "", "--alpha-us", "5", "--beta-GBps", "12.5", "--devices", "1,4",
            "--steps", "20", "--repeats", "1", "--json", str(out)]
    assert cli.main(argv) == 0
    p = json.loads(out.read_text())["parameters"]
    assert p["alpha_s"] == pytest.approx(5e-6) and p["beta_Bps"] == pytest.approx(12.5e9)
    assert p["fit"] is None and p["alpha_beta_source"] == "given"


def test_bad_fit_sizes_exit_2_with_the_fix(capsys):
    assert cli.main(["scale", "--fit-n", "1", "--measure-n", ""]) == 2
    assert "--alpha-us" in capsys.readouterr().err


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must test --plot, but matplotlib is missing: pip install 'simdist[bench]'")
        pytest.skip("matplotlib is not installed: pip install 'simdist[bench]'")
    png = tmp_path / "scale.png"
    argv = ["scale", "--measure-n", "1", "--alpha-us", "5", "--beta-GBps", "12.5", "--devices", "1,2,4",
            "--steps", "20", "--repeats", "1", "--plot", str(png)]
    assert cli.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compute_measurement_caps_its_steps_to_the_time_budget():
    seconds, steps = scaling.measure_compute(64, 8, steps=1000, repeats=1, budget=0.0)
    assert seconds > 0 and steps == 5
