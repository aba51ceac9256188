"""``check`` returns the function to go on with, and keeps a passing one as ``ex.mine.<name>``."""

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from pigviz.lessons import exercises as ex

SOFTMAX = textwrap.dedent(
    """
    import numpy as np

    def softmax(x):
        x = np.asarray(x, dtype=float)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    """
)


@pytest.fixture
def fresh_mine(tmp_path, monkeypatch):
    monkeypatch.setenv(ex.MINE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(ex, "mine", ex.Mine())
    ex.enable_solutions(False)
    yield ex.mine
    ex.enable_solutions(None)


def _load(tmp_path, source, name="learner_cell"):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_returns_the_learners_function_and_keeps_it(fresh_mine, tmp_path, capsys):
    softmax = _load(tmp_path / "..", SOFTMAX).softmax
    assert ex.check("03.softmax", softmax) is softmax
    assert fresh_mine.softmax is softmax
    assert (tmp_path / "03.softmax.py").is_file()


def test_a_blank_is_refused_without_solutions_and_replaced_with_them(fresh_mine):
    def softmax(x): ...

    with pytest.raises(ex.CheckFailed, match="still `...`"):
        ex.check("03.softmax", softmax)
    ex.enable_solutions(True)
    assert ex.check("03.softmax", softmax) is ex.get("03.softmax").reference


def test_a_wrong_function_is_refused_and_not_kept(fresh_mine, capsys):
    wrong = ex.get("03.softmax").wrong[0].fn
    with pytest.raises(ex.CheckFailed):
        ex.check("03.softmax", wrong)
    assert fresh_mine.softmax is ex.get("03.softmax").reference
    assert "you have not passed 03.softmax (notebook 03) yet" in capsys.readouterr().out


def test_a_kept_function_reaches_another_process(fresh_mine, tmp_path):
    softmax = _load(tmp_path / "..", SOFTMAX).softmax
    ex.check("03.softmax", softmax, quiet=True)
    code = (
        "from pigviz.lessons import exercises as ex\n"
        "f = ex.mine.softmax\n"
        "print(f is ex.get('03.softmax').reference, round(float(f([0.0, 0.0])[0]), 3))\n"
    )
    env = {**__import__("os").environ, ex.MINE_DIR_ENV: str(tmp_path), ex.SOLUTIONS_ENV: "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "your 03.softmax from" in out
    assert out.strip().endswith("False 0.5")


def test_a_kept_function_that_no_longer_passes_gives_way_to_the_reference(fresh_mine, tmp_path, capsys):
    (tmp_path / "03.softmax.py").write_text("def softmax(x):\n    return x\n")
    assert fresh_mine.softmax is ex.get("03.softmax").reference
    assert "reference stands in" in capsys.readouterr().out


def test_with_solutions_on_nothing_is_read_from_disk(fresh_mine, tmp_path):
    (tmp_path / "03.softmax.py").write_text(SOFTMAX)
    ex.enable_solutions(True)
    assert fresh_mine.softmax is ex.get("03.softmax").reference


def test_an_unknown_name_is_an_attribute_error(fresh_mine):
    with pytest.raises(AttributeError, match="no exercise called"):
        getattr(fresh_mine, "no_such_function")  # noqa: B009 - the attribute lookup is what is tested
