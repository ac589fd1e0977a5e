# Two commands: `make demo` (set up and serve the example project) and `make test` (set up and run everything).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# Python 3.13 (or 3.12): a candidate counts only if it really runs (pyenv shims may refuse).
PYTHON ?= $(shell \
	for c in python3.13 python3.12; do \
		if command -v $$c >/dev/null 2>&1 && $$c -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then echo $$c; exit 0; fi; \
	done; \
	root=$$(pyenv root 2>/dev/null || echo "$$HOME/.pyenv"); \
	for c in $$root/versions/3.13*/bin/python3.13 $$root/versions/3.12*/bin/python3.12; do \
		if [ -x "$$c" ] && "$$c" -c 'import sys' >/dev/null 2>&1; then echo $$c; exit 0; fi; \
	done)

.PHONY: demo test lint typecheck pytest docs bench llm-local clean messages

# The runtime alone (what `make demo` needs), then the development tools on top (`make test`).
$(BIN)/.runtime: requirements.txt pyproject.toml
	@if [ -z "$(PYTHON)" ]; then \
		echo "error: django-ops-assistant needs Python 3.13 or 3.12, and neither python3.13, python3.12 nor pyenv's versions/3.1[23]* runs here." >&2; \
		echo "Install one (e.g. 'pyenv install 3.13') or run: make PYTHON=/path/to/python3.13 ..." >&2; \
		exit 1; \
	fi
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(BIN)/.installed: $(BIN)/.runtime requirements-dev.txt requirements-docs.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -r requirements-docs.txt
	touch $@

demo: $(BIN)/.runtime
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py demo_users
	$(BIN)/python manage.py demo_dashboards
	$(BIN)/python manage.py demo_sql_role
	@echo "Background jobs: a db_worker runs beside the server (stopped with it)."
	$(BIN)/python manage.py db_worker --no-reload --interval 0.5 --queue-name '*' & worker=$$!; \
		trap 'kill $$worker 2>/dev/null' EXIT INT TERM; \
		$(BIN)/python manage.py runserver $(HOST):$(PORT)

lint: $(BIN)/.installed
	$(BIN)/ruff check assistant tests demo config dashboards
	$(BIN)/ruff format --check assistant tests demo config dashboards
	PYTHONPATH=. $(BIN)/lint-imports --no-logo --no-cache

typecheck: $(BIN)/.installed
	$(BIN)/mypy assistant

# The French catalogs brought up to date with the sources (needs GNU gettext), then compiled:
# translate what is new or fuzzy in assistant/locale/fr/LC_MESSAGES/*.po and run it again.
MAKEMESSAGES := cd assistant && PYTHONPATH=.. DJANGO_SETTINGS_MODULE=tests.settings ../$(BIN)/python -m django
messages: $(BIN)/.installed
	$(MAKEMESSAGES) makemessages --locale fr --no-location --ignore 'static/assistant/vendor/*'
	$(MAKEMESSAGES) makemessages --locale fr --no-location --ignore 'static/assistant/vendor/*' --domain djangojs
	$(MAKEMESSAGES) compilemessages --locale fr

# Two suites, one pytest run each (pytest-django configures one settings module per process): the
# app's (tests.settings, no example project installed), then the example project's.
EXAMPLE_SUITE := --ds tests.example.settings tests/example

pytest: $(BIN)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(BIN)/python -m pytest $(EXAMPLE_SUITE) $(PYTEST_ARGS)

# The JavaScript the tests drive (axe-core, the MCP Inspector, @ag-ui/client), as package-lock.json
# pins it; without npm those tests skip (CI installs it and makes that an error).
node_modules/.installed-lock.json: package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --no-audit --no-fund --silent && cp package-lock.json $@; \
	else echo "npm not found: the tests that drive Node packages will skip"; fi

test: lint typecheck node_modules/.installed-lock.json pytest

# The documentation site (docs/, Sphinx): warnings are errors; offline, Django's inventory is skipped.
docs: $(BIN)/.installed
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

bench: $(BIN)/.installed
	$(BIN)/python tests/benchmarks/registry_bench.py

# The planner's evals on a real small model served on this machine (on demand; ARGS=--smoke: three
# cases): its own virtualenv, the pinned runtime and weights, the digest checked (tests/local_llm.py).
llm-local: $(BIN)/.installed
	$(BIN)/nox --reuse-venv=yes -s llm_local -- $(ARGS)

clean:
	rm -rf $(VENV) docs/_build db.sqlite3 .mypy_cache .ruff_cache .pytest_cache
