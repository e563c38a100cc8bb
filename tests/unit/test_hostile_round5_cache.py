"""Hostile use, round 5 (issue 39), defects 2 and 5: a cached artefact that another user of the volume
forged. The digest beside each cached array is an HMAC under a per-user key kept beside the user's
configuration (``dpspark.cachekey``), never on the volume; and an array read back must show its
mechanism's invariants (CusText's groups of K covering W once, 1-Diffractor's chain, Truncated Gumbel's
Δ and Δ0). A forgery is computed again, said in one line, never used and never an uncaught error."""

from __future__ import annotations

import hashlib
import hmac
import logging
import stat

import numpy as np
import pytest

import dpspark.mechanisms.custext as custext
import dpspark.mechanisms.diffractor as diffractor
import dpspark.mechanisms.truncated_gumbel as truncated_gumbel
from dpspark.mechanisms import Space, parse

V = 2000


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    """This test's own cache key (never the user's): where $DPSPARK_CACHE_KEY_FILE says."""
    path = tmp_path / "config" / "dpspark" / "cache.key"
    monkeypatch.setenv("DPSPARK_CACHE_KEY_FILE", str(path))
    return path


@pytest.fixture
def volume(tmp_path):
    """The cache: a shared volume (--embeddings-dir) that another user can write."""
    return tmp_path / "volume"


def _space(glove, volume, size=V):
    return Space(glove.vectors, np.arange(size), cache_dir=volume, words=glove.word_rows)


def _cached(volume):
    return sorted(volume.glob("dpspark-artefact-*.npy"))


def _source(path):
    """The hex digest of what the array is computed from: the name's first field after the prefix."""
    return path.name.split("-")[2].removesuffix(".npy")


def _forge(path, array, digest):
    """Another user's write: ``array`` in place of the cached file, and ``digest(source, bytes)`` beside it."""
    np.save(path, array)
    path.with_name(path.name + ".sha256").write_text(digest(_source(path), path.read_bytes()), encoding="ascii")


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "dpspark" and r.levelno >= logging.WARNING]


@pytest.fixture
def custext_cache(glove, volume, key_file):
    """CusText's groups (K = 20, V = 2000), computed once and kept in the volume: (spec, groups, its file)."""
    spec = parse({"name": "custext", "epsilon": 5, "top_k": 20})
    groups = np.array(spec.groups(_space(glove, volume)))
    (path,) = _cached(volume)
    return spec, groups, path


UNKEYED = {
    # dpspark before the key: sha256 of the source's hex and the file's bytes (the forgery)
    "old-scheme": lambda source, data: hashlib.sha256(source.encode() + data).hexdigest(),
    # the new scheme's prefix on a digest anyone can compute
    "new-scheme-sha256": lambda source, data: "hmac-sha256:" + hashlib.sha256(source.encode() + data).hexdigest(),
    # an HMAC under a key the forger guessed
    "new-scheme-guessed-key": lambda source, data: (
        "hmac-sha256:" + hmac.new(b"", source.encode() + data, hashlib.sha256).hexdigest()
    ),
}


@pytest.mark.parametrize("digest", list(UNKEYED.values()), ids=list(UNKEYED))
def test_a_forged_identity_table_with_an_unkeyed_digest_is_computed_again(glove, volume, custext_cache, caplog, digest):
    """Defect 2: the group table replaced by one group per word with a digest recomputed without the key was
    used as read: every word was released as itself under "groups of K = 20". Now it is not trusted: the
    groups are computed again (one line says so), the volume repaired, and the release is not the identity."""
    spec, groups, path = custext_cache
    _forge(path, np.arange(V).reshape(-1, 1), digest)
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        space = _space(glove, volume)
        again = spec.groups(space)
        sampler = spec.build(space)
    np.testing.assert_array_equal(again, groups)
    said = _warnings(caplog)
    assert len(said) == 1 and "\n" not in said[0] and "computed again" in said[0], said
    out = sampler.sample(np.arange(V), np.random.default_rng(0))
    # In groups of 20 at ε = 5 a word is its own output with probability at most e^2.5/(e^2.5 + 19) ≈ 0.39.
    assert np.mean(out == np.arange(V)) < 0.5
    assert (sampler.members >= 0).sum(axis=1).max() == 20
    np.testing.assert_array_equal(np.load(path), groups)  # repaired on disk


