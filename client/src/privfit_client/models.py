# Generated from openapi/openapi.json by client/generate_models.py: do not edit.
# Regenerate with `make client-models`; tests/client/test_models.py checks it is current.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from typing_extensions import TypeAliasType


class AdasspOptions(BaseModel):
    """
    The options (`params`) of `adassp`. AdaSSP's option: the failure probability ρ of its adaptive ridge rule.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    rho: Annotated[
        float | None,
        Field(
            description="Failure probability of the adaptive ridge rule (public; utility only, never privacy).",
            gt=0.0,
            lt=1.0,
            title="Rho",
        ),
    ] = 0.05


class AuditEventRead(BaseModel):
    """
    A security-relevant event. Keys appear only by their public prefix.
    """

    action: Annotated[
        str, Field(description="What happened, e.g. site.created, auth.failed.", title="Action")
    ]
    actor_role: Annotated[
        str | None,
        Field(description="admin or site; null when unauthenticated.", title="Actor Role"),
    ]
    actor_site_id: Annotated[str | None, Field(title="Actor Site Id")]
    client_ip: Annotated[str | None, Field(title="Client Ip")]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    details: Annotated[dict[str, Any] | None, Field(title="Details")]
    id: Annotated[int, Field(title="Id")]
    key_prefix: Annotated[
        str | None,
        Field(description="Public prefix of the key involved, if any.", title="Key Prefix"),
    ]
    outcome: Annotated[str, Field(description="success or failure.", title="Outcome")]
    request_id: Annotated[str | None, Field(title="Request Id")]
    subject_id: Annotated[str | None, Field(title="Subject Id")]
    subject_type: Annotated[str | None, Field(title="Subject Type")]


AverageAggregationInModelsAverageAggregationInModel = TypeAliasType(
    "AverageAggregationInModelsAverageAggregationInModel",
    Annotated[str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$")],
)


AverageAggregationInModels = TypeAliasType(
    "AverageAggregationInModels",
    Annotated[
        list[AverageAggregationInModelsAverageAggregationInModel],
        Field(
            description="Contributed model ids to combine; default: every contributed model.",
            max_length=1000,
            min_length=1,
            title="Models",
        ),
    ],
)


AverageAggregationInName = TypeAliasType(
    "AverageAggregationInName", Annotated[str, Field(max_length=200, min_length=1, title="Name")]
)


AverageAggregationInWeightsAverageAggregationInWeight = TypeAliasType(
    "AverageAggregationInWeightsAverageAggregationInWeight", Annotated[float, Field(ge=0.0)]
)


AverageAggregationInWeights = TypeAliasType(
    "AverageAggregationInWeights",
    Annotated[
        list[AverageAggregationInWeightsAverageAggregationInWeight],
        Field(
            description="Public, non-negative weights, one per model in `models` order (or in contribution order); normalised to sum 1. Default: equal weights.",
            max_length=1000,
            min_length=1,
            title="Weights",
        ),
    ],
)


class AverageAggregationIn(BaseModel):
    """
    `average` (seed 000, Alg. 4): the (optionally weighted) average of the contributed
    models' coefficients. Nothing is charged; the result's privacy record lists the guarantee
    each input carried.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    method: Annotated[Literal["average"], Field(title="Method")]
    models: Annotated[
        AverageAggregationInModels | None,
        Field(
            description="Contributed model ids to combine; default: every contributed model.",
            title="Models",
        ),
    ] = None
    name: Annotated[AverageAggregationInName | None, Field(title="Name")] = None
    weights: Annotated[
        AverageAggregationInWeights | None,
        Field(
            description="Public, non-negative weights, one per model in `models` order (or in contribution order); normalised to sum 1. Default: equal weights.",
            title="Weights",
        ),
    ] = None


class BudgetCaps(BaseModel):
    """
    The dataset's (ε, δ) caps.
    """

    delta: Annotated[float, Field(title="Delta")]
    epsilon: Annotated[float, Field(title="Epsilon")]


class BudgetIn(BaseModel):
    """
    The dataset's privacy budget caps; each at most the server's maximum.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(description="Total δ.", ge=0.0, lt=1.0, title="Delta")] = (
        0.0
    )
    epsilon: Annotated[
        float,
        Field(
            description="Total ε of every fit on this dataset (at least 1e-06).",
            ge=1e-06,
            title="Epsilon",
        ),
    ]


class BudgetLeft(BaseModel):
    """
    The dataset's remaining budget now, and whether it covers the fit.
    """

    remaining_delta: Annotated[float, Field(title="Remaining Delta")]
    remaining_epsilon: Annotated[float, Field(title="Remaining Epsilon")]
    sufficient: Annotated[bool, Field(title="Sufficient")]


class CategoricalFeatureIn(BaseModel):
    """
    A categorical column one-hot encoded against the declared list; other values map to an
    all-zero block.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    categories: Annotated[
        list[str | int],
        Field(
            description="The public category list (integers are compared in decimal).",
            title="Categories",
        ),
    ]
    column: Annotated[str, Field(max_length=1000, min_length=1, title="Column")]
    type: Annotated[Literal["categorical"], Field(title="Type")]


class Coefficient(BaseModel):
    """
    One weight of a linear model, by the name of its design-matrix column.
    """

    feature: Annotated[str, Field(title="Feature")]
    weight: Annotated[float, Field(title="Weight")]


class ContributionRead(BaseModel):
    """
    A contribution: a model, or a grant on a dataset's budget.
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    dataset_id: Annotated[str | None, Field(title="Dataset Id")]
    delta_cap: Annotated[float | None, Field(title="Delta Cap")]
    delta_spent: Annotated[float | None, Field(title="Delta Spent")]
    epsilon_cap: Annotated[
        float | None,
        Field(description="For a grant: the most ε the study may spend.", title="Epsilon Cap"),
    ]
    epsilon_spent: Annotated[
        float | None,
        Field(
            description="For a grant: the ε the study's federated fits have charged through it.",
            title="Epsilon Spent",
        ),
    ]
    id: Annotated[str, Field(title="Id")]
    kind: Annotated[Literal["model", "dataset"], Field(title="Kind")]
    model_id: Annotated[str | None, Field(title="Model Id")]
    site_id: Annotated[str, Field(description="The contributing site.", title="Site Id")]
    used: Annotated[
        bool,
        Field(
            description="Used by an aggregation or federated fit: it can no longer be withdrawn.",
            title="Used",
        ),
    ]


DatasetCreatePositiveFraction = TypeAliasType(
    "DatasetCreatePositiveFraction",
    Annotated[
        float,
        Field(
            description="Optional public prior of the positive class's frequency (binary labels only; e.g. from a census; never read from the data). Its majority class, max(p, 1 − p), is the baseline every fit's expected accuracy is compared with (a `below_majority_baseline` warning when below), when the site has no public reference dataset of this spec.",
            gt=0.0,
            lt=1.0,
            title="Positive Fraction",
        ),
    ],
)


class DatasetGrantIn(BaseModel):
    """
    Let the study spend up to (ε, δ) of one of the calling site's datasets (used by
    federated fits); the caps must fit within the dataset's own budget caps.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    dataset_id: Annotated[
        str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$", title="Dataset Id")
    ]
    delta_cap: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta Cap")] = 0.0
    epsilon_cap: Annotated[float, Field(ge=1e-06, le=1000.0, title="Epsilon Cap")]


DatasetLabelInClasses = TypeAliasType(
    "DatasetLabelInClasses",
    Annotated[
        list[str | int | bool],
        Field(
            description="Multi-class: the classes in their public order, compared like `positive`; two classes are the binary form (negative first).",
            max_length=1000,
            title="Classes",
        ),
    ],
)


class DatasetLabelIn(BaseModel):
    """
    The label column and what it holds, in one of three forms (a mixture is a 422 naming
    each field that does not belong):

    * **binary**: `positive` and `negative` (without `negative`, the earlier form, an upload is read
      only when the column holds exactly one value besides `positive`);
    * **multi-class**: `classes`, 3 to the server's `max_classes` (default 100) distinct values
      in a public order (class k is `classes[k]`; a predicted class is answered by its
      value). A list of exactly two is the binary form with `negative = classes[0]` and
      `positive = classes[1]`, and is stored and shown as such. A row of no declared class is
      refused (422 `invalid-label-values`, counting rows, never showing values);
    * **numeric** (regression): finite public bounds `lower` < `upper`. A value outside them
      is clipped to the nearer bound, and the ingest report counts the rows clipped
      (`label_clipped_rows`); a value that is not a number is refused like one in a numeric
      feature. Predictions are numbers within [lower, upper].
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    classes: Annotated[
        DatasetLabelInClasses | None,
        Field(
            description="Multi-class: the classes in their public order, compared like `positive`; two classes are the binary form (negative first).",
            title="Classes",
        ),
    ] = None
    column: Annotated[str, Field(max_length=1000, min_length=1, title="Column")]
    lower: Annotated[
        float | None,
        Field(
            description="Numeric label: its public lower bound (values below are clipped to it).",
            title="Lower",
        ),
    ] = None
    negative: Annotated[
        str | int | bool | None,
        Field(
            description="Binary: the negative class, compared like `positive`. Declare it: without it an upload whose label column holds more than one other value is refused.",
            title="Negative",
        ),
    ] = None
    positive: Annotated[
        str | int | bool | None,
        Field(
            description="Binary: the positive class. Compared as text, exactly (case and spaces count): integers in decimal, booleans as 'True'/'False'.",
            title="Positive",
        ),
    ] = None
    upper: Annotated[
        float | None,
        Field(
            description="Numeric label: its public upper bound (values above are clipped to it).",
            title="Upper",
        ),
    ] = None


DpSgdOptionsProjectionDim = TypeAliasType(
    "DpSgdOptionsProjectionDim",
    Annotated[
        int,
        Field(
            description="Dimension k of a public random projection of the rows (null: none); SGD runs in dimension k and the released weights are folded back to d.",
            ge=1,
            le=1000000,
            title="Projection Dim",
        ),
    ],
)


DpSgdOptionsProjectionSeed = TypeAliasType(
    "DpSgdOptionsProjectionSeed",
    Annotated[
        int,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            ge=0,
            le=9007199254740991,
            title="Projection Seed",
        ),
    ],
)


DpSgdOptionsRadius = TypeAliasType(
    "DpSgdOptionsRadius",
    Annotated[
        float,
        Field(
            description="Radius R of the ball the iterates are projected onto (null: no projection).",
            gt=0.0,
            title="Radius",
        ),
    ],
)


class DpSgdOptions(BaseModel):
    """
    The options (`params`) of `dp_sgd`. DP-SGD's options. Also checked with the dataset: b ≤ n; `eta` only with a schedule that uses it, `projection_kind` and `projection_seed` only with `projection_dim`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    batch_size: Annotated[
        int | None,
        Field(
            description="Mini-batch size b (1 ≤ b ≤ n); each pass makes ⌊n/b⌋ noisy updates. Default: min(50, n); for K classes min(n, max(50, ⌈dK/ε_pass⌉)), ε_pass the budget of one pass.",
            ge=1,
            title="Batch Size",
        ),
    ] = None
    epochs: Annotated[
        int | None,
        Field(
            description="Passes E over the data (each uses every row once).",
            ge=1,
            le=10000,
            title="Epochs",
        ),
    ] = 1
    eta: Annotated[
        float | None,
        Field(
            description="Base step size η of the `constant` and `inverse_sqrt` schedules (leave it out for `inverse`). Default: 1; for K classes with the default batch size and `inverse_sqrt`, √(b/50) (the `inverse` schedule has none).",
            gt=0.0,
            title="Eta",
        ),
    ] = None
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    projection_dim: Annotated[
        DpSgdOptionsProjectionDim | None,
        Field(
            description="Dimension k of a public random projection of the rows (null: none); SGD runs in dimension k and the released weights are folded back to d.",
            title="Projection Dim",
        ),
    ] = None
    projection_kind: Annotated[
        Literal["gaussian", "achlioptas"] | None,
        Field(
            description="The projection matrix's entries (with `projection_dim` only; omitted: `gaussian`).",
            title="Projection Kind",
        ),
    ] = None
    projection_seed: Annotated[
        DpSgdOptionsProjectionSeed | None,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            title="Projection Seed",
        ),
    ] = None
    radius: Annotated[
        DpSgdOptionsRadius | None,
        Field(
            description="Radius R of the ball the iterates are projected onto (null: no projection).",
            title="Radius",
        ),
    ] = None
    schedule: Annotated[
        Literal["constant", "inverse_sqrt", "inverse"] | None,
        Field(
            description="Step sizes: `constant` η_t = η, `inverse_sqrt` η_t = η/√t, `inverse` η_t = 1/(λt).",
            title="Schedule",
        ),
    ] = "inverse_sqrt"


DpSgdTunableOptionsEta = TypeAliasType(
    "DpSgdTunableOptionsEta",
    Annotated[
        float,
        Field(
            description='Base step size η of the `constant` and `inverse_sqrt` schedules (leave it out for `inverse`). Default: 1; for K classes with the default batch size and `inverse_sqrt`, √(b/50) (the `inverse` schedule has none). Or `{"candidates": [...]}` (1 to 10 distinct values > 0): PrivFit chooses one privately within the same (ε, δ).',
            gt=0.0,
            title="Eta",
        ),
    ],
)


DpSgdTunableOptionsProjectionDim = TypeAliasType(
    "DpSgdTunableOptionsProjectionDim",
    Annotated[
        int,
        Field(
            description="Dimension k of a public random projection of the rows (null: none); SGD runs in dimension k and the released weights are folded back to d.",
            ge=1,
            le=1000000,
            title="Projection Dim",
        ),
    ],
)


