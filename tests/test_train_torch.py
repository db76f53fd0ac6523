"""``simdist train --framework torch``: the digits MLP in torch with DDP on
simulated ranks, verified as the graph's example is; the classic bugs fail
their check and say which bug it is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import installed_or_skip

installed_or_skip("sklearn", "examples")

pytestmark = [pytest.mark.slow, pytest.mark.torch]  # ranks import torch and train


def _train(*args):
    done = subprocess.run([sys.executable, "-m", "simdist", "train", "--framework", "torch", *args],
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout, done.stderr


def test_the_torch_mlp_trains_on_digits_and_verifies():
    code, out, err = _train("-n", "3", "--epochs", "3", "--batch-size", "63", "--json", "-")
    assert code == 0, err[-2000:]
    report = json.loads(out)
    assert report["verification"] == {"replicas_identical": True, "matches_single_device": True,
                                      "deterministic": True}
    assert report["test_accuracy"] > 0.85 and report["steps"] == 3 * (1437 // 63)
    assert report["config"]["framework"] == "torch"
    assert report["details"]["matches_single_device"]["worst_ratio"] < 1


@pytest.mark.parametrize("bug,says", [("sum-gradients", "summed over the 2 ranks instead of averaged"),
                                      ("unsharded-data", "do not train on their own rows")])
def test_an_injected_bug_fails_its_check_naming_the_bug(bug, says):
    code, out, _ = _train("-n", "2", "--epochs", "1", "--inject-bug", bug)
    assert code == 1
    assert "matches_single_device  NO" in out and says in out, out


def test_what_the_torch_example_does_not_run_is_refused():
    code, _, err = _train("--parallel", "tensor")
    assert code == 2 and "--framework torch runs --parallel data only" in err
