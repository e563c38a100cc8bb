"""Randomness: secure by default, keyed per batch so retried tasks reproduce their noise.

A run draws one secret *job key* (128 bits from the operating system). Every Arrow
batch derives its own generator from (job key, partition, batch) with numpy's
counter-based Philox: the key is the job key and the batch's coordinates sit in the
two high words of Philox's 256-bit counter, so streams of different batches never
overlap (a batch would need 2**128 draws to reach its neighbour) and a recomputed or
retried task draws exactly the same noise inside one run. A new run draws a new key,
so two runs give independent text.

Every other stream a run needs is derived here too, never by a module's own hashing:
``derive_key(job_key, *labels)`` is the key of a named sub-stream (a keyed BLAKE2b of
the labels; see its docstring for the encoding) and ``derived_generator(job_key,
*labels)`` is the Philox generator keyed by it. A derived key is a one-way function of
the job key, so publishing what a derived stream drew (a public projection, say) tells
nothing about the job key or about any other stream.

The key and any seed stay in memory: they are never logged or written anywhere.
"""

from __future__ import annotations

import hashlib
import numbers
import secrets
import warnings

import numpy as np

from dpspark.errors import DPSparkWarning

KEY_BYTES = 16
_DERIVE_PERSON = b"dpspark.derive"  # BLAKE2b personalisation: domain separation from other uses


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


def _check_key(job_key: bytes) -> None:
    if not isinstance(job_key, (bytes, bytearray, memoryview)):
        raise TypeError(f"job key must be bytes, got {type(job_key).__name__}")
    if len(job_key) != KEY_BYTES:
        raise ValueError(f"job key must be {KEY_BYTES} bytes, got {len(job_key)}")


def _encode_label(label: str | int | float) -> bytes:
    """One label as ``tag || 8-byte big-endian length || payload`` (self-delimiting).

    The tag says the type (``s`` str, ``i`` int, ``f`` float), so "1", 1 and 1.0 differ;
    the payload is the UTF-8 of a str, the decimal digits of an int, ``float.hex`` of a
    float (exact: every float has one hex form). numpy integers and floats count as
    int and float; bools and anything else are refused rather than guessed.
    """
    if isinstance(label, bool) or isinstance(label, np.bool_):
        raise TypeError("a label cannot be a bool (say what it means with a str)")
    if isinstance(label, str):
        tag, payload = b"s", label.encode("utf-8")
    elif isinstance(label, numbers.Integral):
        tag, payload = b"i", str(int(label)).encode("ascii")
    elif isinstance(label, numbers.Real):
        tag, payload = b"f", float(label).hex().encode("ascii")
    else:
        raise TypeError(f"a label must be a str, int or float, got {type(label).__name__}")
    return tag + len(payload).to_bytes(8, "big") + payload


def derive_key(job_key: bytes, *labels: str | int | float) -> bytes:
    """The 128-bit key of the sub-stream named by ``labels``, a pure function of the job key.

    ``BLAKE2b(encode(labels), key=job_key, person=b"dpspark.derive", digest_size=16)``,
    where ``encode`` concatenates each label's self-delimiting encoding (a type tag, its
    length, its bytes: see ``_encode_label``), so different label tuples never share an
    input: ("ab", "c") and ("a", "bc") differ, and so do ("1",), (1,) and (1.0,). At
    least one label is required. The result has the job key's length, so it can serve as
    a job key itself (``batch_generator(derive_key(key, ...), partition, batch)``).
    """
    _check_key(job_key)
    if not labels:
        raise ValueError("derive_key needs at least one label")
    data = b"".join(_encode_label(label) for label in labels)
    return hashlib.blake2b(data, key=bytes(job_key), digest_size=KEY_BYTES, person=_DERIVE_PERSON).digest()


def derived_generator(job_key: bytes, *labels: str | int | float) -> np.random.Generator:
    """The Philox generator keyed by ``derive_key(job_key, *labels)`` (counter at zero)."""
    key = derive_key(job_key, *labels)
    return np.random.Generator(np.random.Philox(key=int.from_bytes(key, "little")))


def batch_generator(job_key: bytes, partition: int, batch: int) -> np.random.Generator:
    """The generator of one Arrow batch, a pure function of (job key, partition, batch)."""
    _check_key(job_key)
    if partition < 0 or batch < 0:
        raise ValueError(f"partition and batch must be non-negative, got {partition}, {batch}")
    counter = np.array([0, 0, batch, partition], dtype=np.uint64)
    bit_gen = np.random.Philox(key=int.from_bytes(job_key, "little"), counter=counter)
    return np.random.Generator(bit_gen)