DpSgdTunableOptionsProjectionSeed = TypeAliasType(
    "DpSgdTunableOptionsProjectionSeed",
    Annotated[
        int,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            ge=0,
            le=9007199254740991,
            title="Projection Seed",
        ),
    ],
)


DpSgdTunableOptionsRadius = TypeAliasType(
    "DpSgdTunableOptionsRadius",
    Annotated[
        float,
        Field(
            description="Radius R of the ball the iterates are projected onto (null: no projection).",
            gt=0.0,
            title="Radius",
        ),
    ],
)


class EvaluationCreate(BaseModel):
    """
    Evaluate a model on a dataset the caller owns, spending ε of that dataset's budget.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    dataset_id: Annotated[
        str,
        Field(
            description="A dataset of the calling site with the model's spec (same features, preprocessing and label).",
            max_length=64,
            min_length=1,
            title="Dataset Id",
        ),
    ]
    epsilon: Annotated[
        float,
        Field(
            description="The evaluation's total ε (δ = 0). Binary label: half to the confusion matrix, half to the score histograms behind the ROC curve; multi-class: all to the K × K confusion matrix; numeric label: ε/5 to each of Σr², Σ|r|, Σy, Σy² and ε/15 to each of Σr⁴, Σy³, Σy⁴ (residuals r and labels y in the label's [-1, 1] units).",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ]


class EvaluationRead(BaseModel):
    """
    A released private evaluation: for a binary label the noisy confusion matrix, metrics
    with intervals that include the noise and the DP ROC curve; for a multi-class label the
    noisy K × K confusion matrix with per-class metrics; for a numeric label private RMSE, MAE
    and R² with intervals; and its privacy record.
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    dataset_id: Annotated[str, Field(title="Dataset Id")]
    epsilon: Annotated[float, Field(title="Epsilon")]
    id: Annotated[str, Field(description="The id of the job that computed it.", title="Id")]
    model_id: Annotated[str, Field(title="Model Id")]
    privacy: Annotated[
        dict[str, Any], Field(description="What was protected, how, and warnings.", title="Privacy")
    ]
    result: Annotated[
        dict[str, Any],
        Field(
            description="Binary label: `confusion_matrix` (noisy tp, fp, fn, tn), `metrics` (estimate and interval of accuracy, precision, recall, f1), `confidence`, `roc` (noisy per-class histograms over public bins, fpr, tpr, auc), `epsilon_split`, `noise`. Multi-class (`task`: `multiclass`): `classes` in declared order, `confusion_matrix` (`counts`, rows the true class, columns the class of highest score), `metrics` (accuracy, macro_f1), `per_class` (precision, recall, f1 of each class), each with estimate and interval. Numeric label (`task`: `regression`): `metrics` (rmse and mae in the label's units, r2; an interval end is null when unbounded), `label_bounds`, the noisy `sums`, `epsilon_split`, `noise`.",
            title="Result",
        ),
    ]


FeatureAggregationInName = TypeAliasType(
    "FeatureAggregationInName", Annotated[str, Field(max_length=200, min_length=1, title="Name")]
)


FeatureAggregationInSourceModelsFeatureAggregationInSourceModel = TypeAliasType(
    "FeatureAggregationInSourceModelsFeatureAggregationInSourceModel",
    Annotated[str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$")],
)


FeatureAggregationInSourceModels = TypeAliasType(
    "FeatureAggregationInSourceModels",
    Annotated[
        list[FeatureAggregationInSourceModelsFeatureAggregationInSourceModel],
        Field(
            description="Contributed model ids to stack; default: all.",
            max_length=1000,
            min_length=1,
            title="Source Models",
        ),
    ],
)


class FeatureAggregationIn(BaseModel):
    """
    `feature` (seed 000, Alg. 5): stack the site models and fit the meta-level model with a
    DP mechanism on the coordinator's own holdout dataset, whose budget is charged.
    `linear` meta-features x ↦ s·M_f x are released as the linear model s·M_fᵀω; `sigmoid`
    ones (seed 003) as a stacked model. The scale comes from the public site models only.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilon: Annotated[
        float,
        Field(
            description="ε charged to the holdout dataset.", ge=1e-06, le=1000.0, title="Epsilon"
        ),
    ]
    holdout_dataset_id: Annotated[
        str,
        Field(
            description="A labelled dataset the coordinator owns.",
            max_length=64,
            min_length=1,
            pattern="^[0-9a-f]{32}$",
            title="Holdout Dataset Id",
        ),
    ]
    loss: Annotated[Literal["logistic", "huber"] | None, Field(title="Loss")] = "logistic"
    mechanism: Annotated[
        Literal["objective_perturbation", "output_perturbation"] | None, Field(title="Mechanism")
    ] = "objective_perturbation"
    meta_features: Annotated[Literal["linear", "sigmoid"] | None, Field(title="Meta Features")] = (
        "linear"
    )
    method: Annotated[Literal["feature"], Field(title="Method")]
    name: Annotated[FeatureAggregationInName | None, Field(title="Name")] = None
    regularization: Annotated[
        float | None,
        Field(description="λ of the meta level.", ge=1e-10, le=1000000.0, title="Regularization"),
    ] = 0.01
    source_models: Annotated[
        FeatureAggregationInSourceModels | None,
        Field(description="Contributed model ids to stack; default: all.", title="Source Models"),
    ] = None


class FederatedCostRead(BaseModel):
    """
    What one participating dataset would be charged and whether it can pay. Another site's
    remaining budget and row count are not shown.
    """

    dataset_id: Annotated[str, Field(title="Dataset Id")]
    dataset_sufficient: Annotated[
        bool,
        Field(description="The dataset's own budget covers the cost.", title="Dataset Sufficient"),
    ]
    delta: Annotated[float, Field(title="Delta")]
    epsilon: Annotated[float, Field(title="Epsilon")]
    grant_left_delta: Annotated[float, Field(title="Grant Left Delta")]
    grant_left_epsilon: Annotated[
        float, Field(description="Left under the study's grant on it.", title="Grant Left Epsilon")
    ]
    remaining_delta: Annotated[float | None, Field(title="Remaining Delta")]
    remaining_epsilon: Annotated[
        float | None,
        Field(
            description="Left on the dataset's own budget; only for the caller's own datasets.",
            title="Remaining Epsilon",
        ),
    ]
    site_id: Annotated[str, Field(title="Site Id")]
    sufficient: Annotated[bool, Field(title="Sufficient")]


FederatedFitCreateDatasetsFederatedFitCreateDataset = TypeAliasType(
    "FederatedFitCreateDatasetsFederatedFitCreateDataset",
    Annotated[str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$")],
)


FederatedFitCreateDatasets = TypeAliasType(
    "FederatedFitCreateDatasets",
    Annotated[
        list[FederatedFitCreateDatasetsFederatedFitCreateDataset],
        Field(
            description="Granted dataset ids taking part; default: every dataset granted to the study (at least two).",
            max_length=100,
            min_length=1,
            title="Datasets",
        ),
    ],
)


FederatedFitCreateEpsilon = TypeAliasType(
    "FederatedFitCreateEpsilon",
    Annotated[
        float,
        Field(
            description="ε each participating dataset may be charged (required unless the protocol's parameters make it non-private); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FederatedFitCreateLoss = TypeAliasType(
    "FederatedFitCreateLoss",
    Annotated[
        str,
        Field(
            description="`logistic` (default) or `huber` (`h` in `params`); `squared` (the default) for `distributed_lasso`.",
            max_length=32,
            title="Loss",
        ),
    ],
)


FederatedFitCreateName = TypeAliasType(
    "FederatedFitCreateName", Annotated[str, Field(max_length=200, min_length=1, title="Name")]
)


class FederatedFitCreate(BaseModel):
    """
    A multiparty protocol over the datasets members granted to the study.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    datasets: Annotated[
        FederatedFitCreateDatasets | None,
        Field(
            description="Granted dataset ids taking part; default: every dataset granted to the study (at least two).",
            title="Datasets",
        ),
    ] = None
    delta: Annotated[
        float | None, Field(description="δ per dataset.", ge=0.0, lt=1.0, title="Delta")
    ] = 0.0
    epsilon: Annotated[
        FederatedFitCreateEpsilon | None,
        Field(
            description="ε each participating dataset may be charged (required unless the protocol's parameters make it non-private); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FederatedFitCreateLoss | None,
        Field(
            description="`logistic` (default) or `huber` (`h` in `params`); `squared` (the default) for `distributed_lasso`.",
            title="Loss",
        ),
    ] = None
    name: Annotated[FederatedFitCreateName | None, Field(title="Name")] = None
    params: Annotated[
        dict[str, Any] | None,
        Field(
            description="The protocol's own options (e.g. `iterations`; `perturbation`, `topology`, `delta_prime` for `admm`, and `noise`: `laplace` (default) or `gaussian` (primal perturbation accounted in zCDP, needs `delta` > 0; `zcdp_conversion`: `cks` or `bun_steinke`); `noise` for `distributed_lasso`). Unknown options are a 422.",
            title="Params",
        ),
    ] = None
    protocol: Annotated[
        Literal["noisy_average", "psgd", "admm", "distributed_lasso"],
        Field(
            description="`noisy_average`, `psgd`, `admm` or `distributed_lasso`.",
            max_length=64,
            min_length=1,
            title="Protocol",
        ),
    ]
    regularization: Annotated[
        float | None,
        Field(
            description="λ of the objective (for `distributed_lasso`: the L1 strength), from 1e-10 to 1e+06.",
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ] = 0.01


class FederatedQuoteRead(BaseModel):
    """
    A dry run of a federated fit: per-dataset costs and the calibration; nothing spent.
    """

    assumptions: Annotated[list[str], Field(title="Assumptions")]
    calibration: Annotated[
        dict[str, Any],
        Field(
            description="The public calibration numbers (none that depends on a site's row count).",
            title="Calibration",
        ),
    ]
    composition: Annotated[
        str, Field(description="How each dataset's total (ε, δ) arises.", title="Composition")
    ]
    costs: Annotated[list[FederatedCostRead], Field(title="Costs")]
    dry_run: Annotated[bool | None, Field(title="Dry Run")] = True
    private: Annotated[
        bool,
        Field(
            description="False when the parameters make the protocol non-private.", title="Private"
        ),
    ]
    protocol: Annotated[str, Field(title="Protocol")]
    rounds: Annotated[
        int, Field(description="Communication rounds the protocol will run.", title="Rounds")
    ]


class FitCost(BaseModel):
    """
    The (ε, δ) charged to the dataset's budget.
    """

    delta: Annotated[float, Field(title="Delta")]
    epsilon: Annotated[float, Field(title="Epsilon")]


FitCreateAdasspEpsilon = TypeAliasType(
    "FitCreateAdasspEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateAdasspLoss = TypeAliasType(
    "FitCreateAdasspLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateAdasspRegularization = TypeAliasType(
    "FitCreateAdasspRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateDpSgdEpsilon = TypeAliasType(
    "FitCreateDpSgdEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateDpSgdLoss = TypeAliasType(
    "FitCreateDpSgdLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateDpSgdRegularization = TypeAliasType(
    "FitCreateDpSgdRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateGaussianObjectivePerturbationEpsilon = TypeAliasType(
    "FitCreateGaussianObjectivePerturbationEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateGaussianObjectivePerturbationLoss = TypeAliasType(
    "FitCreateGaussianObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateGaussianObjectivePerturbationRegularization = TypeAliasType(
    "FitCreateGaussianObjectivePerturbationRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateGeneralizedObjectivePerturbationEpsilon = TypeAliasType(
    "FitCreateGeneralizedObjectivePerturbationEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateGeneralizedObjectivePerturbationLoss = TypeAliasType(
    "FitCreateGeneralizedObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateGeneralizedObjectivePerturbationRegularization = TypeAliasType(
    "FitCreateGeneralizedObjectivePerturbationRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateNoisyGdEpsilon = TypeAliasType(
    "FitCreateNoisyGdEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateNoisyGdLoss = TypeAliasType(
    "FitCreateNoisyGdLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateNoisyGdRegularization = TypeAliasType(
    "FitCreateNoisyGdRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateNonPrivateEpsilon = TypeAliasType(
    "FitCreateNonPrivateEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateNonPrivateLoss = TypeAliasType(
    "FitCreateNonPrivateLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateNonPrivateRegularization = TypeAliasType(
    "FitCreateNonPrivateRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateObjectivePerturbationEpsilon = TypeAliasType(
    "FitCreateObjectivePerturbationEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateObjectivePerturbationLoss = TypeAliasType(
    "FitCreateObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateObjectivePerturbationRegularization = TypeAliasType(
    "FitCreateObjectivePerturbationRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateOutputPerturbationEpsilon = TypeAliasType(
    "FitCreateOutputPerturbationEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateOutputPerturbationLoss = TypeAliasType(
    "FitCreateOutputPerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateOutputPerturbationRegularization = TypeAliasType(
    "FitCreateOutputPerturbationRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateStackingFeaturesEpsilon = TypeAliasType(
    "FitCreateStackingFeaturesEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateStackingFeaturesLoss = TypeAliasType(
    "FitCreateStackingFeaturesLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateStackingFeaturesRegularization = TypeAliasType(
    "FitCreateStackingFeaturesRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


FitCreateStackingSamplesEpsilon = TypeAliasType(
    "FitCreateStackingSamplesEpsilon",
    Annotated[
        float,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            ge=1e-06,
            le=1000.0,
            title="Epsilon",
        ),
    ],
)


FitCreateStackingSamplesLoss = TypeAliasType(
    "FitCreateStackingSamplesLoss",
    Annotated[
        str,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            max_length=32,
            title="Loss",
        ),
    ],
)


FitCreateStackingSamplesRegularization = TypeAliasType(
    "FitCreateStackingSamplesRegularization",
    Annotated[
        float,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            ge=1e-10,
            le=1000000.0,
            title="Regularization",
        ),
    ],
)


class FitQuoteRead(BaseModel):
    """
    A dry run: what the fit would cost and how it would randomise. Nothing was spent.
    """

    auto: Annotated[
        dict[str, Any] | None,
        Field(
            description="For `mechanism: auto`: the choice and every candidate's predicted figures (`mechanism` above is the chosen one).",
            title="Auto",
        ),
    ] = None
    budget: BudgetLeft
    calibration: Annotated[
        dict[str, Any],
        Field(
            description="The calibration: every noise parameter, named as in the papers.",
            title="Calibration",
        ),
    ]
    composition: Annotated[
        str, Field(description="How the fit's total (ε, δ) arises.", title="Composition")
    ]
    cost: FitCost
    dry_run: Annotated[bool | None, Field(title="Dry Run")] = True
    expected_accuracy: Annotated[
        dict[str, Any] | None,
        Field(
            description="Expected accuracy (mean, p10–p90 of fits simulated on a public reference) next to the majority-class baseline (`majority_baseline`, null when no public source gives it). On a numeric label (`metric: \"rmse\"`): the RMSE band in the label's units next to predicting the public reference's mean (`mean_baseline_rmse`). Multi-class and numeric fits have a band when the site has a public reference dataset, or, for mechanism `auto`, on a synthetic reference with `private_baseline` (the slice of ε spent on a private baseline, released when the job runs: the model's record then holds the band against it).",
            title="Expected Accuracy",
        ),
    ] = None
    expected_noise_norm: Annotated[
        float | None,
        Field(
            description="E‖noise‖ of the mechanism's noise vector, where it has a single one.",
            title="Expected Noise Norm",
        ),
    ]
    mechanism: Annotated[str, Field(title="Mechanism")]
    private: Annotated[
        bool, Field(description="False for `non_private`: no DP, nothing charged.", title="Private")
    ]
    regularization: Annotated[
        float | None,
        Field(
            description='The λ the fit would use (the chosen one for `"auto"`; None for a privately tuned fit, whose λ is chosen when it runs).',
            title="Regularization",
        ),
    ] = None
    regularization_rule: Annotated[
        dict[str, Any] | None,
        Field(
            description='For `"auto"`: the rule that chose λ (name, formula, public inputs, constants, the value before and after clamping).',
            title="Regularization Rule",
        ),
    ] = None
    warnings: Annotated[
        list[dict[str, Any]] | None,
        Field(
            description="E.g. `below_majority_baseline`: the expected accuracy is below always answering the majority class; `worse_than_mean_baseline` (numeric label): the expected RMSE is above always predicting the public reference's mean.",
            title="Warnings",
        ),
    ] = None


class GaussianObjectivePerturbationOptions(BaseModel):
    """
    The options (`params`) of `gaussian_objective_perturbation`. GOP has no options of its own (only the loss's `h`).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5


class GeneralizedObjectivePerturbationOptions(BaseModel):
    """
    The options (`params`) of `generalized_objective_perturbation`. KST12's one option. Also checked with the dataset: it leaves budget for the noise.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    kifer_Delta: Annotated[
        float | None,
        Field(
            description="The extra regularisation Δ_K ≥ 2c/ε₁ of KST12 (module docstring). Default: 2c/ε₁ (ε₁: the objective's share of ε).",
            ge=0.0,
            title="Kifer Delta",
        ),
    ] = None


