"""The package's shape: no import cycles, lazy imports only for heavy libraries (with a reason),
every package lists its public names, and every notebook source parses and matches its notebook."""

import ast
import importlib
import pkgutil
from pathlib import Path

import grimp
import jupytext
import nbformat
import pytest

import pigviz

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pigviz"
# Imported inside functions on purpose: each costs seconds or hundreds of MB, and most lessons
# never need it. pigviz.lsh.index, magicpig and fused import torch at their top.
HEAVY = {
    "torch",
    "transformers",
    "safetensors",
    "tqdm",
    "plotly",
    "nbformat",
    "nbconvert",
    "jupyter_server_mathjax",
    "pydoc_data",
    "numba",
    "gguf",
    "pandas",
    "pigviz.lsh.index",
    "pigviz.lsh.magicpig",
    "pigviz.lsh.fused",
    "pigviz.lsh.affordable",
    # Loads the shipped capture's index and torch on import: the numpy-only exercise checks that
    # build a real row for a case import it when the case is made, not when the notebook starts.
    "pigviz.study.estimators",
}


def _function_imports():
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom | ast.Import):
                        module = sub.module if isinstance(sub, ast.ImportFrom) else sub.names[0].name
                        yield (
                            path.relative_to(ROOT),
                            sub.lineno,
                            module,
                            "\n".join(lines[sub.lineno - 1 : sub.end_lineno]),
                        )


def test_no_import_cycle_between_pigviz_modules():
    graph = grimp.build_graph("pigviz", include_external_packages=False)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append(" -> ".join(graph.find_shortest_chain(importer=imported, imported=module) + (imported,)))
    assert not cycles, cycles


def test_imports_inside_functions_are_heavy_libraries_with_a_reason():
    wrong = [
        f"{path}:{line}: {module}"
        for path, line, module, text in _function_imports()
        if not (module.split(".")[0] in HEAVY or module in HEAVY) or "# heavy:" not in text
    ]
    assert not wrong, "import at the top of the module, or mark a heavy import '# heavy: why': " + "; ".join(wrong)


def test_every_package_lists_its_public_names():
    for info in pkgutil.walk_packages(pigviz.__path__, "pigviz."):
        if not info.ispkg:
            continue
        package = importlib.import_module(info.name)
        names = getattr(package, "__all__", None)
        assert names, f"{info.name} has no __all__"
        for name in names:
            assert hasattr(package, name) or importlib.util.find_spec(f"{info.name}.{name}"), (
                f"{info.name}.__all__ names {name!r}, which it does not have"
            )


# The lessons, then the findings (notebooks/src/findings/ -> notebooks/findings/, pigviz/notebooks/findings/).
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))
SOURCES += sorted((ROOT / "notebooks" / "src" / "findings").glob("f[0-9]*_*.py"))


def _folder(source: Path) -> str:
    return "findings" if source.parent.name == "findings" else ""


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_source_parses_and_matches_its_notebook(source):
    ast.parse(source.read_text(), filename=str(source))
    notebook = ROOT / "notebooks" / _folder(source) / f"{source.stem}.ipynb"
    assert notebook.exists(), f"{notebook.name} is missing: run `make notebooks`"
    want = [(c.cell_type, c.source) for c in jupytext.read(source, fmt="py:percent").cells]
    have = [(c.cell_type, c.source) for c in nbformat.read(notebook, as_version=4).cells]
    for i, (w, h) in enumerate(zip(want, have)):
        assert w == h, f"{notebook.name} cell {i} differs from {source.name}: run `make notebooks`\n{w}\n!=\n{h}"
    assert len(want) == len(have), f"{source.name} has {len(want)} cells, {notebook.name} {len(have)}"


def _builder():
    """tools/build_notebooks.py as a module: the test compares with what it would write."""
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "tools" / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_learner_copy_is_made_from_its_source_with_no_outputs(source):
    learner = PACKAGE / "notebooks" / _folder(source) / f"{source.stem}.ipynb"
    assert learner.exists(), f"{learner} is missing: run `python tools/build_notebooks.py --learner`"
    have = nbformat.read(learner, as_version=4)
    want = _builder().learner_copy(source)
    assert nbformat.writes(have) == nbformat.writes(want), (
        f"{learner.name} differs from what {source.name} gives: run `python tools/build_notebooks.py --learner`"
    )
    for cell in have.cells:
        assert cell.cell_type != "code" or (not cell.outputs and cell.execution_count is None), (
            f"{learner.name} cell {cell.id} has outputs: a learner copy gives nothing away"
        )


def test_every_learner_copy_has_a_source():
    stems = {p.stem for p in (PACKAGE / "notebooks").glob("*.ipynb")}
    stems |= {p.stem for p in (PACKAGE / "notebooks" / "findings").glob("*.ipynb")}
    assert stems == {s.stem for s in SOURCES}, stems ^ {s.stem for s in SOURCES}
