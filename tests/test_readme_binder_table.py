"""The README's Binder table is the measurement it cites (benchmarks/binder_measured.json), row by row."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_binder_table_matches_the_measurement_it_cites():
    measured = json.loads((ROOT / "benchmarks" / "binder_measured.json").read_text(encoding="utf-8"))
    rows = {r["notebook"].split("_", 1)[0]: r for r in measured["rows"]}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = re.findall(r"^  \| (\d\d[ab]?) [^|]+\| ([\d.]+) s \| ([\d.]+ s|-) \| (\d+) MB \|$", readme, re.M)
    assert {key for key, *_ in table} == set(rows), "the README's Binder table and the measurement list other notebooks"
    for key, run_s, first_s, peak in table:
        r = rows[key]
        assert (run_s, first_s, peak) == (
            f"{r['seconds']:.1f}",
            "-" if r["first_figure_s"] is None else f"{r['first_figure_s']:.1f} s",
            f"{r['kernel_peak_mb']:.0f}",
        ), f"notebook {key}: the README says {run_s} s / {first_s} s / {peak} MB"


def test_the_readme_adds_the_kernels_up_as_the_measurement_does():
    measured = json.loads((ROOT / "benchmarks" / "binder_measured.json").read_text(encoding="utf-8"))
    total = sum(round(r["kernel_peak_mb"]) for r in measured["rows"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(rf"the\s+{len(measured['rows'])}\s+peaks above add up to\s+([\d,]+) MB", readme)
    assert said, "the README's Binder advice says what the kernels add up to"
    assert said.group(1) == f"{total:,}", f"the kernels add up to {total:,} MB, the README says {said.group(1)}"
    assert "Shut Down Kernel" in readme
