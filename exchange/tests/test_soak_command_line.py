"""The soak's two ways in (``python -m bench.soak`` from the repository, ``python bench/soak`` from anywhere) and the
``make bench`` loop, which runs every script of ``bench/`` but must leave the soak (a package, run by ``make soak``)."""

import glob
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "cwd"),
    [
        (["-m", "bench.soak"], ROOT),
        ([str(ROOT / "bench" / "soak")], ROOT / "bench"),  # bench/soak's own directory must not shadow any module
    ],
    ids=["module", "directory"],
)
def test_the_soak_starts_from_both_entry_points(command, cwd):
    done = subprocess.run(
        [sys.executable, *command, "--help"], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench.soak")
    assert "Soak with faults" in done.stdout  # the package's docstring describes it
    assert "--client" not in done.stdout  # the client processes' options stay hidden


def test_make_bench_does_not_run_the_soak():
    makefile = (ROOT / "Makefile").read_text()
    loop = next(line for line in makefile.splitlines() if line.lstrip().startswith("for script in"))
    pattern = loop.split("for script in", 1)[1].split(";", 1)[0].strip()
    scripts = glob.glob(pattern, root_dir=ROOT)
    assert scripts, pattern
    assert not [script for script in scripts if "soak" in script], scripts