class Health(BaseModel):
    """
    The process is alive.
    """

    status: Annotated[Literal["ok"], Field(title="Status")] = "ok"


class IngestRead(BaseModel):
    """
    How the upload was read (the owner's own metadata).
    """

    format: Annotated[Literal["csv", "parquet"], Field(title="Format")]
    label_clipped_rows: Annotated[
        int | None,
        Field(
            description="A numeric label only: the rows whose value was outside [lower, upper] and was clipped to the nearer bound (absent for class labels).",
            title="Label Clipped Rows",
        ),
    ] = None
    rows_dropped: Annotated[
        int,
        Field(
            description="Rows dropped for missing values ('missing': 'drop').", title="Rows Dropped"
        ),
    ]
    rows_read: Annotated[int, Field(title="Rows Read")]
    unknown_category_rows: Annotated[
        dict[str, int],
        Field(
            description="Per categorical column, rows whose value is not in the declared list (encoded as an all-zero block). A high count often means a typo or stray whitespace.",
            title="Unknown Category Rows",
        ),
    ]


class IssuedKeyRead(BaseModel):
    """
    A freshly issued API key. `api_key` is shown only in this response: store it now.
    """

    api_key: Annotated[
        str,
        Field(
            description="Send as `Authorization: Bearer <api_key>`. Shown once.", title="Api Key"
        ),
    ]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    key_prefix: Annotated[
        str, Field(description="Public part of the key, shown in audit events.", title="Key Prefix")
    ]


class JobCharge(BaseModel):
    """
    What the job charged to its dataset's budget.
    """

    dataset_id: Annotated[str, Field(title="Dataset Id")]
    delta: Annotated[float, Field(title="Delta")]
    epsilon: Annotated[float, Field(title="Epsilon")]
    state: Annotated[
        Literal["charged", "refunded"],
        Field(description="`refunded` only for a job cancelled while still queued.", title="State"),
    ]


class JobProblem(BaseModel):
    """
    Why a job failed (RFC 9457 members). Never contains data values or internals.
    """

    detail: Annotated[str, Field(title="Detail")]
    title: Annotated[str, Field(title="Title")]
    type: Annotated[
        str, Field(examples=["https://privfit.dev/problems/job-interrupted"], title="Type")
    ]


class JobRead(BaseModel):
    """
    A job: a fit, aggregation or federated fit running in the background. Poll it until
    `status` is final.
    """

    attempt: Annotated[int, Field(title="Attempt")]
    cancel_requested: Annotated[
        bool,
        Field(
            description="A cancel was requested while the job was running; it stops at its next progress report and ends `cancelled` (its budget stays spent).",
            title="Cancel Requested",
        ),
    ]
    charges: Annotated[list[JobCharge], Field(title="Charges")]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    dataset_id: Annotated[str | None, Field(title="Dataset Id")]
    error: Annotated[JobProblem | None, Field(description="Why the job failed, once `failed`.")]
    finished_at: Annotated[AwareDatetime | None, Field(title="Finished At")]
    id: Annotated[str, Field(title="Id")]
    kind: Annotated[
        str,
        Field(
            description="`fit` (one dataset), `aggregate` (a study's aggregation) or `federated` (a study's multiparty fit across granted datasets).",
            title="Kind",
        ),
    ]
    model_id: Annotated[
        str | None, Field(description="The released model, once `succeeded`.", title="Model Id")
    ]
    params: Annotated[dict[str, Any], Field(description="The validated request.", title="Params")]
    progress: Annotated[
        float,
        Field(
            description="Fraction done, updated while running.", ge=0.0, le=1.0, title="Progress"
        ),
    ]
    started_at: Annotated[AwareDatetime | None, Field(title="Started At")]
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed", "cancelled"], Field(title="Status")
    ]
    warnings: Annotated[
        list[dict[str, Any]] | None,
        Field(
            description="Warnings fixed at submission (also in `params` and the model's record), e.g. `below_majority_baseline`: the fit's expected accuracy is below always answering the majority class, or `worse_than_mean_baseline` (numeric label): its expected RMSE is above always predicting the public reference's mean. (An auto fit whose baseline is estimated privately gets its warning in the model's record, once the count is released.)",
            title="Warnings",
        ),
    ] = None


class LabelRead(BaseModel):
    """
    What the model predicts. Binary: `positive` means the label column equals this value
    (`negative` the other class, when declared). Multi-class: `classes` in their declared
    order (score k is `classes[k]`'s). Regression: the public bounds `lower`/`upper` that
    every predicted value lies within.
    """

    classes: Annotated[list[str] | None, Field(title="Classes")] = None
    column: Annotated[str, Field(title="Column")]
    lower: Annotated[float | None, Field(title="Lower")] = None
    negative: Annotated[str | None, Field(title="Negative")] = None
    positive: Annotated[str | None, Field(title="Positive")] = None
    upper: Annotated[float | None, Field(title="Upper")] = None


class LedgerChargeRead(BaseModel):
    """
    One charge against a dataset's budget.
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    delta: Annotated[float, Field(title="Delta")]
    epsilon: Annotated[float, Field(title="Epsilon")]
    id: Annotated[str, Field(title="Id")]
    job_id: Annotated[
        str | None,
        Field(description="The job that spent it (None for a direct charge).", title="Job Id"),
    ]
    mechanism: Annotated[str, Field(title="Mechanism")]
    refunded_at: Annotated[AwareDatetime | None, Field(title="Refunded At")] = None
    state: Annotated[
        Literal["charged", "refunded"],
        Field(description="`refunded`: the job was cancelled while still queued.", title="State"),
    ]


class ModelContributionIn(BaseModel):
    """
    Contribute a model the calling site owns (fitted by PrivFit or uploaded).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    model_id: Annotated[
        str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$", title="Model Id")
    ]


class ModelExportRead(BaseModel):
    """
    A self-contained JSON document of the model (see the README for scikit-learn).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    classes: Annotated[
        list[int] | list[str] | None,
        Field(
            description="Binary: [−1, 1] (1 is the label's positive value). Multi-class: the declared classes, in order (row k of `weights.coef` scores `classes[k]`). Regression: null.",
            title="Classes",
        ),
    ]
    created_at: Annotated[str | None, Field(title="Created At")]
    decision_rule: Annotated[str, Field(title="Decision Rule")]
    feature_names: Annotated[list[str], Field(title="Feature Names")]
    format: Annotated[str, Field(examples=["privfit.model"], title="Format")]
    format_version: Annotated[int, Field(title="Format Version")]
    label: Annotated[dict[str, Any] | None, Field(title="Label")]
    loss: Annotated[str | None, Field(title="Loss")]
    mechanism: Annotated[str | None, Field(title="Mechanism")]
    model: Annotated[dict[str, Any], Field(title="Model")]
    model_id: Annotated[str, Field(title="Model Id")]
    preprocessing: Annotated[dict[str, Any], Field(title="Preprocessing")]
    privacy: Annotated[dict[str, Any], Field(title="Privacy")]
    projection_matrix: Annotated[list[list[float]] | None, Field(title="Projection Matrix")]
    source: Annotated[str, Field(title="Source")]
    task: Annotated[
        Literal["binary", "multiclass", "regression"] | None,
        Field(description="The label's task: what `weights` and `classes` hold.", title="Task"),
    ] = "binary"
    weights: Annotated[
        dict[str, Any] | None,
        Field(
            description="`coef` (one per feature) and `intercept` (0: the intercept is a feature); multi-class: `coef` has one row per declared class and `intercept` one 0 per class; regression: `coef` scores in the label's [−1, 1] units (see `decision_rule`). Null for models that are not linear.",
            title="Weights",
        ),
    ]


class ModelOfferCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    study_id: Annotated[
        str,
        Field(
            description="The study's id on the coordinator.",
            max_length=64,
            min_length=1,
            title="Study Id",
        ),
    ]


class ModelOfferRead(BaseModel):
    contribution_id: Annotated[
        str,
        Field(description="The contribution in the coordinator's study.", title="Contribution Id"),
    ]
    coordinator_model_id: Annotated[
        str,
        Field(description="The copy uploaded to the coordinator.", title="Coordinator Model Id"),
    ]
    model_id: Annotated[str, Field(description="The model on this node.", title="Model Id")]
    study_id: Annotated[str, Field(title="Study Id")]


class ModelSummary(BaseModel):
    """
    A model in a list.
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    delta: Annotated[float | None, Field(title="Delta")]
    epsilon: Annotated[
        float | None,
        Field(description="Verified ε; None for no DP or a mere claim.", title="Epsilon"),
    ]
    id: Annotated[str, Field(title="Id")]
    loss: Annotated[str | None, Field(title="Loss")]
    mechanism: Annotated[str | None, Field(title="Mechanism")]
    n_features: Annotated[int, Field(title="N Features")]
    source: Annotated[Literal["fit", "upload", "aggregate", "federated"], Field(title="Source")]
    task: Annotated[
        Literal["binary", "multiclass", "regression"] | None,
        Field(description="What the model predicts (see `ModelRead.task`).", title="Task"),
    ] = "binary"
    verified: Annotated[bool, Field(title="Verified")]


ModelUploadWeightsModelUploadWeight = TypeAliasType(
    "ModelUploadWeightsModelUploadWeight", Annotated[float, Field(ge=-1000000.0, le=1000000.0)]
)


