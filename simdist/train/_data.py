"""The data sets of the training example: scikit-learn's digits and MNIST.

``digits`` (1,797 8x8 images) is bundled inside scikit-learn; ``mnist``
(70,000 28x28 images) is read from the four IDX files of the original
distribution in a directory you name. Nothing is ever downloaded.

Both come back as a `Dataset` of float64 pixels scaled to [0, 1], one row per
image, and int64 labels 0..9. `read_idx` and `write_idx` read and write any
IDX file (LeCun's format), plain or gzip-compressed.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
import zlib
from dataclasses import dataclass

import numpy as np

from .._errors import InvalidType, InvalidValue

__all__ = ["Dataset", "DATASETS", "load", "load_digits", "load_mnist", "read_idx", "write_idx"]

DATASETS = ("digits", "mnist")

# IDX type code -> big-endian numpy dtype (the format stores every number big-endian)
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_NAMES = {0x08: "ubyte", 0x09: "byte", 0x0B: "short", 0x0C: "int", 0x0D: "float", 0x0E: "double"}
IDX_CODES = {np.dtype(t).newbyteorder("="): code for code, t in IDX_TYPES.items()}  # native dtype -> code

# the four MNIST files, by (split, part); each may also end in .gz or be
# spelled with a dot before "idx" (train-images.idx3-ubyte)
MNIST_FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True)
class Dataset:
    """A classification data set split into train and test.

    ``x_*`` are C-contiguous float64 arrays of shape ``(n, features)`` with
    values in [0, 1]; ``y_*`` are int64 arrays of shape ``(n,)`` with labels
    ``0 .. classes-1``.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def features(self) -> int:
        return self.x_train.shape[1]

    def describe(self) -> str:
        """One line, e.g. ``digits: 1437 train / 360 test, 64 features, 10 classes``."""
        return (f"{self.name}: {len(self.y_train)} train / {len(self.y_test)} test, "
                f"{self.features} features, {self.classes} classes")


