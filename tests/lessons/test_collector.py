"""`pigviz verify`'s collector: a registered module that is missing or broken is a FAIL, never skipped."""

import sys
import types
from pathlib import Path

import pytest

from pigviz.lessons import exercises
from pigviz.lessons import verify as cl


@pytest.fixture
def fake_modules(monkeypatch):
    def install(name, **attrs):
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)

    install("fake_good", claims=lambda: [cl.Claim("09", "two and two make four", 2 + 2 == 4, "4")])
    install("fake_no_claims")
    install("fake_raises", claims=lambda: 1 / 0)
    return install


def test_good_module_claims_are_collected_with_their_source(fake_modules):
    found, ok = cl.run_claims(["fake_good"])
    assert ok and len(found) == 1 and found[0].source == "fake_good"


@pytest.mark.parametrize(
    "name,why",
    [
        ("pigviz.no_such_lesson", "ModuleNotFoundError"),
        ("fake_no_claims", "no claims() function"),
        ("fake_raises", "ZeroDivisionError"),
    ],
)
def test_broken_module_becomes_a_fail_row_naming_it(fake_modules, name, why):
    found, ok = cl.run_claims(["fake_good", name])
    assert not ok
    assert [c.passed for c in found] == [True, False]
    bad = found[1]
    assert name in bad.text and why in bad.value and bad.source == name
    table = cl.format_table(found)
    assert "FAIL" in table and name in table


def test_every_registered_module_imports_and_states_claims():
    assert list(cl.LESSON_MODULES) == sorted(cl.LESSON_MODULES), "teaching order"
    sources = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "notebooks" / "src").glob("*_*.py"))
    # one claims module and one exercise listing per notebook, keyed as the file names start
    assert list(cl.LESSON_MODULES) == list(exercises.NOTEBOOKS) == [s.split("_", 1)[0] for s in sources]
    assert list(exercises.NOTEBOOKS.values()) == sources
    for name in cl.LESSON_MODULES.values():
        __import__(name)
        assert callable(sys.modules[name].claims), name


def test_every_finding_has_its_claims_module_and_the_default_run_covers_lessons_and_findings():
    findings = Path(__file__).resolve().parents[2] / "notebooks" / "src" / "findings"
    stems = sorted(p.stem for p in findings.glob("f[0-9]*_*.py"))
    assert stems and list(cl.FINDING_MODULES) == [s.split("_", 1)[0] for s in stems]
    for key, name in cl.FINDING_MODULES.items():
        assert name == f"pigviz.lessons.{stems[list(cl.FINDING_MODULES).index(key)]}"
    assert cl.CLAIM_MODULES == {**cl.LESSON_MODULES, **cl.FINDING_MODULES}


def test_no_modules_is_not_a_pass():
    assert cl.run_claims([]) == ([], False)
