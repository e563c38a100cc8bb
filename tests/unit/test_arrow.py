"""dpspark.arrow builds the arrays pa.array builds, without importing pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from dpspark.arrow import numbers, numpy_dtype, strings, to_numpy

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

TEXTS = ["a", None, "", "café ünïcode", None, "x" * 1000]


@pytest.mark.parametrize("type_", [pa.string(), pa.large_string()])
@pytest.mark.parametrize("values", [TEXTS, [], [None, None], ["only"]])
def test_strings_equal_pa_array(values, type_):
    got = strings(values, type_)
    got.validate(full=True)
    assert got.equals(pa.array(values, type=type_)) and got.type == type_ and got.null_count == values.count(None)


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float32, np.bool_])
def test_numbers_equal_pa_array(dtype):
    values = (np.arange(-5, 12) % 3).astype(dtype)
    got = numbers(values, dtype)
    got.validate(full=True)
    assert got.equals(pa.array(values, type=pa.from_numpy_dtype(np.dtype(dtype))))
    assert numbers(values[::2], dtype).equals(pa.array(values[::2]))  # strided input: copied
    assert numbers([], dtype).equals(pa.array(np.array([], dtype)))


def test_they_do_not_import_pandas():
    code = (
        "import sys, numpy as np; from dpspark.arrow import numbers, strings, to_numpy; "
        "strings(['a', None]); to_numpy(numbers(np.arange(3), np.int64)); to_numpy(numbers([True, False], np.bool_)); "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    "array",
    [
        pa.array(np.arange(10, dtype=np.int32)).slice(3, 5),
        pa.array(np.linspace(0, 1, 7)),
        pa.array([True, False, True] * 5).slice(2, 9),
        pa.array(np.arange(0, dtype=np.int64)),
        pa.array([1.5, None, 2.0]),
    ],
)
def test_to_numpy_equals_pyarrows(array):
    np.testing.assert_array_equal(to_numpy(array), array.to_numpy(zero_copy_only=False))


@pytest.mark.parametrize(
    "type_", [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.uint64(), pa.float32(), pa.float64()]
)
def test_numpy_dtype_is_pyarrows(type_):
    assert numpy_dtype(type_) == np.dtype(type_.to_pandas_dtype())


def test_numpy_dtype_refuses_other_types():
    with pytest.raises(TypeError, match="fixed-width"):
        numpy_dtype(pa.string())
