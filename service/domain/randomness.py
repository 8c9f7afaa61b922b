"""Where a job's noise comes from (docs/design.md §2 "Randomness").

Production draws every noise sample from the operating system's CSPRNG: ``service.dp.fit`` is
called with ``rng=None``. A fixed seed is honoured only when the server runs in explicit test
mode (``environment == "test"`` with a configured test seed). Each job then gets its own
generator, seeded with :meth:`Randomness.job_seed`: SHA-256 of the configured seed and the job
id, so two jobs never share a noise stream (with one seed for every job, the difference of two
models fitted on neighbouring datasets would cancel the noise exactly). The model's privacy
record names the configured seed and the job's derived seed.
"""

from __future__ import annotations

import hashlib
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

    def job_seed(self, job_id: str) -> int | None:
        """The seed of job ``job_id``: the first 128 bits of SHA-256(seed ‖ 0x00 ‖ job id).

        None in production. Distinct jobs get unrelated seeds (a collision needs a SHA-256
        128-bit prefix collision), and the same job always gets the same one, so a test run
        is reproducible.
        """
        if self.seed is None:
            return None
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("a seeded job needs its job id to derive its seed")
        digest = hashlib.sha256(f"{self.seed}".encode() + b"\x00" + job_id.encode()).digest()
        return int.from_bytes(digest[:16], "big")

    def generator(self, job_id: str) -> np.random.Generator | None:
        """A fresh generator for job ``job_id`` (None: ``service.dp`` reads the CSPRNG)."""
        seed = self.job_seed(job_id)
        return None if seed is None else np.random.default_rng(seed)

    def describe(self, job_id: str | None = None) -> dict[str, Any]:
        """The randomness part of a privacy record (with the job's derived seed if given)."""
        if self.seed is None:
            return {
                "source": "csprng",
                "description": "every noise draw came from the operating system's CSPRNG "
                "(os.urandom)",
            }
        return {
            "source": "test_seed",
            "seed": self.seed,
            **({} if job_id is None else {"job_seed": str(self.job_seed(job_id))}),
            "description": "noise came from a per-job seed derived from a fixed seed because "
            "the server ran in explicit test mode; anyone who knows the seed can remove the "
            "noise, so this model carries no privacy guarantee in practice",
        }
