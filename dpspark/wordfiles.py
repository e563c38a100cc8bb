"""Word files: the vocabulary (``--vocab-file``), the words of privacy-stats (``--word-list``) and the
protected words (``--sensitive-words``), one word per line.

The ground floor of the package: it imports only the errors and the tokenizer's normalisation
(``dpspark.text.normalize``), so that the configuration, the mechanisms and the runners all read word files
one way without importing each other.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from dpspark.errors import ConfigError, DPSparkWarning
from dpspark.text import normalize


def read_word_list(path: str, what: str = "vocabulary file") -> list[str]:
    """The words of a file, one per line (UTF-8), normalised as the tokenizer normalises text
    (``dpspark.text.normalize``: lower case, Unicode NFC), each once: a missing, empty or non-UTF-8 file is
    a ConfigError (every word file's reader: --vocab-file, --word-list, --sensitive-words)."""
    return list(_word_lines(path, what))


def _word_lines(path: str, what: str) -> dict[str, int]:
    """Each normalised word of a word file and the number of the first line that holds it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} {path} not found (one word per line)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8, one word per line"
        ) from None
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            lines.setdefault(normalize(line.strip()), number)
    if not lines:
        raise ConfigError(f"{what} {path} is empty")
    return lines


def warn_unmatched(path: str, what: str, known: Any, where: str) -> int:
    """Warn (DPSparkWarning) when words of a word file, normalised, are not in ``known`` (a container of
    words): how many, and the first lines that hold them (line numbers, not the words: a list of sensitive
    words may itself be private). Returns how many of the file's words are in ``known``."""
    lines = _word_lines(path, what)
    missing = [n for w, n in lines.items() if w not in known]
    if missing:
        first = ", ".join(map(str, missing[:5])) + (", …" if len(missing) > 5 else "")
        warnings.warn(
            f"{len(missing)} of the {len(lines)} words of {what} {path} match no word of {where} once lower-cased "
            f"and in Unicode NFC, as the text is read (line{'s' if len(missing) > 1 else ''} {first}): check their "
            "spelling",
            DPSparkWarning,
            stacklevel=2,
        )
    return len(lines) - len(missing)
