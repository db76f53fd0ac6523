"""The training example's data: IDX files, MNIST from disk, scikit-learn's digits."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import simdist
from conftest import installed_or_skip
from simdist.train._data import Dataset, load, load_digits, load_mnist, read_idx, write_idx

IDX_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]
MNIST_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


# -- IDX -------------------------------------------------------------------------------


@given(
    array=st.sampled_from(IDX_DTYPES).flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    ),
    suffix=st.sampled_from(["", ".gz"]),
)
@pytest.mark.slow
def test_idx_round_trip_keeps_every_bit(tmp_path_factory, array, suffix):
    path = tmp_path_factory.mktemp("idx") / f"a.idx{suffix}"
    write_idx(path, array)
    back = read_idx(path)
    assert back.dtype == array.dtype and back.dtype.isnative
    assert back.shape == array.shape
    assert back.tobytes() == array.tobytes()  # bitwise, so NaNs and -0.0 count too


def test_idx_bytes_follow_the_format(tmp_path):
    write_idx(tmp_path / "a", np.array([[1, 2, 3]], dtype=np.int16))
    assert (tmp_path / "a").read_bytes() == bytes.fromhex(
        "0000 0B 02 00000001 00000003 0001 0002 0003")


def test_idx_reads_big_endian_data_into_native_writable_array(tmp_path):
    (tmp_path / "a").write_bytes(bytes.fromhex("0000 0C 01 00000002 00000001 FFFFFFFE"))
    back = read_idx(tmp_path / "a")
    assert back.dtype == np.int32 and back.dtype.isnative and back.flags.writeable
    assert back.tolist() == [1, -2]


def test_idx_gz_suffix_compresses_deterministically(tmp_path):
    array = np.arange(100, dtype=np.uint8)
    write_idx(tmp_path / "a.gz", array)
    write_idx(tmp_path / "b.gz", array)
    assert (tmp_path / "a.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()


def test_idx_gzip_content_is_read_whatever_the_name(tmp_path):
    write_idx(tmp_path / "a.gz", np.arange(6.0).reshape(2, 3))
    os.rename(tmp_path / "a.gz", tmp_path / "plain-name")
    assert read_idx(tmp_path / "plain-name").tolist() == [[0, 1, 2], [3, 4, 5]]


def test_write_idx_accepts_big_endian_input(tmp_path):
    write_idx(tmp_path / "a", np.array([1.5, -2.0], dtype=">f8"))
    assert read_idx(tmp_path / "a").tolist() == [1.5, -2.0]


@pytest.mark.parametrize("array, error, match", [
    (np.zeros(3, dtype=np.int64), simdist.InvalidType, r"dtype=int64 has no IDX type; use one of"),
    (np.zeros(3, dtype=bool), simdist.InvalidType, r"dtype=bool has no IDX type"),
    (np.array(5, dtype=np.uint8), simdist.InvalidValue, r"shape=\(\) cannot be stored in IDX"),
])
def test_write_idx_rejects_what_idx_cannot_hold(tmp_path, array, error, match):
    with pytest.raises(error, match=match):
        write_idx(tmp_path / "a", array)


@pytest.mark.parametrize("content, match", [
    ("", r"truncated: 0 bytes, shorter than an IDX header"),
    ("504B0304", r"bad magic number 0x504B0304: an IDX file starts with two zero bytes"),
    ("0000 07 01 00000001 00", r"unknown IDX data type code 0x07 .*known codes: 0x08 ubyte"),
    ("0000 08 02 00000001", r"truncated header: 2 dimensions need 12 bytes, the file has 8"),
    ("0000 0B 01 00000003 0001 0002", r"truncated data: shape \(3,\) of short needs 6 bytes "
                                      r"after the header, the file has 4"),
    ("0000 08 01 00000001 01 02", r"trailing bytes after the data: .* needs 1 bytes"),
    ("1F8B 0000", r"broken gzip data"),
])
def test_read_idx_names_the_file_and_what_is_wrong(tmp_path, content, match):
    path = tmp_path / "bad-file"
    path.write_bytes(bytes.fromhex(content))
    with pytest.raises(simdist.InvalidValue, match=match) as info:
        read_idx(path)
    assert str(info.value).startswith(str(path))


def test_read_idx_reports_truncated_gzipped_data(tmp_path):
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(bytes.fromhex("0000 08 01 00000005 0102")))
    with pytest.raises(simdist.InvalidValue, match=r"truncated data: .* needs 5 bytes .* has 2"):
        read_idx(path)


# -- MNIST -----------------------------------------------------------------------------


def write_mnist(directory, n_train=20, n_test=10, suffix="", names=MNIST_NAMES, seed=0):
    """Small MNIST-shaped IDX files; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": np.arange(n_train, dtype=np.uint8) % 10,
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(n_test, dtype=np.uint8) * 3) % 10,
    }
    arrays["train_images"][0, 0, 0], arrays["train_images"][0, 0, 1] = 0, 255
    for key, array in arrays.items():
        write_idx(os.path.join(directory, names[key] + suffix), array)
    return arrays


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_load_mnist_flattens_scales_and_keeps_labels(tmp_path, suffix):
    arrays = write_mnist(tmp_path, suffix=suffix)
    data = load_mnist(str(tmp_path))
    assert isinstance(data, Dataset) and data.name == "mnist" and data.classes == 10
    assert data.x_train.shape == (20, 784) and data.x_test.shape == (10, 784)
    for x in (data.x_train, data.x_test):
        assert x.dtype == np.float64 and x.flags.c_contiguous
        assert x.min() >= 0.0 and x.max() <= 1.0
    assert data.x_train[0, 0] == 0.0 and data.x_train[0, 1] == 1.0
    np.testing.assert_array_equal(data.x_test, arrays["test_images"].reshape(10, -1) / 255)
    assert data.y_train.dtype == np.int64 and data.y_test.dtype == np.int64
    assert data.y_train.tolist() == arrays["train_labels"].tolist()
    assert data.y_test.tolist() == arrays["test_labels"].tolist()
    assert data.describe() == "mnist: 20 train / 10 test, 784 features, 10 classes"