def _keyed(key_file):
    """A digest under the user's own key, computed here (HMAC-SHA256 of the source's hex and the bytes):
    what a forger who had the key, or a bug, could write."""
    return lambda source, data: (
        "hmac-sha256:" + hmac.new(key_file.read_bytes(), source.encode() + data, hashlib.sha256).hexdigest()
    )


def _shuffled_groups(groups):
    """Every word once, in groups of the right sizes, but not CusText's groups."""
    words = np.random.default_rng(1).permutation(groups[groups >= 0])
    out = groups.copy()
    out[groups >= 0] = words
    return out


FORGED_TABLES = {
    "identity": lambda g: np.arange(V).reshape(-1, 1),
    "identity-padded": lambda g: np.where(np.arange(20) == 0, np.arange(V)[:, None], -1),
    "a-word-twice": lambda g: np.where(g == 7, 8, g),
    "a-word-missing": lambda g: np.where(g == 7, -1, g),
    "beyond-the-vocabulary": lambda g: np.where(g == 7, V + 7, g),
    "shuffled-groups": _shuffled_groups,
    "floats": lambda g: g.astype(np.float64),
    "one-dimensional": lambda g: g.ravel(),
}


@pytest.mark.parametrize("forge", list(FORGED_TABLES.values()), ids=list(FORGED_TABLES))
def test_a_forged_table_with_a_keyed_digest_fails_its_check_and_is_computed_again(
    glove, volume, key_file, custext_cache, caplog, forge
):
    """Defect 5 and the invariants: even under a valid keyed digest, a table that is not CusText's mapping
    (not covering W once, groups not of K words, groups that are not the most similar words) is computed
    again with one line, never an uncaught ValueError and never used."""
    spec, groups, path = custext_cache
    _forge(path, forge(groups), _keyed(key_file))
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        space = _space(glove, volume)
        sampler = spec.build(space)
    np.testing.assert_array_equal(sampler.members, groups)
    said = _warnings(caplog)
    assert len(said) == 1 and "fails its check" in said[0] and "\n" not in said[0], said


def _diffractor(space):
    return parse({"name": "1-diffractor", "epsilon": 1}).orders(space)[0]


def _gumbel_constants(space):
    parse({"name": "truncated-gumbel", "epsilon": 1000}).constants(space)
    return space.artefact(truncated_gumbel.ARTEFACT, None)


ARTEFACTS = {
    # name: (compute it through the mechanism, the module function that computes it, a forgery of it)
    "custext": (
        lambda space: parse({"name": "custext", "epsilon": 5, "top_k": 20}).groups(space),
        (custext, "grouping"),
        lambda a: np.arange(V).reshape(-1, 1),
    ),
    "1-diffractor": (_diffractor, (diffractor, "chain"), lambda a: np.arange(V)),
    "truncated-gumbel": (
        _gumbel_constants,
        (truncated_gumbel, "diameters"),
        lambda a: np.concatenate([[a[0] / 2, a[1]], a[2:]]),  # a smaller Δ: less noise
    ),
}


def _never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("computed again")


@pytest.mark.parametrize("what", list(ARTEFACTS))
def test_a_sound_cache_is_read_back_without_a_word_or_a_recomputation(
    glove, volume, key_file, caplog, what, monkeypatch
):
    """The checks pass a sound array: a second run reads every artefact back, silently, without computing it."""
    use, (module, function), _ = ARTEFACTS[what]
    first = np.array(use(_space(glove, volume)))
    monkeypatch.setattr(module, function, _never)
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        np.testing.assert_array_equal(use(_space(glove, volume)), first)
    assert _warnings(caplog) == []


@pytest.mark.parametrize("what", list(ARTEFACTS))
def test_every_cached_artefact_refuses_a_forgery_under_the_users_own_key(glove, volume, key_file, caplog, what):
    """1-Diffractor's list (a permutation that is not the chain) and Truncated Gumbel's Δ (halved: less
    noise) are checked as CusText's groups are: computed again, in one line."""
    use, _, forge = ARTEFACTS[what]
    first = np.array(use(_space(glove, volume)))
    (path,) = _cached(volume)
    _forge(path, forge(first), _keyed(key_file))
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        np.testing.assert_array_equal(use(_space(glove, volume)), first)
    said = _warnings(caplog)
    assert len(said) == 1 and "fails its check" in said[0], said


