"""The secret that keys the artefact cache's digests.

The cache (``Space.artefact(..., store=True)``) may live on a volume that other users can write
(``--embeddings-dir``). A digest anyone can recompute proves nothing there: whoever can write a
file can write its digest too. So each cached array carries an HMAC-SHA256 under a key the volume
does not hold: a per-user file beside the user's configuration, created from the operating
system's randomness on first use, readable by its owner only. Only the driver reads it: executors
never open the cache (the driver ships them its arrays in the bundle).

Where: ``$DPSPARK_CACHE_KEY_FILE`` when set (a cluster whose home directory does not survive a
restart, or a team that shares one cache on purpose), else ``$XDG_CONFIG_HOME/dpspark/cache.key``,
else ``~/.config/dpspark/cache.key``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import uuid
from pathlib import Path

log = logging.getLogger("dpspark")

KEY_ENV = "DPSPARK_CACHE_KEY_FILE"
KEY_BYTES = 32
# What a digest file starts with: a digest without it (64 bare hex digits) is the unkeyed sha256 of
# dpspark before the key, which anyone could have written.
SCHEME = "hmac-sha256:"


def key_path() -> Path:
    """Where this user's cache key is kept (see the module's docstring)."""
    given = os.environ.get(KEY_ENV)
    if given:
        return Path(given).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "dpspark" / "cache.key"


def _create(path: Path) -> None:
    """Write a new key at ``path`` (mode 0600), unless another process wrote one first: the key goes to a
    private temporary file that is then linked to the name, which never replaces an existing key."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another run created it meanwhile: use theirs
    finally:
        tmp.unlink(missing_ok=True)


def cache_key(cache_dir: Path) -> bytes | None:
    """This user's key (created on first use), or None, said in one line, where it cannot be used: it
    cannot be read or created, it is too short, or it lies inside ``cache_dir`` (a key kept on the
    volume it protects protects nothing). Without a key the run computes its arrays and keeps none."""
    path = key_path()
    if _inside(path, cache_dir):
        log.warning(
            "the cache key %s lies inside the cache %s it protects: arrays are not kept between runs; "
            "set $%s to a file outside it",
            path,
            cache_dir,
            KEY_ENV,
        )
        return None
    try:
        if not path.exists():
            _create(path)
        key = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        log.warning("cannot read or create the cache key %s (%s): arrays are not kept between runs", path, exc)
        return None
    if len(key) < KEY_BYTES:
        log.warning(
            "the cache key %s is shorter than %d bytes: arrays are not kept between runs; remove it, and "
            "dpspark creates a new one",
            path,
            KEY_BYTES,
        )
        return None
    if os.name == "posix" and mode & 0o077:
        log.warning("the cache key %s can be read by other users: run chmod 600 on it", path)
    return key


def key_id(key: bytes) -> str:
    """A short public name of the key (16 hex digits; it reveals nothing of the key): cached files carry it,
    so users with different keys on one volume keep their own copies instead of overwriting each other's."""
    return hmac.new(key, b"dpspark cache key id", hashlib.sha256).hexdigest()[:16]


def keyed_digest(key: bytes, source: str, path: Path) -> str:
    """The digest a cached artefact carries (``SCHEME`` and the HMAC-SHA256, under ``key``, of what it was
    computed from and of the file's bytes)."""
    digest = hmac.new(key, source.encode(), hashlib.sha256)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return SCHEME + digest.hexdigest()


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True
