"""``simdist train`` and ``simdist.train.train``: the MLP example, trained and verified.

Everything is real: scikit-learn's digits (the ``examples`` extra), MNIST-format
IDX files written here, simulated worlds, and Open MPI's mpiexec for the MPI
run. The CLI is called in-process through ``simdist.cli.main``. Runs use 2 or 3
epochs, except the accuracy test, which pins the defaults.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import installed_or_skip, mpiexec_or_skip
from simdist.cli import main
from simdist.train import TrainConfig, load, train, write_idx
from simdist import graph as g
from simdist.train._models import init_params, mlp
from simdist.train._shadow import Shadow

installed_or_skip("sklearn", "examples")  # the digits data set comes with it (read without importing it)

CHECKS = {"replicas_identical", "matches_single_device", "deterministic"}


def train_cli(tmp_path, *args):
    """``simdist train ARGS --json FILE`` in-process: ``(exit status, report)``."""
    path = tmp_path / "report.json"
    status = main(["train", *args, "--json", str(path)])
    return status, json.loads(path.read_text())


def explanation(report, check):
    return report["details"][check]["explanation"]


# -- the default run ---------------------------------------------------------------------


@pytest.mark.slow
def test_train_n4_digits_defaults_reach_95_percent_and_write_a_verified_json_report(tmp_path, capsys):
    status, report = train_cli(tmp_path, "-n", "4")
    out = capsys.readouterr().out
    assert status == 0, out
    assert report["test_accuracy"] >= 0.95
    assert report["config"]["epochs"] == 10 and report["config"]["batch_size"] == 64
    assert set(report["verification"]) == CHECKS
    assert all(v is True for v in report["verification"].values()), report["details"]
    assert isinstance(report["tolerance"], str) and "gamma(K)" in report["tolerance"]
    for check in CHECKS:
        assert report["details"][check]["ok"] is True
        assert isinstance(explanation(report, check), str) and explanation(report, check)
    assert "test accuracy" in out and "verification:" in out  # the text report on stdout too


# -- injected bugs -------------------------------------------------------------------------


@pytest.mark.slow
def test_summed_gradients_fail_single_device_check_with_n_times_learning_rate(tmp_path, capsys):
    status, report = train_cli(tmp_path, "-n", "4", "--epochs", "2", "--inject-bug", "sum-gradients")
    assert status == 1
    v = report["verification"]
    assert v["matches_single_device"] is False
    assert v["replicas_identical"] is True and v["deterministic"] is True
    assert "effective learning rate is 4x" in explanation(report, "matches_single_device")
    assert report["details"]["matches_single_device"]["norm_ratio"] == pytest.approx(4, rel=0.01)
    assert "NO" in capsys.readouterr().out


@pytest.mark.slow
def test_unsharded_data_fails_single_device_check_saying_ranks_train_on_the_same_data(tmp_path):
    status, report = train_cli(tmp_path, "-n", "4", "--epochs", "2", "--inject-bug", "unsharded-data")
    assert status == 1
    v = report["verification"]
    assert v["matches_single_device"] is False
    assert v["replicas_identical"] is True and v["deterministic"] is True
    text = explanation(report, "matches_single_device")
    assert "the ranks train on the same data" in text and "1/4 of the global batch" in text


# -- other shapes of run -----------------------------------------------------------------


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_tensor_parallel_verifies_and_matches_one_device_accuracy(tmp_path, n):
    status, report = train_cli(tmp_path, "-n", str(n), "--epochs", "2", "--parallel", "tensor")
    assert status == 0, report["details"]
    assert set(report["verification"]) == CHECKS and all(report["verification"].values())
    assert report["config"]["parallel"] == "tensor"
    assert abs(report["test_accuracy"] - report["single_device_test_accuracy"]) <= 0.01


@pytest.mark.parametrize("n, batch", [(1, 64), pytest.param(3, 63, marks=pytest.mark.slow)])
def test_one_and_three_ranks_verify_with_batch_the_multiple_of_n_nearest_64(tmp_path, n, batch):
    status, report = train_cli(tmp_path, "-n", str(n), "--epochs", "2")
    assert status == 0, report["details"]
    assert report["config"]["batch_size"] == batch
    assert report["steps"] == 2 * (1437 // batch)
    assert all(report["verification"].values())
    if n == 1:  # one rank is one device: the same bits
        assert report["details"]["matches_single_device"]["worst_ratio"] == 0


@pytest.mark.slow
def test_mpi_backend_verifies_and_matches_the_simulator(tmp_path):
    mpiexec_or_skip()
    status, report = train_cli(tmp_path, "-n", "2", "--epochs", "2", "--backend", "mpi", "--timeout", "60")
    assert status == 0, report["details"]
    assert report["config"]["backend"] == "mpi"
    assert report["verification"]["matches_simulator"] is True
    assert set(report["verification"]) == CHECKS | {"matches_simulator"}
    assert all(report["verification"].values())


# -- MNIST from IDX files ----------------------------------------------------------------


def easy_mnist(directory, n_train=256, n_test=64):
    """MNIST-format files whose label decides which 8x4 pixel block is bright (over noise)."""
    directory.mkdir(exist_ok=True)
    for prefix, n, seed in (("train", n_train, 1), ("t10k", n_test, 2)):
        rng = np.random.default_rng(seed)
        labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 64, size=(n, 28, 28), dtype=np.uint8)
        for image, label in zip(images, labels):
            row, col = divmod(int(label), 5)
            image[2 + 12 * row: 10 + 12 * row, 1 + 5 * col: 5 + 5 * col] = 255
        write_idx(directory / f"{prefix}-images-idx3-ubyte", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte", labels)
    return directory


def test_mnist_from_a_data_dir_trains_and_verifies(tmp_path, capsys):
    data = easy_mnist(tmp_path / "mnist")
    status, report = train_cli(tmp_path, "-n", "4", "--epochs", "2", "--dataset", "mnist", "--data-dir", str(data))
    assert status == 0, report["details"]
    assert report["description"].startswith("mnist: 256 train / 64 test, 784 features")
    assert all(report["verification"].values())
    assert report["test_accuracy"] >= 0.9


def test_mnist_without_data_dir_exits_2_naming_data_dir(capsys):
    assert main(["train", "--dataset", "mnist", "--epochs", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "simdist train: error:" in err and "--data-dir" in err


def _labels_out_of_range(directory):
    write_idx(directory / "t10k-labels-idx1-ubyte", np.full(64, 12, dtype=np.uint8))


def _not_idx(directory):
    (directory / "train-images-idx3-ubyte").write_bytes(b"PK\x03\x04 this is a zip file")


def _missing(directory):
    (directory / "train-labels-idx1-ubyte").unlink()


@pytest.mark.parametrize("spoil", [_labels_out_of_range, _not_idx, _missing], ids=["labels-10-plus", "not-idx", "missing"])
def test_mnist_bad_files_exit_2_with_the_loaders_message(tmp_path, capsys, spoil):
    data = easy_mnist(tmp_path / "mnist")
    spoil(data)
    with pytest.raises(ValueError) as loader:
        load("mnist", str(data))
    assert main(["train", "--dataset", "mnist", "--data-dir", str(data), "--epochs", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert str(loader.value) in err and "Traceback" not in err


# -- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("args, phrases", [
    (["-n", "4", "--batch-size", "30"], ["batch size 30", "4 ranks", "multiple of 4", "28 or 32"]),
    (["-n", "4", "--batch-size", "2000"], ["batch size 2000", "exceeds the 1437 training samples"]),
    (["-n", "4", "--batch-size", "0"], ["batch_size=0", ">= 1"]),
    (["-n", "4", "--batch-size", "2"], ["batch size 2", "e.g. 4 or 8"]),
    (["-n", "1", "--inject-bug", "sum-gradients"], ["needs at least 2 ranks", "-n 2"]),
    (["-n", "2", "--timeout", "0"], ["timeout=0", "> 0"]),
    (["-n", "4", "--batch-size", "-4"], ["batch_size=-4", ">= 1"]),
    (["-n", "3", "--parallel", "tensor"], ["64 hidden units over 3 ranks", "--hidden 63"]),
    (["-n", "4", "--parallel", "tensor", "--inject-bug", "sum-gradients"], ["--inject-bug", "--parallel data"]),
    (["--epochs", "0"], ["epochs=0", ">= 1"]),
    (["--data-dir", "somewhere"], ["only for mnist", "--data-dir"]),
], ids=["batch-not-divisible", "batch-too-large", "batch-zero", "batch-smaller-than-n", "bug-on-one-rank",
        "timeout-zero", "batch-negative", "tensor-hidden-not-divisible",
        "bug-with-tensor", "epochs-zero", "data-dir-with-digits"])
def test_bad_arguments_exit_2_with_a_message_that_says_what_to_change(capsys, args, phrases):
    assert main(["train", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "", "a bad argument is reported before anything runs"
    assert err.startswith("simdist train: error:") and err.count("\n") == 1
    for phrase in phrases:
        assert phrase in err


# -- output ------------------------------------------------------------------------------


def test_a_diverged_run_is_flagged_and_its_json_stays_strict(tmp_path, capsys):
    path = tmp_path / "report.json"
    main(["train", "-n", "2", "--epochs", "1", "--lr", "1000", "--json", str(path)])
    out, _ = capsys.readouterr()
    report = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))
    assert report["diverged"] is True
    assert "warning: the training diverged" in out


def test_json_dash_writes_only_json_to_stdout_and_progress_to_stderr(capfd):
    # capfd, not capsys: rank 0, which draws the progress bars, is another process
    assert main(["train", "-n", "2", "--epochs", "2", "--json", "-"]) == 0
    out, err = capfd.readouterr()
    report = json.loads(out)
    assert all(report["verification"].values()) and "test_accuracy" in report
    assert "simdist train: digits" in err and "verifying: a rerun" in err
    assert "epoch 1/2" in err and "epoch 2/2" in err


# -- the library -------------------------------------------------------------------------


def test_library_train_returns_the_report_dict():
    report = train(TrainConfig(size=2, epochs=2))
    assert isinstance(report, dict)
    assert report["config"]["size"] == 2 and report["config"]["batch_size"] == 64
    assert report["steps"] == 44 and len(report["epochs"]) == 2
    assert [e["epoch"] for e in report["epochs"]] == [1, 2]
    assert set(report["verification"]) == CHECKS and all(report["verification"].values())
    assert report["final_loss"] > 0 and 0 <= report["test_accuracy"] <= 1
    json.dumps(report)  # JSON-ready as returned


@pytest.mark.slow
def test_two_runs_with_one_seed_give_identical_losses_and_another_seed_differs():
    config = TrainConfig(size=2, epochs=3)
    first, second = train(config), train(config)
    assert first["final_loss"] == second["final_loss"]
    assert [e["loss"] for e in first["epochs"]] == [e["loss"] for e in second["epochs"]]
    assert first["test_accuracy"] == second["test_accuracy"]
    other = train(TrainConfig(size=2, epochs=3, seed=1))
    assert other["final_loss"] != first["final_loss"]


# -- verification on diverged numbers ----------------------------------------------------


def _shadow(config, data):
    reference = mlp(data.features, config.hidden, data.classes, config.batch_size, config.lr, config.dtype)
    initial = init_params(data.features, config.hidden, data.classes, 0, config.dtype)
    return Shadow(reference, reference.step.grads, 1, initial, config.lr, config.dtype), reference, initial


@pytest.fixture(scope="module")
def digits_config():
    data = load("digits", seed=0)
    return TrainConfig(size=1, epochs=1).checked(len(data.y_train)), data


def _feeds(config, data):
    rows = np.arange(config.batch_size)
    return {"x": data.x_train[rows].astype(config.dtype), "labels": data.y_train[rows]}


def test_final_weights_with_nan_where_one_device_has_numbers_do_not_match(digits_config):
    config, data = digits_config
    shadow, reference, initial = _shadow(config, data)
    feeds = _feeds(config, data)
    grads = g.evaluate(reference.step.grads, {**feeds, **initial})
    shadow.step(initial, grads, feeds)
    final = dict(shadow.weights)
    assert shadow.summary(final)["final_ratio"] == 0
    diverged = {n: v.copy() for n, v in final.items()}
    diverged["W1"][0, 0] = np.nan
    assert shadow.summary(diverged)["final_ratio"] == np.inf


def test_step_check_counts_a_nan_gradient_against_a_number_as_a_mismatch(digits_config):
    config, data = digits_config
    feeds = _feeds(config, data)
    exact, reference, initial = _shadow(config, data)
    grads = g.evaluate(reference.step.grads, {**feeds, **initial})
    exact.step(initial, grads, feeds)
    assert exact.summary(exact.weights)["worst_ratio"] == 0
    broken = [x.copy() for x in grads]
    broken[2][0, 0] = np.nan
    check, _, _ = _shadow(config, data)
    check.step(initial, broken, feeds)
    summary = check.summary(check.weights)
    assert summary["worst_ratio"] == np.inf and summary["worst_param"] == "W2"
