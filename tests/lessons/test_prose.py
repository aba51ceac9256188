"""``pigviz verify --prose``: every number in the markdown is computed by a claim or listed as a
definition; no saved output holds an f-string that lost its f."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pigviz.lessons import prose
from pigviz.lessons.verify import CLAIM_MODULES, LESSON_MODULES, collect_claims

ROOT = Path(__file__).resolve().parents[2]


def test_numbers_are_read_as_prose_writes_them():
    text = (
        "MagicPIG's attention costs 0.41x dense's at 8,174 tokens (5.1% of the keys) on SmolLM2-135M and "
        "Llama-3.1-8B in bf16 at 96k, within 1e-6; §3.2, notebook 06, notebooks 01-04, `K = 10`, "
        "[the paper](https://arxiv.org/abs/2410.16179), step 4, 2 of L tables, 150 tables, 12 GiB."
    )
    assert prose.numbers_in(text) == ["0.41x", "8,174", "5.1%", "96k", "1e-6", "150", "12"]


def test_sentences_keep_the_text_as_written():
    found = prose.sentences("First 0.41x here. Then `K = 10` and 150 tables.\n\n- a list item 2.5")
    assert [s for s, _ in found] == ["First 0.41x here.", "Then `K = 10` and 150 tables.", "- a list item 2.5"]


def _notebook(tmp_path, key, markdown):
    nb = {
        "cells": [{"cell_type": "markdown", "id": f"{key}-00", "metadata": {}, "source": markdown}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    folder = tmp_path / "nbs"
    folder.mkdir(exist_ok=True)
    (folder / f"{key}_x.ipynb").write_text(json.dumps(nb))
    return folder


def test_a_number_no_claim_computes_is_named_with_its_sentence(tmp_path):
    from pigviz.lessons.verify import Claim

    claims = [Claim("02", "the cone", True, "0.62", quotes=("8,192 keys",))]
    folder = _notebook(tmp_path, "02", "The cone is 0.62 wide over 8,192 keys. It is 0.71 wide elsewhere.")
    problems = prose.check_prose(folder, claims=claims)
    assert [(p.number, p.sentence) for p in problems] == [("0.71", "It is 0.71 wide elsewhere.")]
    assert "02 cell 0 (02-00): '0.71' is not computed here: It is 0.71 wide elsewhere." in prose.format_problems(
        problems
    )


def test_a_failing_claim_vouches_for_nothing(tmp_path):
    from pigviz.lessons.verify import Claim

    folder = _notebook(tmp_path, "02", "The cone is 0.62 wide.")
    assert prose.check_prose(folder, claims=[Claim("02", "the cone", True, "0.62")]) == []
    assert len(prose.check_prose(folder, claims=[Claim("02", "the cone", False, "0.62")])) == 1


@pytest.mark.slow
def test_a_changed_number_in_a_findings_markdown_fails_naming_its_sentence(tmp_path):
    """Finding 4 (the lab book behind lesson 07) quotes many computed numbers; lesson 07 hardly any."""
    src = prose.notebook_paths()["f4"]
    folder = tmp_path / "nbs"
    (folder / "findings").mkdir(parents=True)
    target = folder / "findings" / src.name
    shutil.copy(src, target)
    claims = collect_claims([CLAIM_MODULES["f4"]])
    assert prose.check_prose(folder, notebooks=["f4"], claims=claims) == []
    nb = json.loads(target.read_text())
    computed, _ = prose._allowed("f4", {"f4": claims})
    for index, cell in enumerate(nb["cells"]):  # noqa: B007 - the cell found is used below
        source = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
        hits = [
            (s, n)
            for s, b in prose.sentences(source)
            for n in prose.numbers_in(b, statable=False)
            if n in computed and len(n) > 1  # a one-digit count is exempt from the check, so changing it proves nothing
        ]
        if hits:
            sentence, number = hits[0]
            break
    else:
        pytest.fail("finding 4's markdown quotes no computed number")
    changed = number.replace(number.rstrip("%xk")[-1], str((int(number.rstrip("%xk")[-1]) + 3) % 10), 1)
    changed = number[:-1] + str((int(number[-1]) + 3) % 10) if number[-1].isdigit() else changed
    assert changed != number
    new_sentence = sentence.replace(number, changed, 1)
    cell["source"] = source.replace(sentence, new_sentence, 1)
    target.write_text(json.dumps(nb))
    problems = prose.check_prose(folder, notebooks=["f4"], claims=claims)
    assert [(p.cell, p.number) for p in problems] == [(index, changed)]
    assert problems[0].sentence == new_sentence.strip()


def test_no_saved_output_holds_an_unformatted_placeholder():
    assert prose.unformatted_placeholders(ROOT / "notebooks") == []


def test_the_placeholder_check_finds_a_lost_f(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "id": "07-00",
                "metadata": {},
                "source": "",
                "execution_count": 1,
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {
                            "text/markdown": "At {k['longest']:,} tokens $W_{M}$ and \\frac{a}{b}, {'a': 1}, {x:.2f} "
                            "```python\nraise ValueError(f'budget={budget}')\n```"
                        },
                    }
                ],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "07_x.ipynb").write_text(json.dumps(nb))
    assert prose.unformatted_placeholders(tmp_path) == ["07 cell 0: {k['longest']:,}", "07 cell 0: {x:.2f}"]


def test_the_cli_refuses_an_unknown_notebook():
    out = subprocess.run(
        [sys.executable, "-m", "pigviz", "verify", "--prose", "--notebook", "99"], capture_output=True, text=True
    )
    assert out.returncode != 0 and "--notebook must be one of" in out.stderr


def test_verify_ends_with_its_tally_counting_the_prose_check():
    out = subprocess.run(
        [sys.executable, "-m", "pigviz", "verify", "--notebook", "02"], capture_output=True, text=True, timeout=300
    )
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert lines[-2].startswith("prose: every number")
    claims = len(collect_claims([LESSON_MODULES["02"]]))
    assert lines[-1] == f"{claims + 1} passed, 0 failed"
