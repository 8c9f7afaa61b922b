"""The data sets of issue 29's benchmarks: multi-class and regression tasks with enough rows for
privacy to leave signal, each as PrivFit's preprocessing builds it and as diffprivlib takes it.

* **Adult, marital status** (:func:`adult_marital`): the vendored UCI Adult
  (``datasets/adult``, :mod:`benchmarks.adult`), re-targeted. The label is ``marital-status``
  (7 classes, indexed in the order ``datasets/adult/spec.json`` declares them); the features are
  the spec's other 12 columns plus ``income`` (one-hot of ``>50K``/``<=50K``). Rows with a
  missing value in a used column are dropped, as in :func:`benchmarks.adult.design`: the
  published split, 30,162 train and 15,060 test rows.
* **Adult, hours per week** (:func:`adult_hours`): the label is ``hours-per-week`` with the public
  bounds [1, 99] of the spec; the features are the spec's other 12 columns plus ``income``.
  Labels are clipped to the bounds (none of Adult's are outside) and mapped onto [−1, 1] by
  y = 2(v − 1)/98 − 1, the dp encoding of the contract.
* **Fashion-MNIST** (:func:`fashion_mnist`): Debian's ``dataset-fashion-mnist`` (60,000 train
  and 10,000 test 28 × 28 images, 10 classes), read from the installed files; nothing is
  downloaded. :class:`DataUnavailable` names the apt command when the files are absent.

PrivFit's design matrix (``X``, ``X_test``) is :class:`service.dp.data.preprocessing.
PreprocessingSpec`'s transform of a public spec: numeric columns clamped to their public bounds
and mapped onto [0, 1], categorical columns one-hot against their declared lists, an intercept,
every row clipped into the unit ball (``row_norm="clip"``), and for Fashion-MNIST the public
random projection below. diffprivlib's ``LogisticRegression`` takes the same matrix
(``data_norm = 1``, ``fit_intercept=False``: the intercept is a column). Its
``LinearRegression`` clips to per-column bounds and centres the data itself, so it gets the
encoded features *before* the row-norm step and without the intercept column (``X_raw``, every
entry in [0, 1] by construction, public ``bounds_X = (0, 1)``) and the label in its own units
(``v_train``, public ``bounds_y = (1, 99)``): the functional mechanism's noise scales with the
bounds, so min–max scaling by public bounds is the same as giving it raw units.

Fashion-MNIST's public preprocessing: every pixel is a numeric feature with bounds [0, 255]
(so pixel/255), an intercept, each row (norm ≈ 10) scaled onto the unit sphere, then the
Gaussian random projection R ∈ R^{k × 785} with entries N(0, 1/k) generated from the public seed
:data:`FASHION_PROJECTION_SEED` (:class:`~service.dp.data.projection.RandomProjection`, k =
:data:`FASHION_PROJECTION_DIM` by default), every projected row clipped to norm ≤ 1 again. The
projection is fixed before any data is read and applied row by row, so it costs no privacy; it
brings the model from 785·K to k·K weights, which is what the noise of every mechanism scales
with.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from benchmarks.adult import Split, _complete_rows, load_adult, load_spec, preprocessing_spec
from service.dp.data.preprocessing import NumericFeature, PreprocessingSpec
from service.dp.data.projection import RandomProjection

__all__ = [
    "FASHION_APT",
    "FASHION_CLASSES",
    "FASHION_DIR",
    "FASHION_PROJECTION_DIM",
    "FASHION_PROJECTION_SEED",
    "HOURS_BOUNDS",
    "ClassificationData",
    "DataUnavailable",
    "RegressionData",
    "adult_hours",
    "adult_marital",
    "fashion_mnist",
    "hours_from_unit",
    "subsample",
]

FloatArray = NDArray[np.float64]

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_APT = "apt-get install -y --no-install-recommends dataset-fashion-mnist"
FASHION_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
#: The public projection of Fashion-MNIST's 785 encoded features (784 pixels + intercept).
FASHION_PROJECTION_DIM = 64
FASHION_PROJECTION_SEED = 29

#: The public bounds of ``hours-per-week`` (``datasets/adult/spec.json``).
HOURS_BOUNDS: tuple[float, float] = (1.0, 99.0)
_INCOME = {"column": "income", "type": "categorical", "categories": [">50K", "<=50K"]}


class DataUnavailable(RuntimeError):
    """A data set's files are not installed (the message says how to install them)."""


