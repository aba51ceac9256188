"""Every notebook's claims: each one passes, carries its notebook and a value, and there are
as many as the notebook states (so a claim that silently disappears fails here)."""

import pytest

from pigviz import lessons

# The fewest claims each notebook states today; a lower count means one went missing.
MIN_CLAIMS = {"01": 19, "02": 13, "03": 19, "04": 22, "05a": 16, "05b": 50, "06": 31, "07": 32, "08": 8}


@pytest.mark.parametrize("notebook", list(lessons.LESSON_MODULES))
def test_every_claim_of_the_notebook_passes(notebook):
    claims = lessons.claims(notebook)
    assert len(claims) >= MIN_CLAIMS[notebook], f"notebook {notebook} states {len(claims)} claims"
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
