"""A model as a scikit-learn ``Pipeline``, saved with skops (no pickle) and as ONNX.

:func:`build_pipeline` turns an export document (:mod:`service.domain.export`) into the
pipeline described in :mod:`privfit_client.sklearn`: a ``ColumnTransformer`` of the public
per-column encoding (``MinMaxScaler(clip=True)`` fitted on the declared bounds [a, b], which
is v ↦ clamp((v − a)/(b − a), 0, 1) — the same map as clamp-then-rescale; one-hot against the
declared categories, unknown values → all-zero block), then ``UnitBallRows`` (intercept
column, ``row_norm`` divisor M or 1, the clip x ↦ x / max(1, ‖x‖), the optional public
projection and its clip), then a ``LogisticRegression`` carrying the weights. Every fitted
quantity comes from the public spec and the released weights: building it reads no data and
costs no privacy. ``decision_function`` equals PrivFit's score wᵀx up to float rounding.

:func:`to_skops` writes it with ``skops.io`` and adds the JSON export document (privacy
record included) as the archive member ``privfit-export.json``; :func:`to_onnx` converts it
with skl2onnx (double precision; one input per column in the spec's order: ``float64
[N, 1]`` for numeric columns, ``string [N, 1]`` for categorical ones, named as skl2onnx
sanitizes them, the original names listed in ``privfit.columns``; outputs ``label`` and
``scores`` = [−s, s]) and stores the document in ``metadata_props`` (``privfit.export``,
``privfit.privacy``, ``privfit.model_id``, ``privfit.columns``). scikit-learn, skops and
skl2onnx are the server's ``export`` extra and are imported lazily.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from service.domain.errors import InvalidInputError

__all__ = ["EXPORT_MEDIA_TYPES", "build_pipeline", "to_onnx", "to_skops"]

#: Media type of each binary export format.
EXPORT_MEDIA_TYPES = {"skops": "application/octet-stream", "onnx": "application/octet-stream"}
_RECORD_MEMBER = "privfit-export.json"


def _require_linear(doc: Mapping[str, Any]) -> None:
    if doc.get("weights") is None:
        raise InvalidInputError(
            "only linear models export as scikit-learn pipelines (skops, onnx); use format=json",
            errors=[{"loc": ["query", "format"], "msg": "the model is not linear"}],
        )


def _column_transformer(spec: Mapping[str, Any]) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import MinMaxScaler, OneHotEncoder

    steps: list[tuple[str, Any, list[str]]] = []
    for i, f in enumerate(spec["features"]):
        column = str(f["column"])
        if f["type"] == "numeric":
            steps.append((f"f{i}", MinMaxScaler(clip=True), [column]))
        else:
            categories = [str(c) for c in f["categories"]]
            encoder = OneHotEncoder(
                categories=[categories],
                handle_unknown="ignore",
                sparse_output=False,
                dtype=np.float64,
            )
            steps.append((f"f{i}", encoder, [column]))
    return ColumnTransformer(steps, remainder="drop", sparse_threshold=0.0)


def build_pipeline(doc: Mapping[str, Any]) -> Any:
    """The fitted scikit-learn pipeline equivalent to the exported linear model."""
    _require_linear(doc)
    import pandas as pd
    from privfit_client.sklearn import UnitBallRows
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    spec = doc["preprocessing"]
    features = spec["features"]
    # Fitted on a frame built from the spec alone (bounds, category lists): the steps learn
    # exactly the public parameters and nothing else.
    transformer = _column_transformer(spec)
    transformer.fit(_public_frame(spec, pd))
    intercept = bool(spec["intercept"])
    divisor = (
        math.sqrt(len(features) + (1 if intercept else 0)) if spec["row_norm"] == "scale" else 1.0
    )
    matrix = doc.get("projection_matrix")
    rows = UnitBallRows(
        intercept=intercept,
        divisor=divisor,
        projection=None if matrix is None else np.asarray(matrix, dtype=np.float64),
    )
    coef = np.asarray(doc["weights"]["coef"], dtype=np.float64).reshape(1, -1)
    width = sum(1 if f["type"] == "numeric" else len(f["categories"]) for f in features)
    rows.n_features_in_ = width
    estimator = LogisticRegression(fit_intercept=False)
    estimator.coef_ = coef
    estimator.intercept_ = np.array([float(doc["weights"]["intercept"])])
    estimator.classes_ = np.array(doc["classes"])
    estimator.n_features_in_ = coef.shape[1]
    return Pipeline([("preprocess", transformer), ("unit_ball", rows), ("linear", estimator)])


def _public_frame(spec: Mapping[str, Any], pd: Any) -> Any:
    """A frame built from the spec alone: both bounds of every numeric column, every declared
    category of every categorical column (padded by repetition), so that refitting the
    per-column steps on it yields exactly the public parameters."""
    features = spec["features"]
    n = max([2] + [len(f["categories"]) for f in features if f["type"] != "numeric"])
    data: dict[str, list[Any]] = {}
    for f in features:
        if f["type"] == "numeric":
            lower, upper = float(f["lower"]), float(f["upper"])
            data[str(f["column"])] = [lower] + [upper] * (n - 1)
        else:
            cats = [str(c) for c in f["categories"]]
            data[str(f["column"])] = [cats[i % len(cats)] for i in range(n)]
    return pd.DataFrame(data, columns=[str(f["column"]) for f in features])


def _document_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, allow_nan=False)


def to_skops(doc: Mapping[str, Any]) -> bytes:
    """The pipeline saved with ``skops.io`` plus the JSON document as an archive member."""
    import skops.io as sio

    pipeline = build_pipeline(doc)
    buffer = io.BytesIO(sio.dumps(pipeline))
    with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(_RECORD_MEMBER, _document_json(doc))
    return buffer.getvalue()


def _unit_ball_shape(operator: Any) -> None:
    from skl2onnx.common.data_types import DoubleTensorType

    step = operator.raw_operator
    n = operator.inputs[0].get_first_dimension()
    if step.projection is not None:
        width = int(np.asarray(step.projection).shape[0])
    else:
        width = int(step.n_features_in_) + (1 if step.intercept else 0)
    operator.outputs[0].type = DoubleTensorType([n, width])


def _unit_ball_convert(scope: Any, operator: Any, container: Any) -> None:
    """ONNX for ``UnitBallRows``: Concat(x, 1) / divisor, then x / Max(√(x² · 1), 1), then
    (x Rᵀ) and the same clip; double precision throughout."""
    from skl2onnx.algebra.onnx_ops import (
        OnnxConcat,
        OnnxConstantOfShape,
        OnnxDiv,
        OnnxMatMul,
        OnnxMax,
        OnnxMul,
        OnnxShape,
        OnnxSlice,
        OnnxSqrt,
    )

    opv = container.target_opset
    step = operator.raw_operator
    x: Any = operator.inputs[0]
    one = np.array([1.0], dtype=np.float64)

    def clip(a: Any, width: int) -> Any:
        ones = np.ones((width, 1), dtype=np.float64)
        squares = OnnxMatMul(OnnxMul(a, a, op_version=opv), ones, op_version=opv)
        norm = OnnxSqrt(squares, op_version=opv)
        return OnnxDiv(a, OnnxMax(norm, one, op_version=opv), op_version=opv)

    width = int(step.n_features_in_)
    if step.intercept:
        n = OnnxSlice(
            OnnxShape(x, op_version=opv),
            np.array([0], dtype=np.int64),
            np.array([1], dtype=np.int64),
            op_version=opv,
        )
        shape = OnnxConcat(n, np.array([1], dtype=np.int64), axis=0, op_version=opv)
        from onnx import numpy_helper

        ones_col = OnnxConstantOfShape(shape, value=numpy_helper.from_array(one), op_version=opv)
        x = OnnxConcat(x, ones_col, axis=1, op_version=opv)
        width += 1
    divisor = np.array([float(step.divisor)], dtype=np.float64)
    a = clip(OnnxDiv(x, divisor, op_version=opv), width)
    if step.projection is not None:
        matrix = np.asarray(step.projection, dtype=np.float64)
        a = clip(OnnxMatMul(a, matrix.T.copy(), op_version=opv), int(matrix.shape[0]))
    final = OnnxMul(a, one, op_version=opv, output_names=operator.outputs[:1])
    final.add_to(scope, container)


def _register_converter() -> None:
    from privfit_client.sklearn import UnitBallRows
    from skl2onnx import update_registered_converter

    update_registered_converter(
        UnitBallRows, "PrivFitUnitBallRows", _unit_ball_shape, _unit_ball_convert
    )


def to_onnx(doc: Mapping[str, Any]) -> bytes:
    """The pipeline as an ONNX model with the JSON document in its ``metadata_props``."""
    from skl2onnx import to_onnx as skl_to_onnx
    from skl2onnx.common.data_types import DoubleTensorType, StringTensorType

    pipeline = build_pipeline(doc)
    _register_converter()
    inputs = [
        (
            str(f["column"]),
            DoubleTensorType([None, 1]) if f["type"] == "numeric" else StringTensorType([None, 1]),
        )
        for f in doc["preprocessing"]["features"]
    ]
    linear = pipeline.named_steps["linear"]
    model = skl_to_onnx(
        pipeline,
        initial_types=inputs,
        options={id(linear): {"zipmap": False, "raw_scores": True}},
    )
    for node in model.graph.node:  # the converter calls the raw scores "probabilities"
        node.input[:] = ["scores" if v == "probabilities" else v for v in node.input]
        node.output[:] = ["scores" if v == "probabilities" else v for v in node.output]
    for output in model.graph.output:
        if output.name == "probabilities":
            output.name = "scores"
    entries = {
        "privfit.export": _document_json(doc),
        "privfit.privacy": json.dumps(doc["privacy"], sort_keys=True, allow_nan=False),
        "privfit.model_id": str(doc["model_id"]),
        "privfit.columns": json.dumps([str(f["column"]) for f in doc["preprocessing"]["features"]]),
    }
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    data: bytes = model.SerializeToString()
    return data