def test_load_mnist_accepts_the_dotted_spelling(tmp_path):
    dotted = {k: v.replace("-idx", ".idx") for k, v in MNIST_NAMES.items()}
    assert dotted["train_images"] == "train-images.idx3-ubyte"
    write_mnist(tmp_path, names=dotted, suffix=".gz")
    assert load_mnist(tmp_path).x_train.shape == (20, 784)


def test_load_dispatches_to_mnist_with_a_data_dir(tmp_path):
    write_mnist(tmp_path)
    assert load("mnist", str(tmp_path), seed=5).describe().startswith("mnist: 20 train / 10 test")


def test_load_mnist_missing_directory_says_what_it_needs(tmp_path):
    with pytest.raises(simdist.InvalidValue, match=r"is not a directory; it must hold the four "
                       r"MNIST IDX files train-images-idx3-ubyte, .*nothing is downloaded"):
        load_mnist(str(tmp_path / "nowhere"))


def test_load_mnist_missing_file_lists_expected_and_present_names(tmp_path):
    write_mnist(tmp_path)
    os.remove(tmp_path / "t10k-labels-idx1-ubyte")
    (tmp_path / "README").write_text("hi")
    with pytest.raises(simdist.InvalidValue) as info:
        load_mnist(str(tmp_path))
    message = str(info.value)
    assert message.startswith(f"no t10k-labels-idx1-ubyte (or t10k-labels-idx1-ubyte.gz, "
                              f"t10k-labels.idx1-ubyte) in {tmp_path}")
    assert all(name in message for name in MNIST_NAMES.values())
    assert "it contains: README, t10k-images-idx3-ubyte, train-images" in message


def test_load_mnist_empty_directory_says_it_is_empty(tmp_path):
    with pytest.raises(simdist.InvalidValue, match=r"it contains: nothing"):
        load_mnist(str(tmp_path))


def test_load_mnist_bad_magic_names_the_file(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"<html>Not Found</html>")
    with pytest.raises(simdist.InvalidValue, match=r"train-labels-idx1-ubyte: bad magic number "
                                                    r"0x3C68746D"):
        load_mnist(str(tmp_path))


def test_load_mnist_wrong_type_code_names_the_file(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((10, 28, 28), dtype=np.int32))
    with pytest.raises(simdist.InvalidValue, match=r"t10k-images-idx3-ubyte: MNIST images must have "
                                                    r"IDX data type code 0x08 \(ubyte\), found 0x0C"):
        load_mnist(str(tmp_path))


def test_load_mnist_wrong_dimensions_names_the_file(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((20, 784), dtype=np.uint8))
    with pytest.raises(simdist.InvalidValue, match=r"images must have 3 dimension\(s\), found "
                                                    r"shape \(20, 784\)"):
        load_mnist(str(tmp_path))


