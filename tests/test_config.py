"""MagicPIG's defaults live in one place, pigviz._util.config, and every default follows it."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import pigviz
from pigviz import DEFAULTS, MagicPIGConfig
from pigviz.decode.session import check_options, default_options

ROOT = Path(__file__).resolve().parents[1]
# What the method's parameters default to, as MagicPIG's authors set them.
AUTHORS = dict(K=10, L=150, min_hits=2, sinks=4, recent=64, seed=0, buffer=256)
# The one-screen reference and the exercises are read by learners, who see numbers, not DEFAULTS.
READ_BY_LEARNERS = ("pigviz/lsh/reference.py", "pigviz/lessons/exercises/")
# Below the entry points (use_attention, generate, magicpig(), the CLI, the study, the widgets), the
# functions that compute take K and L from their caller: none of them defaults either.
BELOW_THE_ENTRY_POINTS = (
    "pigviz.lsh.simhash",
    "pigviz.lsh.simhash_checks",
    "pigviz.lsh.index",
    "pigviz.lsh.magicpig",
    "pigviz.memory.budget",
    "pigviz.decode.report",
    "pigviz.decode.stats",
)
# A report's own choice, not the method's: the (K, L) at which bench_attend.py sweeps its threads.
OWN_SETTING = {"pigviz.decode.report.kernel_runs"}


def test_the_defaults_are_the_authors():
    assert DEFAULTS.options() == AUTHORS
    assert pigviz.DEFAULTS is DEFAULTS


@pytest.mark.parametrize(
    "change, error, words",
    [
        (dict(K=0), ValueError, "K must be"),
        (dict(K=63), ValueError, "K must be"),
        (dict(L=0), ValueError, "L must be"),
        (dict(min_hits=151), ValueError, "min_hits must be at most L"),
        (dict(recent=-1), ValueError, "recent must be"),
        (dict(K=10.0), TypeError, "K must be an int"),
        (dict(buffer=True), TypeError, "buffer must be an int"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(change, error, words):
    with pytest.raises(error, match=words):
        MagicPIGConfig(**change)


def test_a_config_is_frozen_and_its_options_drive_the_decoder():
    config = MagicPIGConfig(K=12, L=300)
    with pytest.raises(AttributeError):
        config.K = 8
    assert {k: default_options("magicpig")[k] for k in AUTHORS} == AUTHORS
    assert check_options("magicpig", config.options(), 30)["K"] == 12


def _literal_defaults(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args
            pairs = list(zip(args[len(args) - len(node.args.defaults) :], node.args.defaults))
            pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
            for arg, default in pairs:
                # seed = 0 is every random thing's default, not the method's alone
                if (
                    arg.arg in AUTHORS
                    and arg.arg != "seed"
                    and isinstance(default, ast.Constant)
                    and default.value == AUTHORS[arg.arg]
                ):
                    yield f"{path.relative_to(ROOT)}:{default.lineno} {node.name}({arg.arg}={default.value})"


def test_no_function_writes_the_methods_defaults_again():
    """A default written as a number would not follow DEFAULTS: each reads DEFAULTS.<name> instead."""
    found = [
        hit
        for path in sorted((ROOT / "pigviz").rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(READ_BY_LEARNERS)
        and path.relative_to(ROOT) != Path("pigviz/_util/config.py")
        for hit in _literal_defaults(path)
    ]
    assert not found, found


def test_below_the_entry_points_K_and_L_have_no_defaults():
    found, checked = [], 0
    for name in BELOW_THE_ENTRY_POINTS:
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if getattr(obj, "__module__", None) != name or not callable(obj):
                continue
            params = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters
            for p in ("K", "L"):
                if p in params:
                    checked += 1
                    if params[p].default is not inspect.Parameter.empty and f"{name}.{attr}" not in OWN_SETTING:
                        found.append(f"{name}.{attr}({p}={params[p].default})")
    assert checked > 20 and not found, found
