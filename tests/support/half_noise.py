"""A mutant for checking the tests' power: every lattice sampler draws half its noise.

Load it as a pytest plugin, ``pytest -p tests.support.half_noise tests/unit/dp``, and the
tests that pin a mechanism's noise law must fail: :class:`service.dp.noise.lattice.GaussianBlock`
draws N(0, (σ/2)²) for σ, :class:`~service.dp.noise.lattice.NormExponentialBlock` draws
∝ exp(−2β‖x‖) for β (so its releases, enclosures and DP-SGD's blocks carry half the noise),
and :func:`~service.dp.noise.lattice.laplace_release` draws Laplace(b/2) for b. The service reaches
the samplers through the package (``lattice.GaussianBlock(...)``) and the lattice's own layers
through their modules (``fast``'s releases, ``enclosure``'s blocks), so the plugin replaces the
names in the package and in every layer that holds them, before the tests import anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.dp.noise import lattice
from service.dp.noise.lattice import enclosure, exact, fast

_GaussianBlock = lattice.GaussianBlock
_NormExponentialBlock = lattice.NormExponentialBlock
_laplace_release = lattice.laplace_release


class HalfGaussianBlock(_GaussianBlock):
    """A Gaussian block drawing σ/2 when asked for σ."""

    def __init__(self, count: int, dim: int, *, sigma: float, rng: Any = None) -> None:
        super().__init__(count, dim, sigma=sigma / 2.0, rng=rng)


class HalfNormExponentialBlock(_NormExponentialBlock):
    """A norm-exponential block drawing rate 2β when asked for β."""

    def __init__(self, count: int, dim: int, *, beta: float, rng: Any = None) -> None:
        super().__init__(count, dim, beta=2.0 * beta, rng=rng)


def half_laplace_release(
    centre: np.typing.NDArray[np.float64], *, scale: float, rng: np.random.Generator | None = None
) -> np.typing.NDArray[np.float64]:
    """Laplace(b/2) instead of Laplace(b)."""
    return _laplace_release(centre, scale=scale / 2.0, rng=rng)


_MUTANTS: dict[str, object] = {
    "GaussianBlock": HalfGaussianBlock,
    "NormExponentialBlock": HalfNormExponentialBlock,
    "laplace_release": half_laplace_release,
}
for _module in (lattice, fast, exact, enclosure):
    for _name, _mutant in _MUTANTS.items():
        if _name in vars(_module):
            setattr(_module, _name, _mutant)
