"""The Procfile's command lines (what ``make run`` starts), for whatever starts the same programs another way."""

import shlex
from pathlib import Path

PROCFILE = Path(__file__).resolve().parent.parent / "Procfile"


def procfile_arguments(process: str) -> list[str]:
    """The arguments the Procfile gives ``process``'s program, but ``--host`` and ``--port`` (each caller picks its
    own): the tests, the soak and the benchmarks run the streams' server with the options ``make run`` and production
    do (``--no-proxy-headers`` above all: an API key's IP allow-list depends on it)."""
    line = next(line for line in PROCFILE.read_text().splitlines() if line.startswith(f"{process}:"))
    words = shlex.split(line.partition(":")[2])[1:]
    arguments = []
    while words:
        word = words.pop(0)
        if word in ("--host", "--port"):
            words.pop(0)
        else:
            arguments.append(word)
    return arguments
