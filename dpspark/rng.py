"""Randomness: secure by default, keyed per batch so retried tasks reproduce their noise.

A run draws one secret *job key* (128 bits from the operating system). Every Arrow
batch derives its own generator from (job key, partition, batch) with numpy's
counter-based Philox: the key is the job key and the batch's coordinates sit in the
two high words of Philox's 256-bit counter, so streams of different batches never
overlap (a batch would need 2**128 draws to reach its neighbour) and a recomputed or
retried task draws exactly the same noise inside one run. A new run draws a new key,
so two runs give independent text.

The key and any seed stay in memory: they are never logged or written anywhere.
"""

from __future__ import annotations

import secrets
import warnings

import numpy as np

from dpspark.errors import DPSparkWarning

KEY_BYTES = 16


class SeededRunWarning(DPSparkWarning):
    """A fixed seed makes the noise predictable to anyone who knows the seed."""


def secure_generator() -> np.random.Generator:
    """A generator seeded from OS entropy (the default for every sampler)."""
    return np.random.Generator(np.random.Philox(key=int.from_bytes(secrets.token_bytes(KEY_BYTES), "little")))


def new_job_key(seed: int | None = None) -> bytes:
    """Return a fresh 128-bit job key from OS entropy, or one derived from ``seed``.

    A seed is for tests and reproducible experiments only: it warns, because the
    noise of a seeded run can be recomputed by anyone who learns the seed.
    """
    if seed is None:
        return secrets.token_bytes(KEY_BYTES)
    warnings.warn(
        "a fixed seed makes the noise reproducible: use it for tests and experiments only, "
        "never for a release (omit --seed to draw the key from the operating system)",
        SeededRunWarning,
        stacklevel=2,
    )
    state = np.random.SeedSequence(seed).generate_state(4, np.uint32)
    return state.tobytes()


def batch_generator(job_key: bytes, partition: int, batch: int) -> np.random.Generator:
    """The generator of one Arrow batch, a pure function of (job key, partition, batch)."""
    if len(job_key) != KEY_BYTES:
        raise ValueError(f"job key must be {KEY_BYTES} bytes, got {len(job_key)}")
    if partition < 0 or batch < 0:
        raise ValueError(f"partition and batch must be non-negative, got {partition}, {batch}")
    counter = np.array([0, 0, batch, partition], dtype=np.uint64)
    bit_gen = np.random.Philox(key=int.from_bytes(job_key, "little"), counter=counter)
    return np.random.Generator(bit_gen)
