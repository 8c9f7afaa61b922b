"""Exact lattice release of a noisy vector, ``γ·round((w + X)/γ)`` with X drawn exactly, by layer:

* :mod:`~service.dp.noise.lattice.exact`: the release, its privacy argument, and the sampler that
  defines it (lazy uniform bits, rigorous decimal interval arithmetic);
* :mod:`~service.dp.noise.lattice.fast`: the same function in doubles with a proved error bound,
  deciding most coordinates at numpy speed; the blocks and release functions callers use;
* :mod:`~service.dp.noise.lattice.enclosure`: the real noise vector itself as doubles with a
  proved error bound (objective perturbation's certified release).

The names below are the lattice's public API (``lattice.GaussianBlock``, ``lattice.GRID``).
"""

from service.dp.noise.lattice.enclosure import (
    ENCLOSURE_RELATIVE,
    Enclosure,
    gaussian_enclosure,
    norm_exponential_enclosure,
)
from service.dp.noise.lattice.exact import CLAMP, GRID, GRID_EXPONENT, RELEASE_NOTE
from service.dp.noise.lattice.fast import (
    GaussianBlock,
    NormExponentialBlock,
    gaussian_release,
    laplace_release,
    norm_exponential_release,
)

__all__ = [
    "CLAMP",
    "ENCLOSURE_RELATIVE",
    "GRID",
    "GRID_EXPONENT",
    "RELEASE_NOTE",
    "Enclosure",
    "GaussianBlock",
    "NormExponentialBlock",
    "gaussian_enclosure",
    "gaussian_release",
    "laplace_release",
    "norm_exponential_enclosure",
    "norm_exponential_release",
]
