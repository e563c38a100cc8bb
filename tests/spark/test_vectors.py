"""release-vectors on a real local[2] session: output, nulls, Φ, manifest, bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main
from dpspark.rng import SeededRunWarning

pytestmark = pytest.mark.spark


@pytest.fixture()
def vectors_parquet(tmp_path):
    rng = np.random.default_rng(0)
    vecs = [None if i % 9 == 0 else rng.standard_normal(300).astype(np.float32).tolist() for i in range(120)]
    path = tmp_path / "v.parquet"
    pq.write_table(
        pa.table({"id": np.arange(120), "vec": pa.array(vecs, pa.list_(pa.float32())), "label": ["a"] * 120}), path
    )
    return path, vecs


def release(src, out, *extra):
    return main(["release-vectors", "--input", str(src), "--output", str(out), "--column", "vec", *extra])


@pytest.mark.runtime
def test_privemb_release(spark, tmp_path, vectors_parquet):
    src, vecs = vectors_parquet
    out = tmp_path / "o"
    assert release(src, out, "--epsilon", "5", "--delta", "1e-6", "--beta", "0.8") == 0
    rows = {r["id"]: r for r in pq.read_table(out).to_pylist()}
    assert len(rows) == 120
    for i, v in enumerate(vecs):
        if v is None:
            assert rows[i]["vec"] is None
        else:
            assert len(rows[i]["vec"]) == 59 and rows[i]["label"] == "a"
    phi = np.load(out / "_dpspark_projection.npy")
    assert phi.shape == (59, 300)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["output_dimension"] == 59 and m["input_dimension"] == 300 and "m = ceil" in m["m_formula"]
    assert m["delta"] == 1e-6 and m["beta"] == 0.8 and "Lipschitz" in m["guarantee"]
    vec_type = pq.read_table(out).schema.field("vec").type  # list child names differ across pyarrow versions
    assert pa.types.is_list(vec_type) and vec_type.value_type == pa.float32()


def test_seeded_release_is_reproducible_and_m1_keeps_d(spark, tmp_path, vectors_parquet):
    src, _ = vectors_parquet
    with pytest.warns(SeededRunWarning):
        assert release(src, tmp_path / "a", "--epsilon", "5", "--seed", "3", "--mechanism", "m1") == 0
    with pytest.warns(SeededRunWarning):
        assert release(src, tmp_path / "b", "--epsilon", "5", "--seed", "3", "--mechanism", "m1") == 0
    a, b = pq.read_table(tmp_path / "a").to_pylist(), pq.read_table(tmp_path / "b").to_pylist()
    assert {r["id"]: r["vec"] for r in a} == {r["id"]: r["vec"] for r in b}
    assert {len(r["vec"]) for r in a if r["vec"] is not None} == {300}


@pytest.mark.runtime
def test_text_column_is_embedded_then_released(spark, tmp_path):
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["the cat sat", None, "qqzzx"]}), src)
    out = tmp_path / "o"
    assert (
        main(
            [
                "release-vectors",
                "--input",
                str(src),
                "--output",
                str(out),
                "--column",
                "text",
                "--epsilon",
                "10",
                "--dim",
                "20",
            ]
        )
        == 0
    )
    rows = {r["id"]: r["text"] for r in pq.read_table(out).to_pylist()}
    assert rows[2] is None and len(rows[1]) == 20 and len(rows[3]) == 20


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "5", "--delta", "1.5"], "delta"),
        (["--epsilon", "5", "--beta", "1"], "beta"),
        (["--epsilon", "5", "--beta", "0"], "beta"),
    ],
)
def test_invalid_parameters(spark, tmp_path, vectors_parquet, capsys, extra, message):
    src, _ = vectors_parquet
    out = tmp_path / "o"
    assert release(src, out, *extra) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_bad_columns(spark, tmp_path, capsys):
    src = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {
                "num": [1, 2],
                "ragged": pa.array([[1.0, 2.0], [1.0]], pa.list_(pa.float64())),
                "nan": pa.array([[1.0, float("nan")], [1.0, 2.0]], pa.list_(pa.float64())),
            }
        ),
        src,
    )
    for col, msg in (("num", "has type bigint"), ("ragged", "different lengths"), ("nan", "NaN")):
        out = tmp_path / col
        assert (
            main(["release-vectors", "--input", str(src), "--output", str(out), "--column", col, "--epsilon", "5"]) == 3
        )
        assert msg in capsys.readouterr().err and not out.exists()
