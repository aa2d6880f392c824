"""make paper EXP=theory (paper/theory.py): the report of the seeds' checkable claims, with its figures."""
from pathlib import Path

import paper.theory as theory
from paper.__main__ import main


def test_make_paper_exp_theory_writes_every_section_with_its_verdicts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(theory, "DRAWS", 40)
    monkeypatch.setattr(theory, "MOMENT_DRAWS", 400)
    assert main(["exp=theory", f"root={tmp_path}"]) == 0
    folder = tmp_path / "theory"
    report = (folder / "report.md").read_text()
    for section in ("## Fig. 5", "## Eqs. 14-20", "## Props. 4.1-4.2", "## Thm 2.2"):
        assert section in report
    assert (folder / "fig5-softmax.png").stat().st_size > 10_000 and (folder / "thm22-spectra.png").is_file()
    # Eq. 17 as printed fails, Eq. 14 holds; OSA keeps full rank, softmax ends at rank 1
    assert "| 0.1, 5 | b_off | 0, 1 | 0, 64 |" in report and "| 0.1, 5 | a_diag | 64, 128 | 64, 128 |" in report
    b_off = next(line for line in report.splitlines() if line.startswith("| 0.1, 5 | b_off"))
    a_diag = next(line for line in report.splitlines() if line.startswith("| 0.1, 5 | a_diag"))
    assert b_off.endswith("| **no** |") and a_diag.endswith("| yes |")
    assert "| osa | 50 / 50 / 50 / 50 / 50 / 50 / 50 |" in report and "/ 1 / 1 |" in report
    assert f"report: {folder / 'report.md'}" in capsys.readouterr().out
