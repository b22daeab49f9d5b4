# The two commands of the README: `make demo` (set up, then run tidemark end to end) and `make test`.
.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/tidemark demo

test: setup
	.venv/bin/python -m pytest -p no:cacheprovider

bench: setup
	.venv/bin/python -m bench