ModelUploadWeights = TypeAliasType(
    "ModelUploadWeights",
    Annotated[
        list[ModelUploadWeightsModelUploadWeight],
        Field(
            description="Binary label: one weight per encoded feature, the positive class when wᵀx > 0. Multi-class label (`classes`): one row of those weights per declared class, in the label's order (row k scores `classes[k]`; the class of the largest score is predicted). Numeric label (`lower`/`upper`): one weight per encoded feature scoring in the label's [−1, 1] units, not in label units: the prediction is lower + (clip(wᵀx, −1, 1) + 1)/2 · (upper − lower), as for a model PrivFit fits and as its export's `weights.coef` and `decision_rule` state. Each weight finite with |w| ≤ 1,000,000.",
            min_length=1,
            title="Weights",
        ),
    ],
)


ModelUploadWeights1ModelUploadWeights1ItemModelUploadWeights1ModelUploadWeights1ItemItem = (
    TypeAliasType(
        "ModelUploadWeights1ModelUploadWeights1ItemModelUploadWeights1ModelUploadWeights1ItemItem",
        Annotated[float, Field(ge=-1000000.0, le=1000000.0)],
    )
)


ModelUploadWeights1ModelUploadWeights1Item = TypeAliasType(
    "ModelUploadWeights1ModelUploadWeights1Item",
    Annotated[
        list[
            ModelUploadWeights1ModelUploadWeights1ItemModelUploadWeights1ModelUploadWeights1ItemItem
        ],
        Field(min_length=1),
    ],
)


ModelUploadWeights1 = TypeAliasType(
    "ModelUploadWeights1",
    Annotated[
        list[ModelUploadWeights1ModelUploadWeights1Item],
        Field(
            description="Binary label: one weight per encoded feature, the positive class when wᵀx > 0. Multi-class label (`classes`): one row of those weights per declared class, in the label's order (row k scores `classes[k]`; the class of the largest score is predicted). Numeric label (`lower`/`upper`): one weight per encoded feature scoring in the label's [−1, 1] units, not in label units: the prediction is lower + (clip(wᵀx, −1, 1) + 1)/2 · (upper − lower), as for a model PrivFit fits and as its export's `weights.coef` and `decision_rule` state. Each weight finite with |w| ≤ 1,000,000.",
            min_length=1,
            title="Weights",
        ),
    ],
)


class NodeTaskRead(BaseModel):
    """
    One step of a federated fit asked of a node: only public state.
    """

    contribution_id: Annotated[str, Field(title="Contribution Id")]
    job_id: Annotated[str, Field(title="Job Id")]
    plan: Annotated[
        dict[str, Any] | None,
        Field(
            description="`prepare` only: the job's public plan (every number its steps use, from the terms and the sizes); the node re-derives it and refuses the job unless equal.",
            title="Plan",
        ),
    ] = None
    seq: Annotated[int, Field(title="Seq")]
    sizes: Annotated[list[int] | None, Field(title="Sizes")] = None
    step: Annotated[str, Field(title="Step")]
    task_id: Annotated[str, Field(title="Task Id")]
    terms: Annotated[dict[str, Any], Field(title="Terms")]
    vectors: Annotated[list[list[float]], Field(title="Vectors")]


class NoisyGdOptions(BaseModel):
    """
    The options (`params`) of `noisy_gd`. noisy_gd's options: the number of steps T and the step schedule.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    iterations: Annotated[
        int | None,
        Field(
            description="Number of full-batch steps T (each one noisy gradient-sum release). Default: min(100, max(10, ⌊(τμn/(2C√d))²⌋)) from public n, d, ε, δ.",
            ge=1,
            le=10000,
            title="Iterations",
        ),
    ] = None
    step_size: Annotated[
        Literal["nesterov", "constant"] | None,
        Field(
            description="Step schedule: step 1/(c + λ) with Nesterov momentum (capped at 0.9), or without.",
            title="Step Size",
        ),
    ] = "nesterov"


class NonPrivateOptions(BaseModel):
    """
    The options (`params`) of `non_private`. The exact minimiser has no options of its own (only the loss's `h`).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5


class NumericFeatureIn(BaseModel):
    """
    A numeric column; values are clamped to the public bounds [lower, upper].
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    column: Annotated[str, Field(max_length=1000, min_length=1, title="Column")]
    lower: Annotated[
        float | None,
        Field(
            description="Public lower bound. Required: PrivFit never reads bounds from the data.",
            title="Lower",
        ),
    ] = None
    type: Annotated[Literal["numeric"], Field(title="Type")]
    upper: Annotated[
        float | None,
        Field(
            description="Public upper bound. Required: PrivFit never reads bounds from the data.",
            title="Upper",
        ),
    ] = None


ObjectivePerturbationOptionsProjectionDim = TypeAliasType(
    "ObjectivePerturbationOptionsProjectionDim",
    Annotated[
        int,
        Field(
            description="Dimension k ≤ d of a public random projection of the rows (null: none; binary fits only); the objective and its noise live in dimension k and the released weights are folded back to d.",
            ge=1,
            le=1000000,
            title="Projection Dim",
        ),
    ],
)


ObjectivePerturbationOptionsProjectionSeed = TypeAliasType(
    "ObjectivePerturbationOptionsProjectionSeed",
    Annotated[
        int,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            ge=0,
            le=9007199254740991,
            title="Projection Seed",
        ),
    ],
)


class ObjectivePerturbationOptions(BaseModel):
    """
    The options (`params`) of `objective_perturbation`. Objective perturbation's options (besides the loss's `h`): an optional public random projection of the rows, for binary fits; `projection_kind` and `projection_seed` only with `projection_dim`, which may not exceed the number of features d.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    projection_dim: Annotated[
        ObjectivePerturbationOptionsProjectionDim | None,
        Field(
            description="Dimension k ≤ d of a public random projection of the rows (null: none; binary fits only); the objective and its noise live in dimension k and the released weights are folded back to d.",
            title="Projection Dim",
        ),
    ] = None
    projection_kind: Annotated[
        Literal["gaussian", "achlioptas"] | None,
        Field(
            description="The projection matrix's entries (with `projection_dim` only; omitted: `gaussian`).",
            title="Projection Kind",
        ),
    ] = None
    projection_seed: Annotated[
        ObjectivePerturbationOptionsProjectionSeed | None,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            title="Projection Seed",
        ),
    ] = None


class OfferCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    delta_cap: Annotated[
        float,
        Field(
            description="The largest δ one job of the study may charge.",
            ge=0.0,
            lt=1.0,
            title="Delta Cap",
        ),
    ]
    epsilon_cap: Annotated[
        float,
        Field(
            description="The largest ε one job of the study may charge.",
            gt=0.0,
            le=1000000.0,
            title="Epsilon Cap",
        ),
    ]
    study_id: Annotated[
        str,
        Field(
            description="The study's id on the coordinator.",
            max_length=64,
            min_length=1,
            title="Study Id",
        ),
    ]


class OfferRead(BaseModel):
    contribution_id: Annotated[str, Field(title="Contribution Id")]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    dataset_id: Annotated[str, Field(title="Dataset Id")]
    delta_cap: Annotated[float, Field(title="Delta Cap")]
    delta_spent: Annotated[float, Field(title="Delta Spent")]
    epsilon_cap: Annotated[float, Field(title="Epsilon Cap")]
    epsilon_spent: Annotated[float, Field(title="Epsilon Spent")]
    id: Annotated[str, Field(title="Id")]
    study_id: Annotated[str, Field(title="Study Id")]
    withdrawn_at: Annotated[AwareDatetime | None, Field(title="Withdrawn At")]


OptionCandidatesCandidate = TypeAliasType(
    "OptionCandidatesCandidate", Annotated[float, Field(gt=0.0)]
)


