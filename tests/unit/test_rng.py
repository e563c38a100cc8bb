from __future__ import annotations

import numpy as np
import pytest

from dpspark import rng as dprng


def test_batch_generator_is_a_pure_function_of_key_partition_batch():
    key = bytes(range(16))
    a = dprng.batch_generator(key, 3, 7).standard_normal(100)
    b = dprng.batch_generator(key, 3, 7).standard_normal(100)
    np.testing.assert_array_equal(a, b)


def test_batches_partitions_and_keys_give_different_streams():
    key = bytes(range(16))
    draws = [
        dprng.batch_generator(key, 0, 0).random(8),
        dprng.batch_generator(key, 0, 1).random(8),
        dprng.batch_generator(key, 1, 0).random(8),
        dprng.batch_generator(bytes(16), 0, 0).random(8),
    ]
    for i in range(len(draws)):
        for j in range(i + 1, len(draws)):
            assert not np.array_equal(draws[i], draws[j])


def test_job_keys_come_from_os_entropy(monkeypatch):
    calls = []
    real = dprng.secrets.token_bytes

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(dprng.secrets, "token_bytes", spy)
    k1, k2 = dprng.new_job_key(), dprng.new_job_key()
    assert calls == [16, 16] and k1 != k2 and len(k1) == 16
    dprng.secure_generator()
    assert len(calls) == 3


def test_seed_reproduces_and_warns():
    with pytest.warns(dprng.SeededRunWarning, match="seed"):
        a = dprng.new_job_key(42)
    with pytest.warns(dprng.SeededRunWarning):
        b = dprng.new_job_key(42)
    assert a == b and len(a) == 16


def test_invalid_coordinates():
    with pytest.raises(ValueError):
        dprng.batch_generator(bytes(16), -1, 0)
    with pytest.raises(ValueError):
        dprng.batch_generator(bytes(8), 0, 0)
