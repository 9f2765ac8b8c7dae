"""What the local and test settings modules give a variable the environment does not set."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def development_default(module: str, variable: str) -> str:
    """The value ``exchange/settings/<module>.py`` puts in the environment for ``variable`` when it is unset."""
    code = (
        f"import os; os.environ.pop({variable!r}, None); import exchange.settings.{module}; "
        f"print(os.environ[{variable!r}])"
    )
    env = {name: value for name, value in os.environ.items() if name != variable}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()
