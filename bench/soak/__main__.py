"""``python -m bench.soak`` (or ``python bench/soak``): run the soak, or one of its client processes."""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/soak``: import the package from the repository instead
    HERE = Path(__file__).resolve().parent
    sys.path = [str(HERE.parents[1]), *(entry for entry in sys.path if Path(entry or ".").resolve() != HERE)]

from bench.soak.orchestration import main  # noqa: E402 (after the path is set)

sys.exit(main())
