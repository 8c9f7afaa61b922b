"""The one scikit-learn step PrivFit's exported pipelines need beyond scikit-learn itself.

A PrivFit model exported as ``skops`` is a ``sklearn.pipeline.Pipeline``:

1. a ``ColumnTransformer`` with one step per declared column, in the spec's order: numeric
   columns through ``MinMaxScaler(clip=True)`` fitted on the public bounds [a, b]
   (v ↦ clamp((v − a)/(b − a), 0, 1)), categorical columns through
   ``OneHotEncoder(categories=[declared list], handle_unknown="ignore")`` (values are given as
   text, as PrivFit compares them: integers in decimal, integral floats as integers);
2. :class:`UnitBallRows`: appends the intercept column 1, divides by the public constant of
   ``row_norm="scale"`` (1 for ``"clip"``), clips every row to the unit ball
   x ↦ x / max(1, ‖x‖), then applies the optional public projection R and clips again;
3. a ``LogisticRegression`` holding PrivFit's weights (classes −1/+1, no intercept of its own).

``pipeline.decision_function(frame)`` is PrivFit's score wᵀx and ``pipeline.predict`` its
label. :func:`load_skops` loads such a file trusting scikit-learn's types and
:class:`UnitBallRows` only; :func:`skops_privacy` reads the privacy record stored beside it.
scikit-learn and skops are optional dependencies (``pip install 'privfit-client[sklearn]'``).
"""

from __future__ import annotations

import json
import zipfile
from os import PathLike
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, TransformerMixin

__all__ = ["SKOPS_RECORD_MEMBER", "UnitBallRows", "load_skops", "skops_privacy"]

#: The member of a skops archive that carries PrivFit's JSON export (privacy record included).
SKOPS_RECORD_MEMBER = "privfit-export.json"


def _clip(X: NDArray[np.float64]) -> NDArray[np.float64]:
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    out: NDArray[np.float64] = X / np.maximum(norms, 1.0)[:, None]
    return out


class UnitBallRows(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """x ↦ clip(R · clip([x, 1] / divisor)), where clip(x) = x / max(1, ‖x‖).

    ``intercept`` appends the constant column 1; ``divisor`` is PrivFit's public M for
    ``row_norm="scale"`` and 1 for ``"clip"``; ``projection`` is the public k × d matrix R
    (or None). The map is per row and data-independent: ``fit`` learns nothing.
    """

    def __init__(
        self, intercept: bool = True, divisor: float = 1.0, projection: Any = None
    ) -> None:
        self.intercept = intercept
        self.divisor = divisor
        self.projection = projection

    def fit(self, X: Any, y: Any = None) -> UnitBallRows:  # noqa: ARG002 — scikit-learn API
        self.n_features_in_ = int(np.asarray(X).shape[1])
        return self

    def transform(self, X: Any) -> NDArray[np.float64]:
        A = np.asarray(X, dtype=np.float64)
        if self.intercept:
            A = np.hstack([A, np.ones((A.shape[0], 1))])
        A = _clip(A / float(self.divisor))
        if self.projection is not None:
            A = _clip(A @ np.asarray(self.projection, dtype=np.float64).T)
        return A


def load_skops(path: str | PathLike[str]) -> Any:
    """Load a PrivFit skops export, trusting scikit-learn's types and :class:`UnitBallRows`.

    Raises ``ValueError`` if the file holds any other type (it was not written by PrivFit).
    """
    import skops.io as sio

    trusted = {f"{__name__}.UnitBallRows"}
    untrusted = set(sio.get_untrusted_types(file=path)) - trusted
    if untrusted:
        raise ValueError(f"unexpected types in the file: {sorted(untrusted)}")
    return sio.load(path, trusted=sorted(trusted))


def skops_privacy(path: str | PathLike[str]) -> dict[str, Any]:
    """PrivFit's JSON export stored in a skops archive (``privacy`` is the privacy record)."""
    with zipfile.ZipFile(path) as archive:
        record: dict[str, Any] = json.loads(archive.read(SKOPS_RECORD_MEMBER))
    return record
