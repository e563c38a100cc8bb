from __future__ import annotations

import numpy as np
import pytest

from dpspark import rng as dprng

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


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


def test_derive_key_is_a_pure_function_of_key_and_labels():
    key = bytes(range(16))
    a = dprng.derive_key(key, "train-time", 2.5, 1.0, 3)
    assert a == dprng.derive_key(key, "train-time", 2.5, 1.0, 3)
    assert len(a) == dprng.KEY_BYTES and a != key
    assert a != dprng.derive_key(bytes(16), "train-time", 2.5, 1.0, 3)
    # numpy scalars are the numbers they hold
    assert a == dprng.derive_key(key, "train-time", np.float64(2.5), np.float32(1.0), np.int64(3))


def test_different_labels_give_different_keys():
    key = bytes(range(16))
    labels = [
        ("projection",),
        ("projection", 0),
        ("train-time", 2.5, 1.0, 0),
        ("train-time", 2.5, 1.0, 1),
        ("test-time", 2.5, 1.0, 0),
        ("train-time", 2.5, 2.0, 0),
        ("train-time", 0.1 + 0.2, 1.0, 0),
        ("train-time", 0.3, 1.0, 0),  # floats are exact: 0.1 + 0.2 is not 0.3
    ]
    keys = [dprng.derive_key(key, *ls) for ls in labels]
    assert len(set(keys)) == len(keys)


def test_label_encoding_is_unambiguous():
    key = bytes(range(16))
    pairs = [
        (("ab", "c"), ("a", "bc")),
        (("abc",), ("ab", "c")),
        (("a", ""), ("a",)),
        (("1",), (1,)),
        ((1,), (1.0,)),
        (("1.0",), (1.0,)),
        ((0.0,), (-0.0,)),
        ((12,), (1, 2)),
        (("s\x00",), ("s", "")),
    ]
    for left, right in pairs:
        assert dprng.derive_key(key, *left) != dprng.derive_key(key, *right), (left, right)


def test_derive_key_refuses_bad_keys_and_labels():
    with pytest.raises(ValueError, match="16 bytes"):
        dprng.derive_key(bytes(8), "projection")
    with pytest.raises(ValueError, match="16 bytes"):
        dprng.derive_key(bytes(32), "projection")
    with pytest.raises(TypeError):
        dprng.derive_key("0123456789abcdef", "projection")
    with pytest.raises(ValueError, match="label"):
        dprng.derive_key(bytes(16))
    for bad in (True, None, b"bytes", ("a", "b")):
        with pytest.raises(TypeError):
            dprng.derive_key(bytes(16), bad)


def test_derived_generators_differ_by_label_and_from_the_batch_streams():
    key = bytes(range(16))
    a = dprng.derived_generator(key, "projection").standard_normal(64)
    np.testing.assert_array_equal(a, dprng.derived_generator(key, "projection").standard_normal(64))
    others = [
        dprng.derived_generator(key, "projection", 1).standard_normal(64),
        dprng.derived_generator(key, "noise").standard_normal(64),
        dprng.derived_generator(bytes(16), "projection").standard_normal(64),
        dprng.batch_generator(key, 0, 0).standard_normal(64),
    ]
    for other in others:
        assert not np.array_equal(a, other)
    # the generator is Philox keyed by the derived key
    derived = dprng.derive_key(key, "projection")
    np.testing.assert_array_equal(a, dprng.batch_generator(derived, 0, 0).standard_normal(64))