def test_load_mnist_truncated_file_gives_expected_and_actual_bytes(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(simdist.InvalidValue, match=r"train-images-idx3-ubyte: truncated data: shape "
                       r"\(20, 28, 28\) of ubyte needs 15680 bytes after the header, the file has 15580"):
        load_mnist(str(tmp_path))


def test_load_mnist_count_mismatch_names_both_files(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(9, dtype=np.uint8))
    with pytest.raises(simdist.InvalidValue, match=r"t10k-images-idx3-ubyte holds 10 images but "
                       r".*t10k-labels-idx1-ubyte holds 9 labels"):
        load_mnist(str(tmp_path))


def test_load_mnist_labels_out_of_range(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([1] * 7 + [12] + [0] * 12, np.uint8))
    with pytest.raises(simdist.InvalidValue, match=r"train-labels-idx1-ubyte: labels must be 0..9, "
                                                    r"found 12 at index 7"):
        load_mnist(str(tmp_path))


# -- load() ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "cifar"}, r"unknown data set name='cifar'; choose one of: digits, mnist"),
    ({"name": "mnist"}, r"pass --data-dir DIR .*train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                        r"t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte"),
    ({"name": "digits", "data_dir": "/data"}, r"data_dir='/data' is only for mnist"),
])
def test_load_rejects_bad_choices(kwargs, match):
    with pytest.raises(simdist.InvalidValue, match=match):
        load(**kwargs)


# -- digits ----------------------------------------------------------------------------


def sklearn_or_skip():
    """scikit-learn's datasets module (``installed_or_skip``)."""
    installed_or_skip("sklearn", "examples")
    import sklearn.datasets

    return sklearn.datasets


@pytest.fixture(scope="module")
def digits():
    installed_or_skip("sklearn", "examples")  # not imported here: the loader reads its file
    return load_digits(seed=0)


def test_digits_split_is_1437_train_360_test(digits):
    assert digits.name == "digits" and digits.classes == 10
    assert digits.x_train.shape == (1437, 64) and digits.x_test.shape == (360, 64)
    assert digits.y_train.shape == (1437,) and digits.y_test.shape == (360,)
    assert digits.describe() == "digits: 1437 train / 360 test, 64 features, 10 classes"


def test_digits_pixels_are_scaled_to_unit_range(digits):
    for x in (digits.x_train, digits.x_test):
        assert x.dtype == np.float64 and x.flags.c_contiguous
        assert x.min() == 0.0 and x.max() == 1.0
        assert np.array_equal(x * 16, np.round(x * 16))  # 0..16 divided by 16
    assert digits.y_train.dtype == np.int64 and digits.y_test.dtype == np.int64


def test_digits_split_is_the_seeded_numpy_permutation(digits):
    bunch = sklearn_or_skip().load_digits()
    order = np.random.default_rng(0).permutation(1797)
    np.testing.assert_array_equal(digits.x_test, bunch.data[order[:360]] / 16)
    np.testing.assert_array_equal(digits.y_train, bunch.target[order[360:]])


def test_digits_same_seed_same_split_other_seed_other_split(digits):
    again, other = load("digits", seed=0), load("digits", seed=1)
    assert np.array_equal(again.x_train, digits.x_train) and np.array_equal(again.y_test, digits.y_test)
    assert not np.array_equal(other.y_train, digits.y_train)
    assert sorted(other.y_train.tolist() + other.y_test.tolist()) == sorted(
        digits.y_train.tolist() + digits.y_test.tolist())


def test_digits_train_holds_every_class(digits):
    assert set(digits.y_train.tolist()) == set(range(10))
    assert set(digits.y_test.tolist()) <= set(range(10))


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_digits_test_fraction_must_be_strictly_between_0_and_1(fraction):
    with pytest.raises(simdist.InvalidValue, match=rf"test_fraction={fraction!r} must be strictly"):
        load_digits(test_fraction=fraction)


def test_digits_are_read_from_scikit_learns_file_without_importing_it(digits):
    code = ("import sys; from simdist.train import load; d = load('digits', seed=0)\n"
            "print('sklearn' in sys.modules, d.x_train.sum(), d.y_test.sum())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", str(digits.x_train.sum()), str(digits.y_test.sum())]


def test_digits_come_from_scikit_learns_loader_where_its_file_is_not_found(digits, monkeypatch):
    sklearn_or_skip()
    monkeypatch.setattr(os.path, "isfile", lambda path: False)
    again = load_digits(seed=0)
    assert np.array_equal(again.x_train, digits.x_train) and np.array_equal(again.y_test, digits.y_test)


def test_digits_without_sklearn_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ModuleNotFoundError, match=r"the digits data set comes with scikit-learn: "
                       r"pip install 'simdist\[examples\]' \(or pip install scikit-learn\)"):
        load_digits()