def test_the_key_is_created_private_outside_the_cache_and_never_written_or_said(glove, volume, key_file, caplog):
    """The key: created on first use, 32 bytes from the OS, mode 0600 in a 0700 directory, beside the
    configuration; no byte of it in the volume or in what dpspark logs."""
    assert not key_file.exists()
    with caplog.at_level(logging.DEBUG, logger="dpspark"):
        parse({"name": "custext", "epsilon": 5, "top_k": 20}).groups(_space(glove, volume))
    key = key_file.read_bytes()
    assert len(key) == 32
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    written = b"".join(p.read_bytes() for p in volume.rglob("*") if p.is_file())
    assert key not in written and key.hex().encode() not in written
    assert key.hex() not in caplog.text
    assert {p.name for p in volume.iterdir()} <= {p.name for p in _cached(volume)} | {
        p.name + ".sha256" for p in _cached(volume)
    }


def test_the_key_lives_beside_the_configuration(tmp_path, monkeypatch):
    """$DPSPARK_CACHE_KEY_FILE, else $XDG_CONFIG_HOME/dpspark/cache.key, else ~/.config/dpspark/cache.key."""
    from dpspark.cachekey import key_path

    monkeypatch.delenv("DPSPARK_CACHE_KEY_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert key_path() == tmp_path / "home" / ".config" / "dpspark" / "cache.key"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert key_path() == tmp_path / "xdg" / "dpspark" / "cache.key"
    monkeypatch.setenv("DPSPARK_CACHE_KEY_FILE", str(tmp_path / "k"))
    assert key_path() == tmp_path / "k"


def test_another_users_key_keeps_its_own_copy(glove, volume, key_file, custext_cache, caplog, monkeypatch, tmp_path):
    """Two users of one volume, two keys: each keeps and reads its own file, neither overwrites the other's
    nor warns about it."""
    spec, groups, path = custext_cache
    before = path.read_bytes(), path.with_name(path.name + ".sha256").read_bytes()
    monkeypatch.setenv("DPSPARK_CACHE_KEY_FILE", str(tmp_path / "other" / "cache.key"))
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        np.testing.assert_array_equal(spec.groups(_space(glove, volume)), groups)
    assert _warnings(caplog) == []
    assert len(_cached(volume)) == 2
    assert (path.read_bytes(), path.with_name(path.name + ".sha256").read_bytes()) == before


def test_an_older_dpsparks_unkeyed_file_is_not_trusted(glove, volume, key_file, custext_cache, caplog):
    """A cache kept before the key (the name without the key's id, an unkeyed sha256 beside it) is never
    read: the groups are computed again, said in one line, and kept under the key."""
    spec, groups, path = custext_cache
    legacy = path.with_name(f"dpspark-artefact-{_source(path)}.npy")
    _forge(legacy, np.arange(V).reshape(-1, 1), UNKEYED["old-scheme"])
    path.unlink()
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        np.testing.assert_array_equal(spec.groups(_space(glove, volume)), groups)
    said = _warnings(caplog)
    assert len(said) == 1 and "older dpspark's unkeyed digest" in said[0], said
    np.testing.assert_array_equal(np.load(path), groups)


def test_a_key_inside_the_cache_keeps_nothing(glove, volume, caplog, monkeypatch):
    """A key on the volume it protects protects nothing: said in one line, and nothing is kept there."""
    monkeypatch.setenv("DPSPARK_CACHE_KEY_FILE", str(volume / "cache.key"))
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        groups = parse({"name": "custext", "epsilon": 5, "top_k": 20}).groups(_space(glove, volume))
    assert groups.shape == (V // 20, 20)
    said = _warnings(caplog)
    assert len(said) == 1 and "lies inside the cache" in said[0], said
    assert not volume.exists() or not any(volume.iterdir())


def test_a_short_key_keeps_nothing_and_a_shared_key_is_said(glove, volume, key_file, caplog):
    """A key file of fewer than 32 bytes is not a key: nothing is kept (one line). A key other users can
    read is used, with one line asking to make it private."""
    key_file.parent.mkdir(parents=True)
    key_file.write_bytes(b"short")
    spec = parse({"name": "custext", "epsilon": 5, "top_k": 20})
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        spec.groups(_space(glove, volume))
    said = _warnings(caplog)
    assert len(said) == 1 and "shorter than 32 bytes" in said[0], said
    assert not volume.exists()
    caplog.clear()
    key_file.write_bytes(bytes(range(32)))
    key_file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        spec.groups(_space(glove, volume))
    said = _warnings(caplog)
    assert len(said) == 1 and "chmod 600" in said[0], said
    assert len(_cached(volume)) == 1
