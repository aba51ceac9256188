# The two commands the README promises. Both set everything up first and are safe to repeat.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup lab lint test test-fast notebooks verify bench present site

setup:
	@bash scripts/setup.sh

## Set up, then open JupyterLab on the notebooks. As root (containers, Colab-like runtimes) it
## passes --allow-root; with no display to open a browser on, it prints the URL to open instead.
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_HEADLESS := $(if $(and $(filter Linux,$(shell uname -s)),$(if $(DISPLAY)$(WAYLAND_DISPLAY),,1)),--no-browser,)
lab: setup
	@if [ -n "$(LAB_ROOT)" ]; then echo "[lab] running as root: starting JupyterLab with --allow-root"; fi
	@if [ -n "$(LAB_HEADLESS)" ]; then echo "[lab] no display here: open the http://127.0.0.1:8888/lab?token=... URL printed below in your browser"; fi
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_ROOT) $(LAB_HEADLESS)

## Lint and the layer contract (the test command runs these first).
lint: setup
	$(BIN)/ruff check pigviz tests benchmarks tools notebooks/src
	$(BIN)/ruff format --check pigviz tests benchmarks tools
	$(BIN)/lint-imports

## Set up, then run every test: lint and the layer contract, the library's pytest suite (browser
## tests included), nbval over every notebook, and pigviz verify.
## Notebooks run with the reference solutions standing in for blank exercises (PIGVIZ_SOLUTIONS=1).
test: setup lint
	$(BIN)/pigviz exercises --self-test
	PIGVIZ_SOLUTIONS=1 $(BIN)/python -m pytest -q tests
	PIGVIZ_SOLUTIONS=1 $(BIN)/python -m pytest -q --nbval notebooks --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider
	$(BIN)/pigviz verify

## Library tests without the slow ones.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

## Rebuild and execute the notebooks from notebooks/src.
notebooks: setup
	PIGVIZ_SOLUTIONS=1 $(BIN)/python tools/build_notebooks.py

verify: setup
	$(BIN)/pigviz verify

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

## Presenter mode for a workshop: one notebook's prose, figures and widgets, no code. The exercises
## run with their reference solutions, so Voila does not stop at a blank one.
##   make present NB=01         (lesson 05 is two notebooks: NB=05a, NB=05b)
NB ?= 01
present: setup
	PIGVIZ_SOLUTIONS=1 $(BIN)/voila $$(ls notebooks/$(NB)_*.ipynb | head -n 1) --strip_sources=True

## A static HTML site of the executed notebooks (interactive plotly figures, works offline).
site: setup
	$(BIN)/python -c "from pigviz.site import build_site; print('wrote', build_site('site'))"
