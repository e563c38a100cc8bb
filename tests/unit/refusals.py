"""What every hostile-use refusal test asserts (issues 30 and 39): the exit code, one error line naming
the problem and its fix, and nothing changed or left behind."""

from __future__ import annotations


def snapshot(root):
    """Every path under ``root``: a file's bytes, a directory as None (an empty one left behind counts)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def refused(capsys, tmp_path, argv, code, *phrases):
    """Run the CLI; assert exit ``code``, one error line naming ``phrases``, and tmp_path unchanged."""
    from dpspark.cli import main

    before = snapshot(tmp_path)
    assert main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"dpspark {argv[0]}: error: "), err
    for phrase in phrases:
        assert phrase in err[0], err[0]
    assert snapshot(tmp_path) == before  # the input byte-identical, nothing written beside it
    assert not (tmp_path / "out").exists()
    return err[0]
