# The two commands the README promises. Both set everything up first and are safe to repeat.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup lab test test-fast notebooks verify bench present site

setup:
	@bash scripts/setup.sh

## Set up, then open JupyterLab on the notebooks.
lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks

## Set up, then run every test: the library's pytest suite and nbval over every notebook.
test: setup
	$(BIN)/python -m pytest -q tests
	$(BIN)/python -m pytest -q --nbval notebooks --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider
	$(BIN)/pigviz verify

## Library tests without the slow ones.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

## Rebuild and execute the notebooks from notebooks/src.
notebooks: setup
	$(BIN)/python tools/build_notebooks.py

verify: setup
	$(BIN)/pigviz verify

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

## Presenter mode for a workshop: one notebook's prose, figures and widgets, no code.
##   make present NB=01
NB ?= 01
present: setup
	$(BIN)/voila $$(ls notebooks/$(NB)_*.ipynb | head -n 1) --strip_sources=True

## A static HTML site of the executed notebooks (interactive plotly figures, works offline).
site: setup
	$(BIN)/python -c "from pigviz.site import build_site; print('wrote', build_site('site'))"
