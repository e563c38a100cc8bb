"""bench/smoke.py: every benchmark runs in its --smoke mode, and a benchmark that rots fails it."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SMOKE = BENCH / "smoke.py"


def smoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SMOKE), *args], capture_output=True, text=True)


def has_main_block(path: Path) -> bool:
    """A top-level ``if __name__ == "__main__":``, found by parsing (smoke.py matches the text)."""
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            left, right = node.test.left, node.test.comparators[0]
            if isinstance(left, ast.Name) and left.id == "__name__" and getattr(right, "value", None) == "__main__":
                return True
    return False


def verdicts(stdout: str) -> dict[str, str]:
    """{script: PASS or FAIL} from smoke.py's lines ``  name.py   12.3 s  PASS``."""
    return {line.split()[0]: line.split()[-1] for line in stdout.splitlines() if line.startswith("  ")}


def load_smoke():
    """bench/smoke.py as a module (bench/ is not a package): the runner the tests below call per script."""
    spec = importlib.util.spec_from_file_location("bench_smoke_runner", SMOKE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = load_smoke()
SCRIPTS = [p.name for p in RUNNER.scripts(BENCH)]


def test_the_smoke_finds_every_benchmark_with_a_main_block():
    """The scripts below are smoke.py's own choice, and it misses none that parsing finds."""
    expected = {p.name for p in BENCH.glob("*.py") if p != SMOKE and has_main_block(p)}
    assert "cpu.py" not in expected and "bench_perturb.py" in expected
    assert set(SCRIPTS) == expected


# One test per benchmark (smoke.py's own run of it), so that xdist spreads them over the workers.
@pytest.mark.spark  # several benchmarks start a local Spark session in their own process
@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_every_benchmark_passes_its_smoke_run(name):
    ok, seconds, why = RUNNER.run(BENCH / name, 300.0)
    assert ok, f"{name} failed its smoke run after {seconds:.0f} s: {why}"


def write(directory: Path, name: str, head: str, body: str) -> None:
    """A benchmark ``name`` in ``directory``: ``head`` at the top, ``body`` in its __main__ block after a
    --smoke flag is parsed."""
    main = "import argparse\nap = argparse.ArgumentParser()\nap.add_argument('--smoke', action='store_true')\n"
    main += "ap.parse_args()\n" + textwrap.dedent(body)
    text = textwrap.dedent(head) + '\nif __name__ == "__main__":\n' + textwrap.indent(main, "    ")
    (directory / name).write_text(text, encoding="utf-8")


def test_a_benchmark_that_calls_a_removed_api_fails_the_smoke_by_name(tmp_path):
    write(tmp_path, "bench_gone.py", "from dpspark.mechanisms import WordMechanismGone\n", "print(WordMechanismGone)\n")
    write(
        tmp_path,
        "bench_fine.py",
        """
        import numpy as np
        from dpspark.mechanisms import Space, parse
        """,
        """
        space = Space(np.random.default_rng(0).standard_normal((50, 4)), np.arange(50))
        mechanism = parse({"name": "laplace", "epsilon": 10.0}).build(space)
        print(mechanism.sample(np.arange(10), np.random.default_rng(1)))
        """,
    )
    # A helper without a __main__ block (as bench/cpu.py) is imported by the others, never run.
    (tmp_path / "helper.py").write_text("raise SystemExit('a helper module was run')\n", encoding="utf-8")
    result = smoke(str(tmp_path))
    assert result.returncode == 1
    assert verdicts(result.stdout) == {"bench_fine.py": "PASS", "bench_gone.py": "FAIL"}, result.stdout + result.stderr
    assert "== bench_gone.py failed: exit 1" in result.stderr
    assert "cannot import name 'WordMechanismGone'" in result.stderr
    assert "1 of 2 passed" in result.stdout


def test_a_benchmark_without_a_smoke_mode_fails_without_running(tmp_path):
    ran = tmp_path / "ran"
    script = f'from pathlib import Path\n\nif __name__ == "__main__":\n    Path({str(ran)!r}).write_text("ran")\n'
    (tmp_path / "bench_full_only.py").write_text(script, encoding="utf-8")
    result = smoke(str(tmp_path))
    assert result.returncode == 1
    assert verdicts(result.stdout) == {"bench_full_only.py": "FAIL"}
    assert "bench_full_only.py has no --smoke flag" in result.stderr
    assert not ran.exists()


def test_a_benchmark_over_its_time_limit_fails_and_is_stopped(tmp_path):
    write(tmp_path, "bench_slow.py", "import time\n", "time.sleep(120)\n")
    t0 = time.perf_counter()
    result = smoke(str(tmp_path), "--timeout", "2")
    assert time.perf_counter() - t0 < 60
    assert result.returncode == 1
    assert verdicts(result.stdout) == {"bench_slow.py": "FAIL"}
    assert "over the 2 s limit" in result.stderr


def test_an_empty_directory_is_an_error_not_a_pass(tmp_path):
    result = smoke(str(tmp_path))
    assert result.returncode == 1
    assert "no script with a __main__ block" in result.stderr