class OptionCandidates(BaseModel):
    """
    Candidate values of a tunable option, one of which PrivFit chooses privately within the
    fit's (ε, δ) (:mod:`service.domain.fits.tuning`).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    candidates: Annotated[
        list[OptionCandidatesCandidate],
        Field(description="Distinct values > 0.", max_length=10, min_length=1, title="Candidates"),
    ]


class OutputPerturbationOptions(BaseModel):
    """
    The options (`params`) of `output_perturbation`. Output perturbation has no options of its own (only the loss's `h`).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5


PlanCreateAdasspLoss = TypeAliasType(
    "PlanCreateAdasspLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateAdasspReferenceDatasetId = TypeAliasType(
    "PlanCreateAdasspReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateAdasspSeed = TypeAliasType(
    "PlanCreateAdasspSeed", Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")]
)


PlanCreateAdasspTargetAccuracy = TypeAliasType(
    "PlanCreateAdasspTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateAdassp(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `adassp`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateAdasspLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["adassp"], Field(description="`adassp`.", title="Mechanism")]
    params: Annotated[
        AdasspOptions | None, Field(description="The options of `adassp` (each optional).")
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateAdasspReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateAdasspSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateAdasspTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateDpSgdLoss = TypeAliasType(
    "PlanCreateDpSgdLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateDpSgdReferenceDatasetId = TypeAliasType(
    "PlanCreateDpSgdReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateDpSgdSeed = TypeAliasType(
    "PlanCreateDpSgdSeed", Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")]
)


PlanCreateDpSgdTargetAccuracy = TypeAliasType(
    "PlanCreateDpSgdTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateDpSgd(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `dp_sgd`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateDpSgdLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["dp_sgd"], Field(description="`dp_sgd`.", title="Mechanism")]
    params: Annotated[
        DpSgdOptions | None, Field(description="The options of `dp_sgd` (each optional).")
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateDpSgdReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateDpSgdSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateDpSgdTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateGaussianObjectivePerturbationLoss = TypeAliasType(
    "PlanCreateGaussianObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateGaussianObjectivePerturbationReferenceDatasetId = TypeAliasType(
    "PlanCreateGaussianObjectivePerturbationReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateGaussianObjectivePerturbationSeed = TypeAliasType(
    "PlanCreateGaussianObjectivePerturbationSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateGaussianObjectivePerturbationTargetAccuracy = TypeAliasType(
    "PlanCreateGaussianObjectivePerturbationTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateGaussianObjectivePerturbation(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `gaussian_objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateGaussianObjectivePerturbationLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["gaussian_objective_perturbation"],
        Field(description="`gaussian_objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        GaussianObjectivePerturbationOptions | None,
        Field(description="The options of `gaussian_objective_perturbation` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateGaussianObjectivePerturbationReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateGaussianObjectivePerturbationSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateGaussianObjectivePerturbationTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateGeneralizedObjectivePerturbationLoss = TypeAliasType(
    "PlanCreateGeneralizedObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateGeneralizedObjectivePerturbationReferenceDatasetId = TypeAliasType(
    "PlanCreateGeneralizedObjectivePerturbationReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateGeneralizedObjectivePerturbationSeed = TypeAliasType(
    "PlanCreateGeneralizedObjectivePerturbationSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateGeneralizedObjectivePerturbationTargetAccuracy = TypeAliasType(
    "PlanCreateGeneralizedObjectivePerturbationTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateGeneralizedObjectivePerturbation(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `generalized_objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateGeneralizedObjectivePerturbationLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["generalized_objective_perturbation"],
        Field(description="`generalized_objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        GeneralizedObjectivePerturbationOptions | None,
        Field(description="The options of `generalized_objective_perturbation` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateGeneralizedObjectivePerturbationReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateGeneralizedObjectivePerturbationSeed | None, Field(title="Seed")] = (
        None
    )
    target_accuracy: Annotated[
        PlanCreateGeneralizedObjectivePerturbationTargetAccuracy | None,
        Field(title="Target Accuracy"),
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateNoisyGdLoss = TypeAliasType(
    "PlanCreateNoisyGdLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateNoisyGdReferenceDatasetId = TypeAliasType(
    "PlanCreateNoisyGdReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateNoisyGdSeed = TypeAliasType(
    "PlanCreateNoisyGdSeed", Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")]
)


PlanCreateNoisyGdTargetAccuracy = TypeAliasType(
    "PlanCreateNoisyGdTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateNoisyGd(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `noisy_gd`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateNoisyGdLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["noisy_gd"], Field(description="`noisy_gd`.", title="Mechanism")]
    params: Annotated[
        NoisyGdOptions | None, Field(description="The options of `noisy_gd` (each optional).")
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateNoisyGdReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateNoisyGdSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateNoisyGdTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateNonPrivateLoss = TypeAliasType(
    "PlanCreateNonPrivateLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateNonPrivateReferenceDatasetId = TypeAliasType(
    "PlanCreateNonPrivateReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateNonPrivateSeed = TypeAliasType(
    "PlanCreateNonPrivateSeed", Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")]
)


PlanCreateNonPrivateTargetAccuracy = TypeAliasType(
    "PlanCreateNonPrivateTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateNonPrivate(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `non_private`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateNonPrivateLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["non_private"], Field(description="`non_private`.", title="Mechanism")
    ]
    params: Annotated[
        NonPrivateOptions | None, Field(description="The options of `non_private` (each optional).")
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateNonPrivateReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateNonPrivateSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateNonPrivateTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateObjectivePerturbationLoss = TypeAliasType(
    "PlanCreateObjectivePerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateObjectivePerturbationReferenceDatasetId = TypeAliasType(
    "PlanCreateObjectivePerturbationReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateObjectivePerturbationSeed = TypeAliasType(
    "PlanCreateObjectivePerturbationSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateObjectivePerturbationTargetAccuracy = TypeAliasType(
    "PlanCreateObjectivePerturbationTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateObjectivePerturbation(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateObjectivePerturbationLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["objective_perturbation"],
        Field(description="`objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        ObjectivePerturbationOptions | None,
        Field(description="The options of `objective_perturbation` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateObjectivePerturbationReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateObjectivePerturbationSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateObjectivePerturbationTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateOutputPerturbationLoss = TypeAliasType(
    "PlanCreateOutputPerturbationLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateOutputPerturbationReferenceDatasetId = TypeAliasType(
    "PlanCreateOutputPerturbationReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateOutputPerturbationSeed = TypeAliasType(
    "PlanCreateOutputPerturbationSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateOutputPerturbationTargetAccuracy = TypeAliasType(
    "PlanCreateOutputPerturbationTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanCreateOutputPerturbation(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `output_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateOutputPerturbationLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["output_perturbation"],
        Field(description="`output_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        OutputPerturbationOptions | None,
        Field(description="The options of `output_perturbation` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateOutputPerturbationReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateOutputPerturbationSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateOutputPerturbationTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


PlanCreateStackingFeaturesLoss = TypeAliasType(
    "PlanCreateStackingFeaturesLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateStackingFeaturesReferenceDatasetId = TypeAliasType(
    "PlanCreateStackingFeaturesReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateStackingFeaturesSeed = TypeAliasType(
    "PlanCreateStackingFeaturesSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateStackingFeaturesTargetAccuracy = TypeAliasType(
    "PlanCreateStackingFeaturesTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


PlanCreateStackingSamplesLoss = TypeAliasType(
    "PlanCreateStackingSamplesLoss",
    Annotated[
        str,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            max_length=16,
            title="Loss",
        ),
    ],
)


PlanCreateStackingSamplesReferenceDatasetId = TypeAliasType(
    "PlanCreateStackingSamplesReferenceDatasetId",
    Annotated[
        str,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            max_length=64,
            title="Reference Dataset Id",
        ),
    ],
)


PlanCreateStackingSamplesSeed = TypeAliasType(
    "PlanCreateStackingSamplesSeed",
    Annotated[int, Field(ge=0, le=9223372036854775807, title="Seed")],
)


PlanCreateStackingSamplesTargetAccuracy = TypeAliasType(
    "PlanCreateStackingSamplesTargetAccuracy",
    Annotated[float, Field(ge=0.0, le=1.0, title="Target Accuracy")],
)


class PlanRead(BaseModel):
    """
    Expected noise, excess-risk bound and (with a reference) simulated accuracy per grid
    point; the smallest ε reaching the target. Nothing was spent.
    """

    d: Annotated[int, Field(title="D")]
    dataset_id: Annotated[str, Field(title="Dataset Id")]
    majority_baseline: Annotated[
        float | None,
        Field(
            description="With a reference: the accuracy of always answering its majority class; each simulated point says whether its mean is below it (`below_majority_baseline`).",
            title="Majority Baseline",
        ),
    ] = None
    mechanism: Annotated[str, Field(title="Mechanism")]
    n: Annotated[int, Field(title="N")]
    notes: Annotated[list[str], Field(title="Notes")]
    points: Annotated[
        list[dict[str, Any]],
        Field(
            description="Per (ε, λ): `epsilon`, `regularization`, `spent_epsilon`, `spent_delta`, `expected_noise_norm`, `excess_risk_bound` and, when simulated, the band. A point of `auto` names its `mechanism` (and `projection_rule` when auto's public rule projects the rows of objective perturbation to k dimensions); without a public baseline (no public reference, nor a declared prior on a binary label) the fit at that ε spends a slice of it on a private trivial-model baseline and chooses and fits at the rest, and the point says so: the choice, λ, noise and bound at ε less the slice, `private_baseline` (the slice: its `epsilon`, `share`, `fit_epsilon` and rule) and `expected_accuracy` (the band), both as the fit's dry run shows them.",
            title="Points",
        ),
    ]
    reference_dataset_id: Annotated[str | None, Field(title="Reference Dataset Id")]
    spent: Annotated[dict[str, float], Field(title="Spent")]
    target: Annotated[dict[str, Any] | None, Field(title="Target")]


class PredictRequest(BaseModel):
    """
    Raw rows to score, keyed by column name (extra columns are ignored).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    rows: Annotated[list[dict[str, Any]], Field(max_length=1000, min_length=1, title="Rows")]


class PredictionRead(BaseModel):
    """
    One row's prediction, by the model's task. Binary (as before): `positive`, `score`
    and `probability`. Multi-class: `predicted_class`, `scores` and `probabilities` (one per
    declared class, in the label's order). Regression: `value` within the label's bounds and
    its `score`. Members of another task are left out (the binary form is unchanged).
    """

    positive: Annotated[
        bool | None,
        Field(
            description="score > 0: the label's positive class (binary models; null otherwise).",
            title="Positive",
        ),
    ]
    predicted_class: Annotated[
        str | None,
        Field(
            description="Multi-class: the declared class of the largest score (the first on a tie).",
            title="Predicted Class",
        ),
    ] = None
    probabilities: Annotated[
        list[float] | None,
        Field(
            description="Multi-class: softmax of `scores` (per declared class; they sum to 1).",
            title="Probabilities",
        ),
    ] = None
    probability: Annotated[
        float | None,
        Field(
            description="σ(score) in [0, 1], computed stably; only for the logistic loss.",
            title="Probability",
        ),
    ]
    score: Annotated[
        float | None,
        Field(
            description="wᵀx for the preprocessed row, always finite: clipped to ±1,000,000,000,000 (binary and regression models; for regression in the label's [−1, 1] units).",
            title="Score",
        ),
    ]
    scores: Annotated[
        list[float] | None,
        Field(
            description="Multi-class: w_kᵀx per declared class, finite (clipped to ±1,000,000,000,000).",
            title="Scores",
        ),
    ] = None
    value: Annotated[
        float | None,
        Field(
            description="Regression: the predicted number, lower + (clip(score, −1, 1) + 1)/2 · (upper − lower), always within the label's public bounds.",
            title="Value",
        ),
    ] = None


PrivacyClaimInDelta = TypeAliasType(
    "PrivacyClaimInDelta", Annotated[float, Field(ge=0.0, lt=1.0, title="Delta")]
)


PrivacyClaimInDescription = TypeAliasType(
    "PrivacyClaimInDescription", Annotated[str, Field(max_length=2000, title="Description")]
)


PrivacyClaimInEpsilon = TypeAliasType(
    "PrivacyClaimInEpsilon", Annotated[float, Field(ge=0.0, title="Epsilon")]
)


PrivacyClaimInMechanism = TypeAliasType(
    "PrivacyClaimInMechanism", Annotated[str, Field(max_length=64, min_length=1, title="Mechanism")]
)


class PrivacyClaimIn(BaseModel):
    """
    The uploader's own privacy claim. Stored and shown as declared, never verified.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[PrivacyClaimInDelta | None, Field(title="Delta")] = None
    description: Annotated[PrivacyClaimInDescription | None, Field(title="Description")] = None
    epsilon: Annotated[PrivacyClaimInEpsilon | None, Field(title="Epsilon")] = None
    mechanism: Annotated[PrivacyClaimInMechanism | None, Field(title="Mechanism")] = None


class PrivacyRecordRead(BaseModel):
    """
    The model's privacy record. For models PrivFit fitted (`verified: true`) it states what
    was protected and how; for uploaded models it holds the uploader's claim, which PrivFit did
    not verify (`verified: false`, `kind: declared_claim`).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    auto: Annotated[
        dict[str, Any] | None,
        Field(
            description="For `mechanism: auto`: what was chosen and why (every candidate's predicted accuracy on the public reference).",
            title="Auto",
        ),
    ] = None
    calibration: Annotated[dict[str, Any] | None, Field(title="Calibration")] = None
    claim: Annotated[
        dict[str, Any] | None,
        Field(description="For uploads: the declared claim, as declared.", title="Claim"),
    ] = None
    composition: Annotated[dict[str, Any] | None, Field(title="Composition")] = None
    datasets: Annotated[list[dict[str, Any]] | None, Field(title="Datasets")] = None
    delta: Annotated[float | None, Field(title="Delta")]
    epsilon: Annotated[
        float | None,
        Field(description="Verified ε (None: no DP, or only a claim).", title="Epsilon"),
    ]
    expected_accuracy: Annotated[
        dict[str, Any] | None,
        Field(
            description='The accuracy band expected at submission (simulated on a public reference) next to the majority-class baseline; on a numeric label the RMSE band (`metric: "rmse"`) next to the mean\'s RMSE (`mean_baseline_rmse`).',
            title="Expected Accuracy",
        ),
    ] = None
    expected_noise_norm: Annotated[float | str | None, Field(title="Expected Noise Norm")] = None
    guarantee: Annotated[
        Literal["differential_privacy", "none", "declared"], Field(title="Guarantee")
    ]
    kind: Annotated[Literal["fit", "declared_claim", "aggregate", "federated"], Field(title="Kind")]
    mechanism: Annotated[str | None, Field(title="Mechanism")]
    private_baseline: Annotated[
        dict[str, Any] | None,
        Field(
            description="For `mechanism: auto` without a public reference or declared `positive_fraction`: the noisy count of positive labels released for the majority-class baseline (discrete Laplace, sensitivity 1, its ε a public slice of the request, charged with the fit in the same job) and the baseline derived from it. On a multi-class label (mechanism `auto`, no public reference): the noisy class counts (L1 sensitivity 2); on a numeric label: the noisy Σy and Σy² of the labels mapped onto [−1, 1] (sensitivities 2 and 1, ε/2 each) and the mean's RMSE.",
            title="Private Baseline",
        ),
    ] = None
    randomness: Annotated[
        dict[str, Any] | None,
        Field(
            description="`csprng`, or `test_seed` when the server ran in test mode.",
            title="Randomness",
        ),
    ] = None
    requested_mechanism: Annotated[
        str | None,
        Field(
            description="`auto` when PrivFit chose the mechanism (see `auto`).",
            title="Requested Mechanism",
        ),
    ] = None
    software: Annotated[dict[str, Any], Field(title="Software")]
    statement: Annotated[
        str, Field(description="The guarantee in one sentence.", title="Statement")
    ]
    unit: Annotated[
        dict[str, Any] | None,
        Field(description="The unit protected: one row of the dataset, replace-one.", title="Unit"),
    ] = None
    verified: Annotated[bool, Field(title="Verified")]
    warnings: Annotated[
        list[dict[str, Any]] | None,
        Field(
            description="Warnings fixed at submission, e.g. `below_majority_baseline` or `worse_than_mean_baseline` (numeric label); for `mechanism: auto` (or, on a multi-class or numeric label, λ `auto`) without a public baseline, set when the job ran, against the privately estimated baseline (`private_baseline`).",
            title="Warnings",
        ),
    ] = None


class Readiness(BaseModel):
    """
    The service can handle requests: its database is reachable and fully migrated.
    """

    database: Annotated[Literal["ok"], Field(title="Database")] = "ok"
    revision: Annotated[
        str, Field(description="The database's migration revision (the head).", title="Revision")
    ]
    status: Annotated[Literal["ready"], Field(title="Status")] = "ready"
    workers: Annotated[
        int | None,
        Field(
            description="With the distributed job queue: job workers seen alive recently (null when jobs run inside the API process).",
            title="Workers",
        ),
    ] = None


RegularizationCandidatesCandidate = TypeAliasType(
    "RegularizationCandidatesCandidate", Annotated[float, Field(ge=1e-10, le=1000000.0)]
)


class RegularizationCandidates(BaseModel):
    """
    Candidate λs for private tuning (Chaudhuri, Monteleoni and Sarwate 2011): each is fitted
    on its own disjoint part of the data at the full (ε, δ) and one is chosen by the
    exponential mechanism on a held-out part; the total cost stays (ε, δ).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    candidates: Annotated[
        list[RegularizationCandidatesCandidate],
        Field(description="Distinct λ values.", max_length=10, min_length=1, title="Candidates"),
    ]


class RemoteContributionCreate(BaseModel):
    """
    What a node sends to register one of its datasets in a study: public spec and caps.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta_cap: Annotated[
        float,
        Field(
            description="The largest δ the node accepts per job.", ge=0.0, lt=1.0, title="Delta Cap"
        ),
    ]
    epsilon_cap: Annotated[
        float,
        Field(
            description="The largest ε the node accepts per job.",
            gt=0.0,
            le=1000000.0,
            title="Epsilon Cap",
        ),
    ]
    label: Annotated[
        dict[str, Any],
        Field(description="The dataset's label column and positive class.", title="Label"),
    ]
    n_features: Annotated[
        int, Field(description="Width of the encoded design.", ge=1, le=100000, title="N Features")
    ]
    node_dataset_id: Annotated[
        str,
        Field(
            description="The dataset's id on the node (for the records).",
            max_length=64,
            min_length=1,
            title="Node Dataset Id",
        ),
    ]
    preprocessing: Annotated[
        dict[str, Any],
        Field(
            description="The dataset's public preprocessing spec (features, bounds, categories).",
            title="Preprocessing",
        ),
    ]


class RemoteContributionRead(BaseModel):
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    delta_cap: Annotated[float, Field(title="Delta Cap")]
    epsilon_cap: Annotated[float, Field(title="Epsilon Cap")]
    id: Annotated[str, Field(title="Id")]
    n_features: Annotated[int, Field(title="N Features")]
    node_dataset_id: Annotated[str, Field(title="Node Dataset Id")]
    site_id: Annotated[str, Field(title="Site Id")]
    study_id: Annotated[str, Field(title="Study Id")]
    withdrawn_at: Annotated[AwareDatetime | None, Field(title="Withdrawn At")]


class SiteCreate(BaseModel):
    """
    A new site.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    name: Annotated[
        str,
        Field(
            description="Unique display name: 1–100 characters, no control characters.",
            examples=["St. Mary's Hospital"],
            max_length=100,
            min_length=1,
            pattern="^[^\\x00-\\x1f\\x7f]*\\S[^\\x00-\\x1f\\x7f]*$",
            title="Name",
        ),
    ]


class SiteRead(BaseModel):
    """
    A site.
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    deactivated_at: Annotated[
        AwareDatetime | None,
        Field(
            description="When the admin deactivated the site (its keys revoked, its data kept); null while it is active.",
            title="Deactivated At",
        ),
    ] = None
    id: Annotated[str, Field(description="The site's id (32 hex digits).", title="Id")]
    name: Annotated[str, Field(title="Name")]


class SiteWithKey(BaseModel):
    """
    A site with a key issued in this response.
    """

    key: IssuedKeyRead
    site: SiteRead


StackingFeaturesOptionsNModels = TypeAliasType(
    "StackingFeaturesOptionsNModels",
    Annotated[
        int,
        Field(
            description="Number K of groups when `feature_groups` is not given (null: 5, at most d).",
            ge=1,
            le=10000,
            title="N Models",
        ),
    ],
)


class StackingFeaturesOptions(BaseModel):
    """
    The options (`params`) of `stacking_features`. PST-F: K low-level models on disjoint column groups. Also checked with the dataset: the groups are disjoint with columns in range, the weights sum to 1.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    feature_groups: Annotated[
        list[list[int]] | None,
        Field(
            description="Disjoint groups of column indices, one low-level model each (null: `n_models` near-equal groups of consecutive columns).",
            title="Feature Groups",
        ),
    ] = None
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    high_level_fraction: Annotated[
        float | None,
        Field(
            description="Share of the rows, drawn at random, that train the high-level model (the rest train the low-level models).",
            gt=0.0,
            lt=1.0,
            title="High Level Fraction",
        ),
    ] = 0.5
    high_level_intercept: Annotated[
        bool | None,
        Field(
            description="Whether the high-level model has an intercept.",
            title="High Level Intercept",
        ),
    ] = True
    high_level_regularization: Annotated[
        float | None,
        Field(
            description="λ of the high-level model. Default: the fit's `regularization`.",
            gt=0.0,
            title="High Level Regularization",
        ),
    ] = None
    importance: Annotated[
        list[float] | None,
        Field(
            description="Public budget shares q_k > 0 of the groups, summing to 1 (null: equal shares).",
            title="Importance",
        ),
    ] = None
    meta_features: Annotated[
        Literal["sigmoid", "centered_sigmoid"] | None,
        Field(
            description="The high level's features: the low-level models' scores through σ.",
            title="Meta Features",
        ),
    ] = "sigmoid"
    n_models: Annotated[
        StackingFeaturesOptionsNModels | None,
        Field(
            description="Number K of groups when `feature_groups` is not given (null: 5, at most d).",
            title="N Models",
        ),
    ] = None


class StackingSamplesOptions(BaseModel):
    """
    The options (`params`) of `stacking_samples`. PST-S: K low-level models on disjoint row blocks. Also checked with the dataset: K ≤ the low level's rows.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    high_level_fraction: Annotated[
        float | None,
        Field(
            description="Share of the rows, drawn at random, that train the high-level model (the rest train the low-level models).",
            gt=0.0,
            lt=1.0,
            title="High Level Fraction",
        ),
    ] = 0.5
    high_level_intercept: Annotated[
        bool | None,
        Field(
            description="Whether the high-level model has an intercept.",
            title="High Level Intercept",
        ),
    ] = True
    high_level_regularization: Annotated[
        float | None,
        Field(
            description="λ of the high-level model. Default: the fit's `regularization`.",
            gt=0.0,
            title="High Level Regularization",
        ),
    ] = None
    meta_features: Annotated[
        Literal["sigmoid", "centered_sigmoid"] | None,
        Field(
            description="The high level's features: the low-level models' scores through σ.",
            title="Meta Features",
        ),
    ] = "sigmoid"
    n_models: Annotated[
        int | None,
        Field(
            description="Number K of low-level models (disjoint row blocks).",
            ge=1,
            le=10000,
            title="N Models",
        ),
    ] = 5


StudyCreateMember = TypeAliasType(
    "StudyCreateMember",
    Annotated[str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$")],
)


class StudyMemberRead(BaseModel):
    """
    A member site and its role.
    """

    role: Annotated[Literal["coordinator", "member"], Field(title="Role")]
    site_id: Annotated[str, Field(title="Site Id")]


class StudyResultRead(BaseModel):
    """
    A model released to the study (readable by every member at `/v1/models/{id}`).
    """

    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    guarantee: Annotated[
        str | None,
        Field(description="The result's privacy guarantee, in one word.", title="Guarantee"),
    ]
    job_id: Annotated[str | None, Field(title="Job Id")]
    method: Annotated[str | None, Field(title="Method")]
    model_id: Annotated[str, Field(title="Model Id")]


class StudySpecIn(BaseModel):
    """
    The features and label every contribution must encode: the shape of a dataset spec's
    `label`, `features` and `row_norm` (public bounds and category lists). The label takes any
    of a dataset spec's three forms (binary, multi-class `classes`, numeric `lower`/`upper`);
    a contribution must declare the same form: the same positive class, the same classes in
    the same order, or the same bounds.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    features: Annotated[
        list[Annotated[NumericFeatureIn | CategoricalFeatureIn, Field(discriminator="type")]],
        Field(min_length=1, title="Features"),
    ]
    label: DatasetLabelIn
    row_norm: Annotated[Literal["clip", "scale"] | None, Field(title="Row Norm")] = "clip"


TaskResultInDatasetId = TypeAliasType(
    "TaskResultInDatasetId", Annotated[str, Field(max_length=64, title="Dataset Id")]
)


TaskResultInN = TypeAliasType("TaskResultInN", Annotated[int, Field(ge=1, title="N")])


TaskResultInNFeatures = TypeAliasType(
    "TaskResultInNFeatures", Annotated[int, Field(ge=1, title="N Features")]
)


TaskResultInRefused = TypeAliasType(
    "TaskResultInRefused", Annotated[str, Field(max_length=1000, title="Refused")]
)


TaskResultInVector = TypeAliasType(
    "TaskResultInVector", Annotated[list[float], Field(max_length=100000, title="Vector")]
)


class TaskResultIn(BaseModel):
    """
    A node's answer: the step's vector, the join's facts, or a refusal with its reason.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    charged: Annotated[dict[str, float] | None, Field(title="Charged")] = None
    dataset_id: Annotated[TaskResultInDatasetId | None, Field(title="Dataset Id")] = None
    n: Annotated[TaskResultInN | None, Field(title="N")] = None
    n_features: Annotated[TaskResultInNFeatures | None, Field(title="N Features")] = None
    refused: Annotated[TaskResultInRefused | None, Field(title="Refused")] = None
    vector: Annotated[TaskResultInVector | None, Field(title="Vector")] = None


TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupTransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupItem = TypeAliasType(
    "TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupTransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupItem",
    Annotated[str, Field(max_length=200, min_length=1)],
)


TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroup = TypeAliasType(
    "TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroup",
    Annotated[
        list[
            TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupTransferAggregationInFeatureGroupsTransferAggregationInFeatureGroupItem
        ],
        Field(max_length=512, min_length=1),
    ],
)


TransferAggregationInFeatureGroups = TypeAliasType(
    "TransferAggregationInFeatureGroups",
    Annotated[
        list[TransferAggregationInFeatureGroupsTransferAggregationInFeatureGroup],
        Field(
            description="PST-H: disjoint, non-empty groups of the study's encoded feature names (`age`, `color=red`, `intercept`), or of categorical column names standing for their whole one-hot block. Features in no group are not used by the low level; `intercept` is a feature like any other (in no group, the high level's own intercept carries the constant). Default: no groups (plain transfer).",
            max_length=32,
            min_length=1,
            title="Feature Groups",
        ),
    ],
)


TransferAggregationInImportanceTransferAggregationInImportanceItem = TypeAliasType(
    "TransferAggregationInImportanceTransferAggregationInImportanceItem",
    Annotated[float, Field(ge=0.0)],
)


TransferAggregationInImportance = TypeAliasType(
    "TransferAggregationInImportance",
    Annotated[
        list[TransferAggregationInImportanceTransferAggregationInImportanceItem],
        Field(
            description="PST-H: public importance q_k, one per feature group, > 0, normalised to sum 1; group k's low-level model gets the budget share q_k·ε. It must be fixed without looking at the data. Default: equal weights. Needs `feature_groups`.",
            max_length=32,
            min_length=1,
            title="Importance",
        ),
    ],
)


TransferAggregationInName = TypeAliasType(
    "TransferAggregationInName", Annotated[str, Field(max_length=200, min_length=1, title="Name")]
)


TransferAggregationInSourceModelsTransferAggregationInSourceModel = TypeAliasType(
    "TransferAggregationInSourceModelsTransferAggregationInSourceModel",
    Annotated[str, Field(max_length=64, min_length=1, pattern="^[0-9a-f]{32}$")],
)


TransferAggregationInSourceModels = TypeAliasType(
    "TransferAggregationInSourceModels",
    Annotated[
        list[TransferAggregationInSourceModelsTransferAggregationInSourceModel],
        Field(
            description="Contributed model ids whose average is the source w₀; default: all.",
            max_length=1000,
            min_length=1,
            title="Source Models",
        ),
    ],
)


class TransferAggregationIn(BaseModel):
    """
    `transfer` (hypothesis transfer, seed 003): an ε-DP objective-perturbation fit on the
    coordinator's own target dataset with the regulariser (η/2)‖w − w₀‖² centred on the
    average w₀ of the source models. ε is charged to the target dataset.

    With `feature_groups` it is PST-H (seed 003 Alg. 4): PST-F stacking on the target — the
    rows split at random into a low and a high level; low-level model k is objective
    perturbation on group k's columns with budget q_k·ε and the regulariser centred on w₀
    restricted to group k; the high level is objective perturbation with ε on the other rows —
    released as a stacked model. Its whole cost is still ε, charged to the target.

    In a study of multi-class labels the fit is the K-class multinomial model pulled towards
    the entry-by-entry average of the sources' K × d models; in a study of numeric labels it is
    the Huber-residual fit (`loss: huber`) pulled towards the sources' average, in the labels'
    [−1, 1] units. Both cost ε, calibrated at λ + η. `feature_groups` (PST-H) takes binary
    labels only: its high level stacks the groups' probabilities of the positive class.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    epsilon: Annotated[
        float,
        Field(description="ε charged to the target dataset.", ge=1e-06, le=1000.0, title="Epsilon"),
    ]
    feature_groups: Annotated[
        TransferAggregationInFeatureGroups | None,
        Field(
            description="PST-H: disjoint, non-empty groups of the study's encoded feature names (`age`, `color=red`, `intercept`), or of categorical column names standing for their whole one-hot block. Features in no group are not used by the low level; `intercept` is a feature like any other (in no group, the high level's own intercept carries the constant). Default: no groups (plain transfer).",
            title="Feature Groups",
        ),
    ] = None
    importance: Annotated[
        TransferAggregationInImportance | None,
        Field(
            description="PST-H: public importance q_k, one per feature group, > 0, normalised to sum 1; group k's low-level model gets the budget share q_k·ε. It must be fixed without looking at the data. Default: equal weights. Needs `feature_groups`.",
            title="Importance",
        ),
    ] = None
    loss: Annotated[
        Literal["logistic", "huber"] | None,
        Field(
            description="The loss: `logistic` or `huber` for binary labels, `logistic` (the multinomial loss) for multi-class labels, `huber` (of the residual) for numeric labels.",
            title="Loss",
        ),
    ] = "logistic"
    meta_features: Annotated[
        Literal["sigmoid", "centered_sigmoid"] | None,
        Field(
            description="PST-H: the high level's inputs, σ(group score) (`sigmoid`, seed 003, the default) or 2σ − 1 (`centered_sigmoid`, which avoids the high level collapsing onto the majority class on unbalanced labels). Needs `feature_groups`.",
            title="Meta Features",
        ),
    ] = None
    method: Annotated[Literal["transfer"], Field(title="Method")]
    name: Annotated[TransferAggregationInName | None, Field(title="Name")] = None
    regularization: Annotated[
        float | None, Field(description="λ.", ge=1e-10, le=1000000.0, title="Regularization")
    ] = 0.01
    source_models: Annotated[
        TransferAggregationInSourceModels | None,
        Field(
            description="Contributed model ids whose average is the source w₀; default: all.",
            title="Source Models",
        ),
    ] = None
    target_dataset_id: Annotated[
        str,
        Field(
            description="A dataset the coordinator owns.",
            max_length=64,
            min_length=1,
            pattern="^[0-9a-f]{32}$",
            title="Target Dataset Id",
        ),
    ]
    transfer_strength: Annotated[
        float,
        Field(
            description="η: how strongly the fit is pulled towards the source.",
            ge=0.0,
            le=1000000.0,
            title="Transfer Strength",
        ),
    ]


class ValidationIssue(BaseModel):
    """
    One invalid part of a request.
    """

    loc: Annotated[
        list[str | int],
        Field(description="Where: e.g. ['body', 'name'] or ['query', 'limit'].", title="Loc"),
    ]
    msg: Annotated[str, Field(description="What is wrong with it.", title="Msg")]
    type: Annotated[str | None, Field(description="Machine-readable error code.", title="Type")] = (
        None
    )


class AggregationQuoteRead(BaseModel):
    """
    A dry run of an aggregation: what it would charge the coordinator's dataset (nothing
    for `average`) and how it would randomise. Nothing was spent.
    """

    budget: Annotated[
        BudgetLeft | None,
        Field(description="The charged dataset's remaining budget now; null for `average`."),
    ]
    calibration: Annotated[
        dict[str, Any],
        Field(
            description="The calibration: every noise parameter, named as in the papers.",
            title="Calibration",
        ),
    ]
    composition: Annotated[
        str, Field(description="How the aggregation's total (ε, δ) arises.", title="Composition")
    ]
    cost: FitCost
    dataset_id: Annotated[
        str | None,
        Field(
            description="The coordinator's dataset the aggregation is charged to; null for `average`.",
            title="Dataset Id",
        ),
    ]
    dry_run: Annotated[bool | None, Field(title="Dry Run")] = True
    expected_noise_norm: Annotated[
        float | None,
        Field(
            description="E‖noise‖ of the mechanism's noise vector, where it has a single one.",
            title="Expected Noise Norm",
        ),
    ]
    method: Annotated[str, Field(title="Method")]


class AuditEventList(BaseModel):
    """
    One page of audit events, newest first.
    """

    items: Annotated[list[AuditEventRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]


class BudgetRead(BaseModel):
    """
    The dataset's budget: caps, amounts spent (charges not refunded) and what remains.

    The ledger is kept in exact integer units (1e-9 ε, 1e-15 δ); the floats here are those
    amounts rounded once to the nearest double.
    """

    charges: Annotated[list[LedgerChargeRead], Field(title="Charges")]
    dataset_id: Annotated[str, Field(title="Dataset Id")]
    delta_remaining: Annotated[float, Field(title="Delta Remaining")]
    delta_spent: Annotated[float, Field(title="Delta Spent")]
    delta_total: Annotated[float, Field(title="Delta Total")]
    epsilon_remaining: Annotated[float, Field(title="Epsilon Remaining")]
    epsilon_spent: Annotated[float, Field(title="Epsilon Spent")]
    epsilon_total: Annotated[float, Field(title="Epsilon Total")]


class CallerRead(BaseModel):
    """
    Who the API key of a request belongs to.
    """

    role: Annotated[
        Literal["admin", "site"],
        Field(
            description="`admin`: manages sites, their keys and the audit log, and reaches no site's data; `site`: acts for `site`.",
            title="Role",
        ),
    ]
    site: Annotated[SiteRead | None, Field(description="The calling site; null for the admin key.")]


class DatasetCreate(BaseModel):
    """
    The ``spec`` part of ``POST /v1/datasets`` (a JSON object). Everything in it is public:
    bounds and categories must be known without looking at the data.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    allow_non_private: Annotated[
        bool | None,
        Field(
            description="Allow the non-private baseline fit on this dataset.",
            title="Allow Non Private",
        ),
    ] = False
    budget: BudgetIn
    features: Annotated[
        list[Annotated[NumericFeatureIn | CategoricalFeatureIn, Field(discriminator="type")]],
        Field(min_length=1, title="Features"),
    ]
    label: DatasetLabelIn
    missing: Annotated[
        Literal["error", "drop"] | None,
        Field(
            description="'error': refuse a file with missing cells (422 naming the columns and counts); 'drop': drop those rows.",
            title="Missing",
        ),
    ] = "error"
    missing_values: Annotated[
        list[str] | None,
        Field(
            description="Cell texts that count as missing in a CSV; default ['', '?', 'NA', 'N/A', 'NULL', 'null']. NaN and inf are never missing: in a numeric column they are an error.",
            title="Missing Values",
        ),
    ] = None
    name: Annotated[str, Field(max_length=200, min_length=1, title="Name")]
    positive_fraction: Annotated[
        DatasetCreatePositiveFraction | None,
        Field(
            description="Optional public prior of the positive class's frequency (binary labels only; e.g. from a census; never read from the data). Its majority class, max(p, 1 − p), is the baseline every fit's expected accuracy is compared with (a `below_majority_baseline` warning when below), when the site has no public reference dataset of this spec.",
            title="Positive Fraction",
        ),
    ] = None
    row_norm: Annotated[
        Literal["clip", "scale"] | None,
        Field(
            description="Bring rows into the unit ball by clipping each row (default) or by dividing every row by the public constant √(#features + 1).",
            title="Row Norm",
        ),
    ] = "clip"


class DatasetRead(BaseModel):
    """
    A dataset's metadata. Only its owner can read it (not the admin key).
    """

    allow_non_private: Annotated[bool, Field(title="Allow Non Private")]
    budget: BudgetCaps
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    deleted_at: Annotated[
        AwareDatetime | None,
        Field(
            description="Set once the dataset was deleted: its content is gone, its ledger kept.",
            title="Deleted At",
        ),
    ] = None
    feature_names: Annotated[
        list[str],
        Field(
            description="Names of the design matrix's columns (e.g. `workclass=Private`).",
            title="Feature Names",
        ),
    ]
    id: Annotated[str, Field(description="The dataset's id (32 hex digits).", title="Id")]
    ingest: IngestRead | None = None
    n_features: Annotated[
        int,
        Field(description="Columns of the design matrix, intercept included.", title="N Features"),
    ]
    n_rows: Annotated[int, Field(title="N Rows")]
    name: Annotated[str, Field(title="Name")]
    owner: Annotated[str, Field(description="The id of the owning site.", title="Owner")]
    spec: Annotated[
        dict[str, Any], Field(description="The spec as stored (normalised).", title="Spec")
    ]
    task: Annotated[
        Literal["binary", "multiclass", "regression"] | None,
        Field(
            description="What the label holds: two classes, 3 or more classes (`spec.label.classes`), or a number within public bounds (`spec.label.lower`/`upper`).",
            title="Task",
        ),
    ] = "binary"


class DpSgdTunableOptions(BaseModel):
    """
    The options (`params`) of `dp_sgd`. DP-SGD's options. Also checked with the dataset: b ≤ n; `eta` only with a schedule that uses it, `projection_kind` and `projection_seed` only with `projection_dim`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    batch_size: Annotated[
        int | None,
        Field(
            description="Mini-batch size b (1 ≤ b ≤ n); each pass makes ⌊n/b⌋ noisy updates. Default: min(50, n); for K classes min(n, max(50, ⌈dK/ε_pass⌉)), ε_pass the budget of one pass.",
            ge=1,
            title="Batch Size",
        ),
    ] = None
    epochs: Annotated[
        int | None,
        Field(
            description="Passes E over the data (each uses every row once).",
            ge=1,
            le=10000,
            title="Epochs",
        ),
    ] = 1
    eta: Annotated[
        DpSgdTunableOptionsEta | OptionCandidates | None,
        Field(
            description='Base step size η of the `constant` and `inverse_sqrt` schedules (leave it out for `inverse`). Default: 1; for K classes with the default batch size and `inverse_sqrt`, √(b/50) (the `inverse` schedule has none). Or `{"candidates": [...]}` (1 to 10 distinct values > 0): PrivFit chooses one privately within the same (ε, δ).',
            title="Eta",
        ),
    ] = None
    h: Annotated[
        float | None,
        Field(
            description="Width h of the `huber` loss (used only when `loss` is `huber`): binary, the Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
            gt=0.0,
            title="H",
        ),
    ] = 0.5
    projection_dim: Annotated[
        DpSgdTunableOptionsProjectionDim | None,
        Field(
            description="Dimension k of a public random projection of the rows (null: none); SGD runs in dimension k and the released weights are folded back to d.",
            title="Projection Dim",
        ),
    ] = None
    projection_kind: Annotated[
        Literal["gaussian", "achlioptas"] | None,
        Field(
            description="The projection matrix's entries (with `projection_dim` only; omitted: `gaussian`).",
            title="Projection Kind",
        ),
    ] = None
    projection_seed: Annotated[
        DpSgdTunableOptionsProjectionSeed | None,
        Field(
            description="Public seed of the projection matrix (with `projection_dim` only; null: drawn from the CSPRNG).",
            title="Projection Seed",
        ),
    ] = None
    radius: Annotated[
        DpSgdTunableOptionsRadius | None,
        Field(
            description="Radius R of the ball the iterates are projected onto (null: no projection).",
            title="Radius",
        ),
    ] = None
    schedule: Annotated[
        Literal["constant", "inverse_sqrt", "inverse"] | None,
        Field(
            description="Step sizes: `constant` η_t = η, `inverse_sqrt` η_t = η/√t, `inverse` η_t = 1/(λt).",
            title="Schedule",
        ),
    ] = "inverse_sqrt"


class EvaluationList(BaseModel):
    """
    A page of a model's evaluations.
    """

    items: Annotated[list[EvaluationRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(title="Total")]


class EvaluationQuoteRead(BaseModel):
    """
    A dry run: what the evaluation would cost. Nothing was spent.
    """

    budget: BudgetLeft
    cost: FitCost
    dataset_id: Annotated[str, Field(title="Dataset Id")]
    dry_run: Annotated[bool | None, Field(title="Dry Run")] = True
    epsilon_split: Annotated[
        dict[str, float],
        Field(description="How ε is divided between releases.", title="Epsilon Split"),
    ]
    model_id: Annotated[str, Field(title="Model Id")]
    warnings: Annotated[list[str], Field(title="Warnings")]


class FitCreateAdassp(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `adassp`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateAdasspEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateAdasspLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["adassp"], Field(description="`adassp`.", title="Mechanism")]
    params: Annotated[
        AdasspOptions | None, Field(description="The options of `adassp` (each optional).")
    ] = None
    regularization: Annotated[
        FitCreateAdasspRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateDpSgd(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `dp_sgd`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateDpSgdEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateDpSgdLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["dp_sgd"], Field(description="`dp_sgd`.", title="Mechanism")]
    params: Annotated[
        DpSgdTunableOptions | None, Field(description="The options of `dp_sgd` (each optional).")
    ] = None
    regularization: Annotated[
        FitCreateDpSgdRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateGaussianObjectivePerturbation(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `gaussian_objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateGaussianObjectivePerturbationEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateGaussianObjectivePerturbationLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["gaussian_objective_perturbation"],
        Field(description="`gaussian_objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        GaussianObjectivePerturbationOptions | None,
        Field(description="The options of `gaussian_objective_perturbation` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateGaussianObjectivePerturbationRegularization
        | RegularizationCandidates
        | Literal["auto"]
        | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateGeneralizedObjectivePerturbation(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `generalized_objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateGeneralizedObjectivePerturbationEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateGeneralizedObjectivePerturbationLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["generalized_objective_perturbation"],
        Field(description="`generalized_objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        GeneralizedObjectivePerturbationOptions | None,
        Field(description="The options of `generalized_objective_perturbation` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateGeneralizedObjectivePerturbationRegularization
        | RegularizationCandidates
        | Literal["auto"]
        | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateNoisyGd(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `noisy_gd`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateNoisyGdEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateNoisyGdLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[Literal["noisy_gd"], Field(description="`noisy_gd`.", title="Mechanism")]
    params: Annotated[
        NoisyGdOptions | None, Field(description="The options of `noisy_gd` (each optional).")
    ] = None
    regularization: Annotated[
        FitCreateNoisyGdRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateNonPrivate(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `non_private`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateNonPrivateEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateNonPrivateLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["non_private"], Field(description="`non_private`.", title="Mechanism")
    ]
    params: Annotated[
        NonPrivateOptions | None, Field(description="The options of `non_private` (each optional).")
    ] = None
    regularization: Annotated[
        FitCreateNonPrivateRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateObjectivePerturbation(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `objective_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateObjectivePerturbationEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateObjectivePerturbationLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["objective_perturbation"],
        Field(description="`objective_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        ObjectivePerturbationOptions | None,
        Field(description="The options of `objective_perturbation` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateObjectivePerturbationRegularization
        | RegularizationCandidates
        | Literal["auto"]
        | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateOutputPerturbation(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `output_perturbation`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateOutputPerturbationEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateOutputPerturbationLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["output_perturbation"],
        Field(description="`output_perturbation`.", title="Mechanism"),
    ]
    params: Annotated[
        OutputPerturbationOptions | None,
        Field(description="The options of `output_perturbation` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateOutputPerturbationRegularization
        | RegularizationCandidates
        | Literal["auto"]
        | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateStackingFeatures(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `stacking_features`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateStackingFeaturesEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateStackingFeaturesLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["stacking_features"], Field(description="`stacking_features`.", title="Mechanism")
    ]
    params: Annotated[
        StackingFeaturesOptions | None,
        Field(description="The options of `stacking_features` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateStackingFeaturesRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class FitCreateStackingSamples(BaseModel):
    """
    A fit of one mechanism on one dataset at a privacy cost (ε, δ). Mechanism `stacking_samples`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[
        float | None,
        Field(
            description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
            ge=0.0,
            lt=1.0,
            title="Delta",
        ),
    ] = 0.0
    epsilon: Annotated[
        FitCreateStackingSamplesEpsilon | None,
        Field(
            description="Privacy parameter ε of the whole fit (required except for `non_private`); from 1e-06 to 1000.",
            title="Epsilon",
        ),
    ] = None
    loss: Annotated[
        FitCreateStackingSamplesLoss | None,
        Field(
            description="The loss, by the dataset's task (its label): binary: `logistic`, `huber`; multiclass: `logistic`; regression: `squared`, `huber`. Omitted: the task's first (`logistic` for class labels, `squared` for a numeric label).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["stacking_samples"], Field(description="`stacking_samples`.", title="Mechanism")
    ]
    params: Annotated[
        StackingSamplesOptions | None,
        Field(description="The options of `stacking_samples` (each optional)."),
    ] = None
    regularization: Annotated[
        FitCreateStackingSamplesRegularization | RegularizationCandidates | Literal["auto"] | None,
        Field(
            description='λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from 1e-10 to 1e+06; or `{"candidates": [...]}` to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, which costs no privacy; the chosen λ and the rule appear in the calibration as `regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor together with step-size candidates (422).',
            title="Regularization",
        ),
    ] = None
    selection: Annotated[
        Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None,
        Field(
            description='How candidates are chosen privately (only with candidates; default `auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), `papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a uniformly drawn candidate fitted on all rows, the best by a noisy training error released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the smallest λ); the quote and the record show the method, the reason and the per-run budget. Random repetition needs a mechanism that runs at δ = 0, or `noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With `auto` and objective or generalized objective perturbation, the λ that `"regularization": "auto"` would give is weighed against tuning: when random repetition\'s smaller per-run budget would raise the excess-risk bound by a factor κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote (`calibration.tuning`), the job (`params.tuning_decision`) and the model\'s record show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, `automatic_regularization`, `requested_candidates` and `candidates`.',
            title="Selection",
        ),
    ] = None


class JobList(BaseModel):
    """
    One page of jobs, newest first.
    """

    items: Annotated[list[JobRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(title="Total")]


class ModelList(BaseModel):
    """
    One page of models, newest first.
    """

    items: Annotated[list[ModelSummary], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(title="Total")]


class ModelRead(BaseModel):
    """
    A model: coefficients with feature names, preprocessing and privacy record.
    """

    coefficients: Annotated[
        list[Coefficient] | None,
        Field(
            description="The weights by feature (None for models that are not one linear map, such as stacked and multi-class models: see `model`, whose `coef` has one row per class). A regression model's weights score in the label's [−1, 1] units: its prediction is lower + (clip(wᵀx, −1, 1) + 1)/2 · (upper − lower).",
            title="Coefficients",
        ),
    ]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    dataset_id: Annotated[str | None, Field(title="Dataset Id")]
    feature_names: Annotated[list[str], Field(title="Feature Names")]
    id: Annotated[str, Field(title="Id")]
    job_id: Annotated[str | None, Field(title="Job Id")]
    label: LabelRead | None
    loss: Annotated[str | None, Field(title="Loss")]
    mechanism: Annotated[str | None, Field(title="Mechanism")]
    model: Annotated[
        dict[str, Any], Field(description="The released model as JSON.", title="Model")
    ]
    preprocessing: Annotated[
        dict[str, Any],
        Field(
            description="The public preprocessing that `predict` applies to raw rows.",
            title="Preprocessing",
        ),
    ]
    privacy: PrivacyRecordRead
    source: Annotated[
        Literal["fit", "upload", "aggregate", "federated"],
        Field(
            description="`fit`: fitted by PrivFit; `upload`: a site's own classifier; `aggregate`: a study's combination of its members' models; `federated`: a study's multiparty fit across its members' granted datasets.",
            title="Source",
        ),
    ]
    task: Annotated[
        Literal["binary", "multiclass", "regression"] | None,
        Field(
            description="What the model predicts, by its label: two classes, one of `label.classes`, or a number within `label.lower`/`upper`.",
            title="Task",
        ),
    ] = "binary"


class ModelUpload(BaseModel):
    """
    A linear model a site trained itself: weights over the encoded features, for any of
    a dataset spec's three label forms.

    The feature spec has the shape of a dataset spec's `features`/`label`: numeric columns
    with public bounds (mapped onto [0, 1]) and categorical columns with their category list
    (one-hot), then the intercept and the row-norm step. `weights` has one entry per encoded
    feature, in that order (see `feature_names` in the response); for a multi-class label,
    one such row per declared class. A model exported by PrivFit (`format=json`) uploads back
    with its `label`, its `preprocessing` `features`/`row_norm` and its `weights.coef`, and
    predicts the same.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    features: Annotated[
        list[Annotated[NumericFeatureIn | CategoricalFeatureIn, Field(discriminator="type")]],
        Field(min_length=1, title="Features"),
    ]
    label: DatasetLabelIn
    loss: Annotated[
        Literal["logistic", "huber", "squared", "other"] | None,
        Field(
            description="The loss it was trained with: `logistic` (the default for a class label: σ(score), or the softmax for classes, is a probability), `huber` or `other` for a binary label; `logistic` (multinomial) or `other` for classes; `squared` (the default for a numeric label), `huber` or `other` for a numeric label. Another combination is a 422 naming `loss`.",
            title="Loss",
        ),
    ] = None
    privacy_claim: PrivacyClaimIn | None = None
    row_norm: Annotated[Literal["clip", "scale"] | None, Field(title="Row Norm")] = "clip"
    weights: Annotated[
        ModelUploadWeights | ModelUploadWeights1,
        Field(
            description="Binary label: one weight per encoded feature, the positive class when wᵀx > 0. Multi-class label (`classes`): one row of those weights per declared class, in the label's order (row k scores `classes[k]`; the class of the largest score is predicted). Numeric label (`lower`/`upper`): one weight per encoded feature scoring in the label's [−1, 1] units, not in label units: the prediction is lower + (clip(wᵀx, −1, 1) + 1)/2 · (upper − lower), as for a model PrivFit fits and as its export's `weights.coef` and `decision_rule` state. Each weight finite with |w| ≤ 1,000,000.",
            title="Weights",
        ),
    ]


class OfferList(BaseModel):
    items: Annotated[list[OfferRead], Field(title="Items")]


class PlanCreateStackingFeatures(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `stacking_features`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateStackingFeaturesLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["stacking_features"], Field(description="`stacking_features`.", title="Mechanism")
    ]
    params: Annotated[
        StackingFeaturesOptions | None,
        Field(description="The options of `stacking_features` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateStackingFeaturesReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateStackingFeaturesSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateStackingFeaturesTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


class PlanCreateStackingSamples(BaseModel):
    """
    A grid of ε (and λ) for one mechanism; optionally a public reference dataset to simulate on and a target accuracy. Mechanism `stacking_samples`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    delta: Annotated[float | None, Field(ge=0.0, lt=1.0, title="Delta")] = 0.0
    epsilons: Annotated[list[float], Field(max_length=40, min_length=1, title="Epsilons")]
    loss: Annotated[
        PlanCreateStackingSamplesLoss | None,
        Field(
            description="The loss; without one, the dataset's task's default (`logistic` for class labels, `squared` for numeric ones).",
            title="Loss",
        ),
    ] = None
    mechanism: Annotated[
        Literal["stacking_samples"], Field(description="`stacking_samples`.", title="Mechanism")
    ]
    params: Annotated[
        StackingSamplesOptions | None,
        Field(description="The options of `stacking_samples` (each optional)."),
    ] = None
    reference_dataset_id: Annotated[
        PlanCreateStackingSamplesReferenceDatasetId | None,
        Field(
            description="A dataset of yours uploaded with `allow_non_private` (public rows) and the same spec, to simulate the mechanism on.",
            title="Reference Dataset Id",
        ),
    ] = None
    regularizations: Annotated[
        list[float | Literal["auto"]] | None,
        Field(
            description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by fits without a λ (its record is on the point as `regularization_rule`).',
            max_length=40,
            min_length=1,
            title="Regularizations",
        ),
    ] = [0.001]
    repeats: Annotated[
        int | None,
        Field(
            description="Simulated fits per grid point (grid × repeats ≤ 200).",
            ge=2,
            le=50,
            title="Repeats",
        ),
    ] = 10
    seed: Annotated[PlanCreateStackingSamplesSeed | None, Field(title="Seed")] = None
    target_accuracy: Annotated[
        PlanCreateStackingSamplesTargetAccuracy | None, Field(title="Target Accuracy")
    ] = None
    target_probability: Annotated[
        float | None, Field(gt=0.0, le=1.0, title="Target Probability")
    ] = 0.9


class PredictResponse(BaseModel):
    """
    One prediction per row, in request order.
    """

    predictions: Annotated[list[PredictionRead], Field(title="Predictions")]


class Problem(BaseModel):
    """
    An error, as `application/problem+json` (RFC 9457).

    `type` is a stable URI per kind of error; clients branch on it, not on `detail`. Some
    problems add members: `errors` (validation), `remaining_epsilon`/`remaining_delta`
    (budget exhausted).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    detail: Annotated[
        str | None,
        Field(
            description="What went wrong with this request; never contains secrets.", title="Detail"
        ),
    ] = None
    errors: Annotated[
        list[ValidationIssue] | None,
        Field(
            description="For validation problems: every invalid part of the request.",
            title="Errors",
        ),
    ] = None
    instance: Annotated[str | None, Field(description="The request path.", title="Instance")] = None
    request_id: Annotated[
        str | None,
        Field(
            description="Also in the X-Request-ID header; quote it when reporting.",
            title="Request Id",
        ),
    ] = None
    status: Annotated[
        int, Field(description="The HTTP status code.", ge=400, le=599, title="Status")
    ]
    title: Annotated[str, Field(description="Short summary of the kind of problem.", title="Title")]
    type: Annotated[
        str,
        Field(
            description="URI identifying the kind of problem.",
            examples=["https://privfit.dev/problems/not-found"],
            title="Type",
        ),
    ]


class RemoteContributionList(BaseModel):
    items: Annotated[list[RemoteContributionRead], Field(title="Items")]


class SiteList(BaseModel):
    """
    One page of sites.
    """

    items: Annotated[list[SiteRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(description="Number of sites in all pages.", ge=0, title="Total")]


class StudyCreate(BaseModel):
    """
    A new study; the caller becomes its coordinator (and a member).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    members: Annotated[
        list[StudyCreateMember],
        Field(
            description="Ids of the member sites (besides the coordinator, who is always one).",
            max_length=101,
            min_length=1,
            title="Members",
        ),
    ]
    name: Annotated[str, Field(max_length=200, min_length=1, title="Name")]
    spec: StudySpecIn


class StudyRead(BaseModel):
    """
    A study as its members see it.
    """

    contributions: Annotated[list[ContributionRead], Field(title="Contributions")]
    coordinator: Annotated[
        str, Field(description="The coordinating site's id.", title="Coordinator")
    ]
    created_at: Annotated[AwareDatetime, Field(title="Created At")]
    feature_names: Annotated[
        list[str],
        Field(description="The encoded features, intercept included.", title="Feature Names"),
    ]
    id: Annotated[str, Field(title="Id")]
    members: Annotated[list[StudyMemberRead], Field(title="Members")]
    name: Annotated[str, Field(title="Name")]
    results: Annotated[list[StudyResultRead], Field(title="Results")]
    spec: Annotated[
        dict[str, Any], Field(description="The label and features, normalised.", title="Spec")
    ]


class DatasetList(BaseModel):
    """
    One page of datasets.
    """

    items: Annotated[list[DatasetRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(title="Total")]


FitCreate = TypeAliasType(
    "FitCreate",
    Annotated[
        FitCreateNonPrivate
        | FitCreateOutputPerturbation
        | FitCreateObjectivePerturbation
        | FitCreateGeneralizedObjectivePerturbation
        | FitCreateGaussianObjectivePerturbation
        | FitCreateDpSgd
        | FitCreateNoisyGd
        | FitCreateAdassp
        | FitCreateStackingSamples
        | FitCreateStackingFeatures,
        Field(
            description="A fit of one mechanism on one dataset at a privacy cost (ε, δ).",
            discriminator="mechanism",
            examples=[
                {
                    "delta": 0.0,
                    "epsilon": 0.5,
                    "loss": "logistic",
                    "mechanism": "objective_perturbation",
                    "params": {},
                    "regularization": "auto",
                }
            ],
            title="FitCreate",
        ),
    ],
)


PlanCreate = TypeAliasType(
    "PlanCreate",
    Annotated[
        PlanCreateNonPrivate
        | PlanCreateOutputPerturbation
        | PlanCreateObjectivePerturbation
        | PlanCreateGeneralizedObjectivePerturbation
        | PlanCreateGaussianObjectivePerturbation
        | PlanCreateDpSgd
        | PlanCreateNoisyGd
        | PlanCreateAdassp
        | PlanCreateStackingSamples
        | PlanCreateStackingFeatures,
        Field(
            description="A grid of ε (and λ) for one mechanism; optionally a public reference dataset to\nsimulate on and a target accuracy.",
            discriminator="mechanism",
            examples=[
                {
                    "epsilons": [0.1, 0.5, 1.0, 2.0],
                    "mechanism": "objective_perturbation",
                    "reference_dataset_id": "00000000000000000000000000000000",
                    "regularizations": [0.001],
                    "repeats": 10,
                    "target_accuracy": 0.8,
                    "target_probability": 0.9,
                }
            ],
            title="PlanCreate",
        ),
    ],
)


class StudyList(BaseModel):
    """
    One page of studies, newest first.
    """

    items: Annotated[list[StudyRead], Field(title="Items")]
    limit: Annotated[int, Field(title="Limit")]
    offset: Annotated[int, Field(title="Offset")]
    total: Annotated[int, Field(title="Total")]