@dataclass(frozen=True)
class ClassificationData:
    """A K-class task: ``X``/``X_test`` rows in the unit ball (the last raw feature the
    intercept, before any projection), ``y``/``y_test`` class indices 0…K−1 as float64."""

    name: str
    X: FloatArray
    y: FloatArray
    X_test: FloatArray
    y_test: FloatArray
    classes: tuple[str, ...]
    preprocessing: str

    @property
    def n_classes(self) -> int:
        return len(self.classes)


@dataclass(frozen=True)
class RegressionData:
    """A bounded numeric task: ``X``/``X_test`` in the unit ball with an intercept column,
    ``y`` the label mapped onto [−1, 1]; ``X_raw``/``X_raw_test`` the encoded features in
    [0, 1] without the row-norm step or the intercept; ``v``/``v_test`` the label in its units
    (clipped to ``bounds``)."""

    name: str
    X: FloatArray
    y: FloatArray
    X_test: FloatArray
    X_raw: FloatArray
    X_raw_test: FloatArray
    v: FloatArray
    v_test: FloatArray
    bounds: tuple[float, float]
    preprocessing: str


Data = TypeVar("Data", "ClassificationData", "RegressionData")


def hours_from_unit(score: FloatArray, bounds: tuple[float, float] = HOURS_BOUNDS) -> FloatArray:
    """The contract's map back from the dp encoding: v = lower + (clip(s, −1, 1) + 1)/2 ·
    (upper − lower), always within the public bounds."""
    lower, upper = bounds
    out: FloatArray = lower + (np.clip(score, -1.0, 1.0) + 1.0) / 2.0 * (upper - lower)
    return out


def _adult_columns(label: str, split: Split) -> tuple[dict[str, np.ndarray], PreprocessingSpec]:
    """Complete rows of the columns used to predict ``label`` and the public spec of the
    features (every spec column but ``label``, plus ``income``)."""
    spec = load_spec()
    features = [f for f in spec["features"] if f["column"] != label] + [_INCOME]
    raw = load_adult(split)
    used = [f["column"] for f in features] + [label]
    keep = _complete_rows(raw, used)
    columns = {name: raw[name][keep] for name in used}
    prep = preprocessing_spec({**spec, "features": features})
    return columns, prep


def adult_marital() -> ClassificationData:
    """Adult re-targeted to ``marital-status`` (module doc)."""
    label = "marital-status"
    classes = tuple(next(f["categories"] for f in load_spec()["features"] if f["column"] == label))
    parts = []
    for split in ("train", "test"):
        columns, prep = _adult_columns(label, split)
        X = np.ascontiguousarray(prep.transform(columns), dtype=np.float64)
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[v] for v in columns[label]], dtype=np.float64)
        parts.append((X, y))
    (X, y), (X_test, y_test) = parts
    return ClassificationData(
        name="adult-marital",
        X=X,
        y=y,
        X_test=X_test,
        y_test=y_test,
        classes=classes,
        preprocessing=(
            f"Adult's public spec without marital-status, plus income: {X.shape[1]} columns "
            "(numeric to [0, 1] by public bounds, one-hot, intercept), rows clipped to norm ≤ 1"
        ),
    )


