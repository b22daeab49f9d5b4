# The two commands of the README: `make demo` (set up, then run tidemark end to end) and `make test`.
.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/tidemark demo

# Two workers, one test file each at a time: most slow tests wait on servers (Airflow, the
# emulator, spark-submit), so two files share the 2-core machine well; --durations says what was slow.
test: setup
	.venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=25

bench: setup
	.venv/bin/python -m bench
