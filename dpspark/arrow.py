"""Arrow arrays to and from numpy and Python values without importing pandas.

``pa.array``, ``pa.scalar`` and ``Array.to_numpy`` import pandas the first time one of them is
called in a process (pyarrow's pandas shim), ≈ 0.2 s; so do ``DataType.to_pandas_dtype`` in
pyarrow 14 and 19 (not 26) and ``Array.take``, ``is_valid`` and ``drop_null`` in pyarrow 8
(the ``pyarrow.compute`` functions do not). Executors run in fresh Python workers
where nothing else needs pandas, so that import was a fixed cost of every worker of every job
(a fifth of a small job's executor time). These go through Arrow buffers instead; their
results equal pyarrow's own (tests/unit/test_arrow.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def numbers(values: np.ndarray | Sequence, dtype: type | np.dtype) -> pa.Array:
    """A null-free numeric (or boolean) array of numpy ``dtype``: ``pa.array(values, type)``."""
    v = np.ascontiguousarray(values, dtype=dtype).ravel()
    if v.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), len(v), [None, _bits(v)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(v.dtype), len(v), [None, pa.py_buffer(v)])


def strings(values: Sequence[str | None], type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type)`` for Python strings and None (``type``: string by default, or
    large_string; other string types go through ``pa.array``)."""
    type = type or pa.string()
    if type not in (pa.string(), pa.large_string()):
        return pa.array(values, type=type)
    encoded = [b"" if s is None else s.encode("utf-8") for s in values]
    ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)))
    if type == pa.string() and len(ends) and ends[-1] >= 2**31:
        raise OverflowError("more than 2 GiB of text in one string array: use large_string")
    offsets = np.zeros(len(encoded) + 1, np.int32 if type == pa.string() else np.int64)
    offsets[1:] = ends
    valid = np.fromiter((s is not None for s in values), bool, len(encoded))
    nulls = len(valid) - int(valid.sum())
    return pa.Array.from_buffers(
        type,
        len(encoded),
        [_bits(valid) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
        null_count=nulls,
    )


def to_numpy(a: pa.Array) -> np.ndarray:
    """``a.to_numpy()`` of a numeric or boolean array (a view of its buffer; booleans unpacked).
    Arrays with nulls go through ``np.asarray`` (nulls as NaN), pandas and all."""
    if a.null_count:
        return np.asarray(a)
    if pa.types.is_boolean(a.type):
        if len(a) == 0:
            return np.zeros(0, bool)
        bits = np.frombuffer(a.buffers()[1], np.uint8)
        return np.unpackbits(bits, count=a.offset + len(a), bitorder="little")[a.offset :].astype(bool)
    dtype = numpy_dtype(a.type)
    if len(a) == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(a.buffers()[1], dtype, count=len(a), offset=a.offset * dtype.itemsize)


def numpy_dtype(t: pa.DataType) -> np.dtype:
    """The numpy dtype of a fixed-width integer or floating Arrow type."""
    if pa.types.is_signed_integer(t) or pa.types.is_unsigned_integer(t) or pa.types.is_floating(t):
        kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
        return np.dtype(f"{kind}{t.bit_width // 8}")
    raise TypeError(f"no fixed-width numpy dtype for Arrow type {t}")


def _bits(mask: np.ndarray) -> pa.Buffer:
    """Arrow's bitmap (least significant bit first) of a boolean mask."""
    return pa.py_buffer(np.packbits(mask, bitorder="little"))
