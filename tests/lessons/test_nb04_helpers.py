"""The helpers of notebook 04a's answers and claims (pigviz.lessons.nb04a_simhash): the closed-form
verdict 04b's claims use, and the counting cells the claims re-run, which must count what the
executed notebook shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pigviz.lessons import nb04a_simhash as nb04
from pigviz.lessons import nb04b_sampling as nb04b

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_closed_form_verdict_reads_the_same_on_every_cpu():
    assert nb04.closed_form_verdict(1.0005e-9, 1e-9) == "agrees to 0.1%"
    assert nb04.closed_form_verdict(3e-15, 1e-20) == "lost in rounding noise below 1e-12"
    assert nb04.closed_form_verdict(-2e-15, 1e-20) == "lost in rounding noise below 1e-12"
    assert nb04.closed_form_verdict(2e-9, 1e-9) == "wrong by more than 0.1%"


def _shown(notebook: str, source_start: str) -> str:
    """The text/plain output of the executed notebook's code cell whose source starts so."""
    nb = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith(source_start):
            return "\n".join("".join(o.get("data", {}).get("text/plain", "")) for o in cell["outputs"])
    raise AssertionError(f"{notebook}: no code cell starts with {source_start!r}")


def test_the_claims_count_what_the_notebook_cells_show():
    """The claims re-run 04a's counting cells (same seeds, same steps): their counts are the ones the
    executed notebook prints, so a claim cannot vouch for a number the reader never sees."""
    n_keys, same, found = nb04.plane_counts()
    plane = _shown("04a_simhash_scurves.ipynb", "rng = np.random.default_rng(0)")
    assert re.findall(r"\b(\d+)\s*$", plane, re.M)[-2:] == [str(same), str(found)] and n_keys == 30
    a, b, both = nb04.two_draws()
    draws = _shown("04a_simhash_scurves.ipynb", "rng = np.random.default_rng(4)")
    assert draws.splitlines()[-1].split()[-3:] == [str(a), str(b), str(both)]
    z = _shown("04a_simhash_scurves.ipynb", "check_deg = np.arange(0, 181, 15)")
    shown = [float(line.split()[-1]) for line in z.splitlines()[1:] if line.strip()]
    assert shown == pytest.approx(nb04.bit_check_z(), abs=0.006)  # printed to 2 decimals
    markers = _shown("04a_simhash_scurves.ipynb", "p_m = bit_agreement(c)")
    for m, (tested, largest) in nb04.marker_check().items():
        (row,) = [line.split() for line in markers.splitlines() if line.split()[:3] == [">=", str(m), "of"]]
        assert int(row[-3]) == tested and float(row[-1]) == pytest.approx(largest, abs=0.006)


def test_the_04b_claims_count_what_the_notebook_cells_show():
    """The same for 04b: the real query of §2, the per-layer pairs of §3 and §4's one head."""
    r = nb04b.real_query()
    shown = _shown("04b_sampling_keys.ipynb", "independent_var = ").splitlines()[-1].split()
    assert shown[:3] == [str(len(r["sampled"])), str(len(r["picked"])), f"{r['u_all'].sum():.1f}"]
    pairs = nb04b.layer_pairs()
    table = _shown("04b_sampling_keys.ipynb", "rows = []\nfor layer, pr in pairs.items():\n    for name")
    for line in table.splitlines()[1:]:
        layer, variant, *_, hit2 = line.split()
        pr = pairs[int(layer)]
        assert int(hit2) == int((pr[variant] >= 2)[pr["own"]].sum())
    one = nb04b.one_head_output()
    errors = _shown("04b_sampling_keys.ipynb", "exact = ~kg.non_exact_mask(view.n)")
    rows = [line.split() for line in errors.splitlines()[1:] if line.split()[0] in ("raw", "centred")]
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [(x["keys"], x["draw"], x["read"]) for x in one["rows"]]
    assert [float(r[3]) for r in rows] == pytest.approx([x["error"] for x in one["rows"]], abs=6e-4)
    (exact,) = [line.split() for line in errors.splitlines() if line.startswith("exact set only")]
    assert int(exact[-2]) == one["exact_n"] and float(exact[-1]) == pytest.approx(one["exact_error"], abs=6e-4)


def test_the_04b_grid_and_draws_claims_count_what_the_notebook_cells_show():
    """§5's grid (the formula over §3's pairs) and Going further's draws: the claims re-run the cells."""
    grid = nb04b.formula_grid(nb04b.layer_pairs())
    gain = grid["rate"]["centred"] / grid["rate"]["raw"]
    shown = _shown("04b_sampling_keys.ipynb", "Ks, Ls = np.arange(6, 13)")
    for which, at in (("smallest", gain.argmin()), ("largest", gain.argmax())):
        (row,) = [line.split() for line in shown.splitlines() if line.startswith(which)]
        i, j = np.unravel_index(at, gain.shape)
        assert float(row[1].rstrip("x")) == pytest.approx(gain[i, j], abs=0.06)
        assert (int(row[2]), int(row[3])) == (grid["Ks"][i], grid["Ls"][j])
    rates, formula, _ = nb04b.rate_draws(nb04b.layer_pairs())
    shown = _shown(
        "04b_sampling_keys.ipynb", "rows = []\nfor name, layer in itertools.product(kg.VARIANTS, pairs):\n    r, f"
    )
    for line in shown.splitlines()[1:]:
        name, layer, _, _, gap, *_ = line.split()
        r = rates[name, int(layer)]
        assert float(gap) == pytest.approx(
            (r.mean() - formula[name, int(layer)]) / (r.std(ddof=1) / np.sqrt(len(r))), abs=0.06
        )
