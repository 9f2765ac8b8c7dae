"""Run a script under cProfile counting CPU time (``time.process_time``), not wall time.

``python bench/_profiled.py OUT SCRIPT [ARGS...]`` runs ``SCRIPT`` as ``__main__`` and writes the
stats to ``OUT`` when it ends (however it ends). ``python -m cProfile`` counts wall time, which
puts a process's waits on the database in its profile. Not a benchmark itself.
"""

import cProfile
import os
import runpy
import sys
import time


def main() -> None:
    out, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    profiler = cProfile.Profile(time.process_time)
    try:
        profiler.runcall(runpy.run_path, script, run_name="__main__")
    finally:
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