def adult_hours() -> RegressionData:
    """Adult re-targeted to ``hours-per-week`` in [1, 99] (module doc)."""
    label = "hours-per-week"
    lower, upper = HOURS_BOUNDS
    out: dict[str, FloatArray] = {}
    for split in ("train", "test"):
        columns, prep = _adult_columns(label, split)
        X = np.ascontiguousarray(prep.transform(columns), dtype=np.float64)
        # the same encoding before the row-norm step: "scale" divides by the public M
        plain = PreprocessingSpec(features=prep.features, intercept=False, row_norm="scale")
        X_raw = np.clip(plain.transform(columns) * plain.max_raw_norm, 0.0, 1.0)
        v = np.clip(np.asarray(columns[label], dtype=np.float64), lower, upper)
        out[f"X_{split}"], out[f"raw_{split}"], out[f"v_{split}"] = X, X_raw, v
    v_train = out["v_train"]
    return RegressionData(
        name="adult-hours",
        X=out["X_train"],
        y=2.0 * (v_train - lower) / (upper - lower) - 1.0,
        X_test=out["X_test"],
        X_raw=out["raw_train"],
        X_raw_test=out["raw_test"],
        v=v_train,
        v_test=out["v_test"],
        bounds=HOURS_BOUNDS,
        preprocessing=(
            f"Adult's public spec without hours-per-week, plus income: {out['X_train'].shape[1]}"
            " columns (numeric to [0, 1] by public bounds, one-hot, intercept), rows clipped to "
            "norm ≤ 1; label clipped to [1, 99] and mapped onto [-1, 1]"
        ),
    )


def _idx(path: Path) -> NDArray[np.uint8]:
    """An IDX file (gzipped) of unsigned bytes as an array of its declared shape."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path.name} is not an IDX file of unsigned bytes")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist(
    *,
    k: int = FASHION_PROJECTION_DIM,
    seed: int = FASHION_PROJECTION_SEED,
    max_rows: tuple[int, int] | None = None,
) -> ClassificationData:
    """Fashion-MNIST under the public preprocessing of the module doc (k = 0: no projection).
    ``max_rows`` = (train, test) keeps that many images of a fixed permutation of each split
    before preprocessing (smoke runs). :class:`DataUnavailable` when Debian's package is not
    installed."""
    files = {
        "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
    }
    missing = [n for pair in files.values() for n in pair if not (FASHION_DIR / n).is_file()]
    if missing:
        raise DataUnavailable(
            f"Fashion-MNIST is not installed ({FASHION_DIR} lacks {', '.join(missing)}): "
            f"install Debian's package with `{FASHION_APT}`"
        )
    pixels = [NumericFeature(column=f"px{i}", lower=0.0, upper=255.0) for i in range(784)]
    projection = None if k == 0 else RandomProjection(d_in=785, k=k, seed=seed)
    prep = PreprocessingSpec(
        features=tuple(pixels), intercept=True, row_norm="clip", projection=projection
    )
    parts = []
    rng = np.random.default_rng(0)
    for i, (images, labels) in enumerate(files.values()):
        img = _idx(FASHION_DIR / images)
        lab = _idx(FASHION_DIR / labels)
        if max_rows is not None:
            keep = np.sort(rng.permutation(img.shape[0])[: max_rows[i]])
            img, lab = img[keep], lab[keep]
        n = img.shape[0]
        X = prep.transform_codes(img.reshape(n, 784).astype(np.float64), np.zeros((n, 0), int))
        parts.append((np.ascontiguousarray(X), lab.astype(np.float64)))
    (X, y), (X_test, y_test) = parts
    how = f"Gaussian random projection to k = {k} (public seed {seed})" if k else "no projection"
    return ClassificationData(
        name="fashion-mnist",
        X=X,
        y=y,
        X_test=X_test,
        y_test=y_test,
        classes=FASHION_CLASSES,
        preprocessing=(
            f"pixel/255 (784 numeric features with bounds [0, 255]), intercept, rows onto the "
            f"unit ball, {how}, rows clipped to norm ≤ 1 again"
        ),
    )


_TRAIN_FIELDS = ("X", "y", "X_raw", "v")
_TEST_FIELDS = ("X_test", "y_test", "X_raw_test", "v_test")


def subsample(data: Data, n: int, n_test: int, *, seed: int = 0) -> Data:
    """``data`` cut to ``n`` training and ``n_test`` test rows of a fixed public permutation
    (for smoke runs); a size at least the split's keeps it whole."""
    rng = np.random.default_rng(seed)
    changes: dict[str, Any] = {}
    for fields, size in ((_TRAIN_FIELDS, n), (_TEST_FIELDS, n_test)):
        present = [f for f in fields if hasattr(data, f)]
        rows = getattr(data, present[0]).shape[0]
        keep = np.sort(rng.permutation(rows)[: min(size, rows)])
        for f in present:
            changes[f] = np.ascontiguousarray(getattr(data, f)[keep])
    return replace(data, **changes)
