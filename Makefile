# The two commands of the README: `make demo` (set up, then run tidemark end to end) and `make test`.
.PHONY: setup demo lint test test-fast bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/tidemark demo

# The gate before any test: ruff's lint and format, mypy on the library (configured in pyproject.toml).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

# Two workers, one test file each at a time: most slow tests wait on servers (Airflow, the
# emulator, spark-submit), so two files share the 2-core machine well; --durations says what was slow.
# --no-loadscope-reorder: files in collection order, which tests/conftest.py sorts longest first
# (xdist's own order, most tests first, left the longest single-test files for the end).
test: setup lint
	.venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The edit loop, under 3 minutes: unit and single-component tests (`-m "not slow"`). Marked slow
# (setup.cfg): a test that starts a server (emulator, Airflow, functions-framework, cluster, Spark
# Connect), a second Spark driver, or Spark jobs beyond a few seconds in the shared session (real
# streams, many dedup runs). `make test` stays the full suite that CI runs, slow tests included.
test-fast: setup lint
	.venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" --durations=10

bench: setup
	.venv/bin/python -m bench
