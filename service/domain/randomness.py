"""Where a job's noise comes from (DESIGN §2 "Randomness").

Production draws every noise sample from the operating system's CSPRNG: ``service.dp.fit`` is
called with ``rng=None``. A fixed seed is honoured only when the server runs in explicit test
mode (``environment == "test"`` with a configured test seed); each job then gets a generator
seeded from it, and the model's privacy record says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["Randomness", "RandomnessSource"]

RandomnessSource = Literal["csprng", "test_seed"]


@dataclass(frozen=True, slots=True)
class Randomness:
    """The noise source of a worker: the CSPRNG (``seed is None``) or a test seed."""

    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and (isinstance(self.seed, bool) or self.seed < 0):
            raise ValueError("the test seed must be a non-negative integer")

    @classmethod
    def from_settings(cls, *, environment: str, test_seed: int | None) -> Randomness:
        """The CSPRNG, unless ``environment == "test"`` and a test seed is configured."""
        if test_seed is not None and environment == "test":
            return cls(seed=test_seed)
        return cls()

    @property
    def source(self) -> RandomnessSource:
        return "csprng" if self.seed is None else "test_seed"

    def generator(self) -> np.random.Generator | None:
        """A fresh generator for one job (None: ``service.dp`` reads the CSPRNG itself)."""
        return None if self.seed is None else np.random.default_rng(self.seed)

    def describe(self) -> dict[str, Any]:
        """The randomness part of a privacy record."""
        if self.seed is None:
            return {
                "source": "csprng",
                "description": "every noise draw came from the operating system's CSPRNG "
                "(os.urandom)",
            }
        return {
            "source": "test_seed",
            "seed": self.seed,
            "description": "noise came from a fixed seed because the server ran in explicit "
            "test mode; anyone who knows the seed can remove the noise, so this model carries "
            "no privacy guarantee in practice",
        }