def load(name: str = "digits", data_dir: str | None = None, *, seed: int = 0) -> Dataset:
    """Load data set ``name`` (one of `DATASETS`).

    ``digits`` is split by ``seed`` and takes no ``data_dir``; ``mnist`` needs
    ``data_dir`` and has a fixed split, so ``seed`` does not change it.
    """
    if name not in DATASETS:
        raise InvalidValue(f"unknown data set name={name!r}; choose one of: {', '.join(DATASETS)}")
    if name == "digits":
        if data_dir is not None:
            raise InvalidValue(f"data_dir={data_dir!r} is only for mnist: the digits data comes "
                               "with scikit-learn; drop data_dir (--data-dir)")
        return load_digits(seed)
    if data_dir is None:
        raise InvalidValue("the mnist data set is read from disk, never downloaded: pass "
                           "--data-dir DIR (data_dir=DIR), a directory holding "
                           f"{_expected_files()}")
    return load_mnist(data_dir)


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's digits (8x8 pixels of 0..16, scaled to [0, 1]), split at
    random by ``numpy.random.default_rng(seed)``: ``ceil(n * test_fraction)``
    samples (360 of 1,797 at 0.2, as scikit-learn's own split) go to test."""
    if not 0 < test_fraction < 1:
        raise InvalidValue(f"test_fraction={test_fraction!r} must be strictly between 0 and 1")
    data, target = _digits()
    x, y = np.asarray(data, dtype=np.float64) / 16.0, np.asarray(target, dtype=np.int64)
    n = len(y)
    n_test = min(max(math.ceil(n * test_fraction), 1), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    test, train = order[:n_test], order[n_test:]
    return Dataset("digits", np.ascontiguousarray(x[train]), y[train],
                   np.ascontiguousarray(x[test]), y[test], classes=10)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """``(data, target)`` of scikit-learn's digits, read from the file its
    package ships (``datasets/data/digits.csv.gz``, as its loader reads it)
    without importing scikit-learn, which takes 1-3 s and 60 MB; by its
    loader where that file is not there."""
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            table = np.loadtxt(path, delimiter=",")
            return table[:, :-1], table[:, -1].astype(np.int64)
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as exc:
        raise ModuleNotFoundError(
            "the digits data set comes with scikit-learn: pip install 'simdist[examples]' "
            "(or pip install scikit-learn)", name="sklearn") from exc
    bunch = sklearn_digits()
    return bunch.data, bunch.target


def load_mnist(data_dir: str) -> Dataset:
    """MNIST from the four IDX files in ``data_dir`` (see `MNIST_FILES`), each
    plain or gzip-compressed (``.gz``): 60,000 train and 10,000 test images of
    28x28 bytes, flattened to 784 features and divided by 255."""
    data_dir = os.fspath(data_dir)
    if not os.path.isdir(data_dir):
        raise InvalidValue(f"MNIST data_dir={data_dir!r} is not a directory; it must hold "
                           f"{_expected_files()} (nothing is downloaded: put them there)")
    arrays = {}
    for split in ("train", "test"):
        images, labels = (_find(data_dir, MNIST_FILES[split, part]) for part in ("images", "labels"))
        x, y = read_idx(images), read_idx(labels)
        for path, arr, ndim, what in ((images, x, 3, "images"), (labels, y, 1, "labels")):
            if arr.dtype != np.uint8:
                code = IDX_CODES[arr.dtype]
                raise InvalidValue(f"{path}: MNIST {what} must have IDX data type code 0x08 "
                                   f"(ubyte), found 0x{code:02X} ({IDX_NAMES[code]}); "
                                   "is it the right file?")
            if arr.ndim != ndim:
                raise InvalidValue(f"{path}: MNIST {what} must have {ndim} dimension(s), found "
                                   f"shape {arr.shape}; is it the right file?")
        if len(x) != len(y):
            raise InvalidValue(f"{images} holds {len(x)} images but {labels} holds {len(y)} "
                               "labels; the two files must come from the same MNIST set")
        if len(y) and y.max() > 9:
            at = int(np.argmax(y > 9))
            raise InvalidValue(f"{labels}: labels must be 0..9, found {y[at]} at index {at}; "
                               "is it an MNIST label file?")
        arrays[split] = (x.reshape(len(x), -1).astype(np.float64) / 255.0, y.astype(np.int64))
    (x_train, y_train), (x_test, y_test) = arrays["train"], arrays["test"]
    if x_train.shape[1] != x_test.shape[1]:
        raise InvalidValue(f"MNIST train images have {x_train.shape[1]} pixels each but test "
                           f"images {x_test.shape[1]}; the files in {data_dir} do not match")
    return Dataset("mnist", x_train, y_train, x_test, y_test, classes=10)


def _expected_files() -> str:
    names = ", ".join(MNIST_FILES.values())
    return f"the four MNIST IDX files {names} (each may be gzip-compressed with a .gz suffix)"


def _find(data_dir: str, name: str) -> str:
    """The path of MNIST file ``name`` in ``data_dir``, in any accepted spelling."""
    dotted = name.replace("-idx", ".idx", 1)
    for candidate in (name, name + ".gz", dotted, dotted + ".gz"):
        path = os.path.join(data_dir, candidate)
        if os.path.isfile(path):
            return path
    present = sorted(os.listdir(data_dir))
    listing = ", ".join(present[:20]) + (f", ... ({len(present)} in all)" if len(present) > 20 else "")
    raise InvalidValue(f"no {name} (or {name}.gz, {dotted}) in {data_dir}; it must hold "
                       f"{_expected_files()}; it contains: {listing or 'nothing'}")


def read_idx(path) -> np.ndarray:
    """The array stored in IDX file ``path`` (gzip-compressed or not), in native
    byte order: 2 zero bytes, a type code, the number of dimensions, each
    dimension as a big-endian uint32, then the data, big-endian, C order."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":  # gzip's magic, whatever the file's name
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InvalidValue(f"{path}: broken gzip data ({exc}); fetch the file again") from exc
    if len(raw) < 4:
        raise InvalidValue(f"{path}: truncated: {len(raw)} bytes, shorter than an IDX header (4)")
    magic = int.from_bytes(raw[:4], "big")
    if raw[:2] != b"\0\0":
        raise InvalidValue(f"{path}: bad magic number 0x{magic:08X}: an IDX file starts with two "
                           "zero bytes, a type code and the number of dimensions; is it an IDX file?")
    code, ndim = raw[2], raw[3]
    if code not in IDX_TYPES:
        known = ", ".join(f"0x{c:02X} {n}" for c, n in IDX_NAMES.items())
        raise InvalidValue(f"{path}: unknown IDX data type code 0x{code:02X} (magic number "
                           f"0x{magic:08X}); known codes: {known}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise InvalidValue(f"{path}: truncated header: {ndim} dimensions need {header} bytes, "
                           f"the file has {len(raw)}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(IDX_TYPES[code])
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header != expected:
        what = "truncated data" if len(raw) - header < expected else "trailing bytes after the data"
        raise InvalidValue(f"{path}: {what}: shape {shape} of {IDX_NAMES[code]} needs {expected} "
                           f"bytes after the header, the file has {len(raw) - header}")
    data = np.frombuffer(raw, dtype=dtype, count=math.prod(shape), offset=header)
    return data.reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path, array: np.ndarray) -> None:
    """Write ``array`` (1 to 255 dimensions; uint8, int8, int16, int32, float32
    or float64) to IDX file ``path``, gzip-compressed if it ends in ``.gz``."""
    path, array = os.fspath(path), np.asarray(array)
    code = IDX_CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise InvalidType(f"array of dtype={array.dtype} has no IDX type; use one of "
                          "uint8, int8, int16, int32, float32, float64")
    if not 1 <= array.ndim <= 255 or any(d >= 2**32 for d in array.shape):
        raise InvalidValue(f"array of shape={array.shape} cannot be stored in IDX: it takes 1 to "
                           "255 dimensions, each below 2**32")
    header = bytes([0, 0, code, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    payload = header + array.astype(IDX_TYPES[code]).tobytes()
    if path.endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)  # mtime=0: the same array gives the same bytes
    with open(path, "wb") as fh:
        fh.write(payload)
