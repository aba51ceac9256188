"""Notebook 01's lesson helpers: the tables it shows, the studies behind its answers, its claims."""

from pigviz import lessons
from pigviz.lessons import nb01_stick_balance as nb01


def test_the_claims_table_holds_every_claim_and_passes():
    t = lessons.claims_table("01")
    claims = nb01.claims()
    assert len(t) == len(claims) >= 19
    assert list(t.text["result"]) == ["PASS"] * len(claims)
    assert [c.text for c in claims] == list(t.text["claim"])
    texts = [c.text for c in claims]
    assert len(set(texts)) == len(texts) and all(t.strip() for t in texts)  # one row per claim, none blank


def test_every_defined_prose_number_names_why():
    assert all(isinstance(k, str) and why.strip() for k, why in nb01.PROSE_DEFINED.items())
