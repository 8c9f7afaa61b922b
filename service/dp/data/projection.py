"""Data-independent random projections (seed 001 §2.4; Johnson–Lindenstrauss).

A :class:`RandomProjection` maps R^{d_in} → R^k by x ↦ Rx with a k × d_in matrix R whose
entries are i.i.d. with mean 0 and variance 1/k, so that E‖Rx‖² = ‖x‖² for every x:

* ``"gaussian"``: R_ij ~ N(0, 1/k);
* ``"achlioptas"`` (Achlioptas 2003, "database-friendly"): R_ij = √(3/k)·s_ij with
  s_ij = +1, 0, −1 with probabilities 1/6, 2/3, 1/6.

Johnson–Lindenstrauss: for m points and 0 < η < 1, k ≥ 4 ln m / (η²/2 − η³/3) gives, with
probability ≥ 1 − 1/m, (1 − η)‖u − v‖² ≤ ‖Ru − Rv‖² ≤ (1 + η)‖u − v‖² for all pairs
(Dasgupta & Gupta 2003; the same bound holds for the Achlioptas entries).

Privacy. R is generated from a public integer ``seed`` by numpy's PCG64 and depends on
nothing but (d_in, k, seed, kind). The seed is drawn from the operating system's CSPRNG when
the projection is created (:meth:`RandomProjection.create`), i.e. before and independently of
any data, and is stored in the preprocessing spec; the projection is therefore public and
applying it to each record separately is a fixed per-record map that costs no privacy
budget. A projection can lengthen a row (‖Rx‖ may exceed ‖x‖), so :meth:`apply` re-clips
every projected row to L2 norm ≤ 1, again a per-record map.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_SEED",
    "PROJECTION_KINDS",
    "RandomProjection",
    "clip_rows",
    "jl_dimension",
]

FloatArray = NDArray[np.float64]
ProjectionKind = Literal["gaussian", "achlioptas"]
PROJECTION_KINDS: tuple[str, ...] = ("gaussian", "achlioptas")

#: Seeds are below 2^53 so they survive a round trip through JSON in any client (IEEE doubles).
MAX_SEED = 2**53 - 1

#: Rows whose norm exceeds 1 are scaled to norm (1 − 2^-50) so that rounding in the division
#: can never leave a norm a few ulps above 1.
_CLIP_TARGET = 1.0 - 2.0**-50


def clip_rows(X: FloatArray, *, copy: bool = True) -> FloatArray:
    """Scale every row with L2 norm > 1 to norm ≤ 1 (x ↦ x / ‖x‖, up to a 2^-50 margin).

    Rows already in the unit ball are left bit-for-bit unchanged. Guarantees
    that every computed squared norm Σ_j x_j² (``np.einsum("ij,ij->i", out, out)``) is ≤ 1.
    """
    out = np.array(X, dtype=np.float64) if copy else np.asarray(X, dtype=np.float64)
    if out.ndim != 2:
        raise ValueError("clip_rows expects a 2-D array")
    sq = np.einsum("ij,ij->i", out, out)
    over = np.flatnonzero(sq > 1.0)
    if over.size:
        out[over] *= (_CLIP_TARGET / np.sqrt(sq[over]))[:, None]
        # Rounding in long rows could in principle leave a computed squared norm a hair above
        # 1; shrink those rows a little more until none is (at most a few passes).
        while True:
            sq_over = np.einsum("ij,ij->i", out[over], out[over])
            still = over[sq_over > 1.0]
            if still.size == 0:
                break
            out[still] *= _CLIP_TARGET
    return out


def jl_dimension(n_points: int, distortion: float) -> int:
    """The Johnson–Lindenstrauss target dimension k ≥ 4 ln m / (η²/2 − η³/3) (Dasgupta–Gupta).

    With this k a random projection preserves all pairwise squared distances among
    ``n_points`` points within a factor 1 ± ``distortion`` with probability ≥ 1 − 1/m.
    """
    if n_points < 2:
        raise ValueError(f"n_points must be at least 2, got {n_points}")
    if not 0.0 < distortion < 1.0:
        raise ValueError(f"distortion must lie in (0, 1), got {distortion!r}")
    denom = distortion**2 / 2.0 - distortion**3 / 3.0
    return int(np.ceil(4.0 * np.log(n_points) / denom))


@dataclass(frozen=True, slots=True)
class RandomProjection:
    """The public linear map x ↦ Rx, R ∈ R^{k × d_in} generated from ``seed`` (see module doc)."""

    d_in: int
    k: int
    seed: int
    kind: ProjectionKind = "gaussian"

    def __post_init__(self) -> None:
        for name in ("d_in", "k", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"projection {name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.d_in < 1:
            raise ValueError(f"projection d_in must be at least 1, got {self.d_in}")
        if self.k < 1:
            raise ValueError(f"projection dimension k must be at least 1, got {self.k}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"projection seed must lie in [0, 2^53 − 1], got {self.seed}")
        if self.kind not in PROJECTION_KINDS:
            kinds = ", ".join(PROJECTION_KINDS)
            raise ValueError(f"unknown projection kind {self.kind!r}; choose one of {kinds}")

    @classmethod
    def create(
        cls,
        d_in: int,
        k: int,
        *,
        kind: ProjectionKind = "gaussian",
        rng: np.random.Generator | None = None,
    ) -> RandomProjection:
        """A projection with a fresh public seed: from ``secrets`` (the OS CSPRNG), or from
        ``rng`` in test mode. The seed is chosen before any data is seen."""
        seed = secrets.randbits(53) if rng is None else int(rng.integers(0, MAX_SEED + 1))
        return cls(d_in=d_in, k=k, seed=seed, kind=kind)

    @property
    def matrix(self) -> FloatArray:
        """R (k × d_in), read-only; regenerated deterministically from the seed and cached."""
        return _projection_matrix(self.d_in, self.k, self.seed, self.kind)

    def project(self, X: FloatArray) -> FloatArray:
        """X Rᵀ, without clipping (for rows x: Rx)."""
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self.d_in:
            raise ValueError(
                f"the projection expects rows of length {self.d_in}, got shape {arr.shape}"
            )
        return np.asarray(arr @ self.matrix.T, dtype=np.float64)

    def apply(self, X: FloatArray) -> FloatArray:
        """Project every row and re-clip it to L2 norm ≤ 1."""
        return clip_rows(self.project(X), copy=False)

    def fold(self, w: FloatArray) -> FloatArray:
        """Rᵀw: the coefficient vector in the original space of a model w on projected rows,
        so that (Rᵀw)ᵀx = wᵀ(Rx) for every x (exact for the unclipped projection)."""
        v = np.asarray(w, dtype=np.float64).reshape(-1)
        if v.shape[0] != self.k:
            raise ValueError(f"expected a vector of length {self.k}, got {v.shape[0]}")
        return np.asarray(self.matrix.T @ v, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "d_in": self.d_in, "k": self.k, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RandomProjection:
        if not isinstance(data, Mapping):
            raise ValueError("a projection must be a JSON object")
        unknown = set(data) - {"kind", "d_in", "k", "seed"}
        if unknown:
            raise ValueError(f"unknown projection fields: {', '.join(sorted(unknown))}")
        missing = {"d_in", "k", "seed"} - set(data)
        if missing:
            raise ValueError(f"projection is missing fields: {', '.join(sorted(missing))}")
        kind = data.get("kind", "gaussian")
        if kind not in PROJECTION_KINDS:
            raise ValueError(
                f"unknown projection kind {kind!r}; choose one of {', '.join(PROJECTION_KINDS)}"
            )
        return cls(
            d_in=data["d_in"], k=data["k"], seed=data["seed"], kind=cast(ProjectionKind, kind)
        )


@functools.lru_cache(maxsize=16)
def _projection_matrix(d_in: int, k: int, seed: int, kind: str) -> FloatArray:
    gen = np.random.Generator(np.random.PCG64(seed))
    if kind == "gaussian":
        R = gen.standard_normal((k, d_in)) / np.sqrt(k)
    else:
        u = gen.random((k, d_in))
        signs = np.where(u < 1.0 / 6.0, 1.0, np.where(u < 2.0 / 6.0, -1.0, 0.0))
        R = signs * np.sqrt(3.0 / k)
    R = np.ascontiguousarray(R, dtype=np.float64)
    R.setflags(write=False)
    return R
