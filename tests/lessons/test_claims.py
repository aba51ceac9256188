"""Every notebook's claims: each one passes and carries its notebook and a value. How many a
notebook states is not held to a minimum (fewer numbers in the prose is the aim)."""

import pytest

from pigviz import lessons


@pytest.mark.parametrize("notebook", list(lessons.LESSON_MODULES))
def test_every_claim_of_the_notebook_passes(notebook):
    claims = lessons.claims(notebook)
    assert all(c.notebook == notebook and c.value for c in claims), [c.row() for c in claims]
    failed = [f"{c.text} = {c.value}" for c in claims if not c.passed]
    assert not failed, failed


def test_print_claims_prints_one_table(capsys):
    lessons.print_claims("01")
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["nb", "claim", "value", "result"] and "PASS" in out


def test_unknown_notebook_is_a_value_error_naming_the_choices():
    with pytest.raises(ValueError, match="notebook must be one of 01, 02"):
        lessons.claims("99")
