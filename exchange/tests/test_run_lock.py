"""``make run`` holds its data folder for its whole life, clean-up included (devtools.run.one_run_at_a_time)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

HOLD = """
import sys
from pathlib import Path
from devtools.run import one_run_at_a_time
with one_run_at_a_time(Path(sys.argv[1])):
    print("entered", flush=True)
    sys.stdin.read()  # until the test closes it: a run still going, or still stopping
"""


def _run(folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_second_run_waits_saying_so_until_the_first_has_stopped(tmp_path):
    """A run started while a crashed one was still stopping had its services stopped under it."""
    first = _run(tmp_path)
    assert first.stdout.readline() == "entered\n"
    second = _run(tmp_path)
    try:
        assert second.stdout.readline().startswith(
            f"Another `make run` is using {tmp_path} (running, or still stopping)"
        )
        assert second.poll() is None  # waiting: it has not entered

        first.communicate("", timeout=30)  # the first one ends

        assert second.stdout.readline() == "entered\n"
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)
