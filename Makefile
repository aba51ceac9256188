# The two commands the README promises. Both set everything up first and are safe to repeat.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup lab lint test test-fast notebooks verify bench present site

setup:
	@bash scripts/setup.sh

## Set up, then copy the learner notebooks (blank exercises, no outputs) into my-notebooks/ and
## open JupyterLab there (`pigviz lab`: notebooks you edited are never overwritten). As root
## (containers, Colab-like runtimes) it passes --allow-root; with no display to open a browser on,
## it prints the URL to open instead.
LAB_DIR ?= my-notebooks
lab: setup
	$(BIN)/pigviz lab $(LAB_DIR)

## Lint and the layer contract (the test command runs these first).
lint: setup
	$(BIN)/ruff check pigviz tests benchmarks tools notebooks/src
	$(BIN)/ruff format --check pigviz tests benchmarks tools
	$(BIN)/lint-imports

## Set up, then run every test: lint and the layer contract, the library's pytest suite (browser
## tests, the wheel install and the shipped capture rebuilt with torch's portable kernels included),
## nbval over every notebook, nbval once more on an emulated other CPU, and pigviz verify.
## Notebooks run with the reference solutions standing in for blank exercises (PIGVIZ_SOLUTIONS=1).
## The emulated CPU: OpenBLAS's oldest x86-64 kernels, torch's portable (non-vector) kernels and one
## thread sum in other orders than this machine's, so a printed rounding residue would show here.
## nbval's items are a notebook's cells, which run in order: random order is for the library's tests only.
NBVAL := -m pytest -q --nbval notebooks --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider -p no:randomly
EMULATED_CPU := OPENBLAS_CORETYPE=Prescott ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1
test: setup lint
	$(BIN)/pigviz exercises --self-test
	PIGVIZ_SOLUTIONS=1 $(BIN)/python -m pytest -q tests
	PIGVIZ_SOLUTIONS=1 $(BIN)/python $(NBVAL)
	@echo "== nbval again on an emulated other CPU ($(EMULATED_CPU))"
	$(EMULATED_CPU) PIGVIZ_SOLUTIONS=1 $(BIN)/python $(NBVAL)
	$(BIN)/pigviz verify

## Library tests without the slow ones.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

## Rebuild and execute the notebooks from notebooks/src.
notebooks: setup
	PIGVIZ_SOLUTIONS=1 $(BIN)/python tools/build_notebooks.py

verify: setup
	$(BIN)/pigviz verify

## Every benchmark once; what they measure goes to $(BENCH_OUT)/ (never over the shipped data in
## pigviz/data/: the commands in pigviz/data/manifest.json re-measure those).
BENCH_OUT ?= benchmarks/out
bench: setup
	@mkdir -p $(BENCH_OUT)
	@for b in benchmarks/bench_*.py; do \
	    name=$$(basename $$b .py); echo "== $$b"; \
	    case $$name in \
	        bench_decode) $(BIN)/python $$b --out $(BENCH_OUT)/$$name.json ;; \
	        bench_attend) $(BIN)/python $$b --stages --json $(BENCH_OUT)/$$name.json ;; \
	        bench_authors|bench_binder|bench_evaluate) $(BIN)/python $$b --json $(BENCH_OUT)/$$name.json ;; \
	        *) $(BIN)/python $$b ;; \
	    esac || exit 1; \
	done

## Presenter mode for a workshop: one notebook's prose, figures and widgets, no code. The exercises
## run with their reference solutions, so Voila does not stop at a blank one.
##   make present NB=01         (lessons 04, 05 and 06 are two notebooks each: NB=04a, NB=04b, ...)
NB ?= 01
present: setup
	PIGVIZ_SOLUTIONS=1 $(BIN)/voila $$(ls notebooks/$(NB)_*.ipynb | head -n 1) --strip_sources=True

## The documentation site in site/ (open site/index.html): the executed notebooks as pages (never
## re-run), the workshop guide and the API reference, built by Sphinx (myst-nb, sphinx-book-theme)
## with warnings as errors. Offline: MathJax and plotly.js are copied into it. Sources staged and
## cached in build/site/, so a second build re-reads only what changed.
site: setup
	$(BIN)/pigviz site --out site
