# Two commands on a fresh machine: `make run` and `make test`.
# With DATABASE_URL / REDIS_URL unset, the embedded PostgreSQL and Redis are started
# (and reused) under $(LOCAL_DATA_DIR) by devtools/localservices.py.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WITH_SERVICES := $(PY) -m devtools.localservices exec --

.PHONY: run test lint e2e bench soak stop reset migrate

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

run: $(VENV)/.installed
	$(PY) -m devtools.run

test: $(VENV)/.installed
	$(WITH_SERVICES) $(PY) -m pytest $(PYTEST_ARGS); status=$$?; $(PY) -m devtools.localservices status; exit $$status

# ruff (lint, format), mypy with the Django and DRF stubs, and the import layers of DESIGN.md section 1
# (pyproject.toml configures all four; none needs the embedded services).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

e2e: $(VENV)/.installed
	$(PY) -m devtools.e2e

# Every benchmark script; the soak is the package bench/soak/ (make soak), not a script, so the glob leaves it out.
bench: $(VENV)/.installed
	$(WITH_SERVICES) $(PY) manage.py migrate --no-input
	for script in bench/[a-z]*.py; do $(WITH_SERVICES) $(PY) $$script || exit 1; done

# Load with faults (SIGKILLed workers, terminated database connections, web restarts) for
# SOAK_DURATION seconds, then every acknowledged operation is checked; exit 1 if anything was lost.
SOAK_DURATION ?= 300
soak: $(VENV)/.installed
	$(WITH_SERVICES) $(PY) -m bench.soak --duration $(SOAK_DURATION) $(SOAK_ARGS)

migrate: $(VENV)/.installed
	$(WITH_SERVICES) $(PY) manage.py migrate --no-input

stop: $(VENV)/.installed
	$(PY) -m devtools.localservices stop

reset: stop
	rm -rf $${LOCAL_DATA_DIR:-.local}
