"""docs/architecture.md's "Not implemented" names nothing that the suite computes (issue 50, item 5).

Each bullet of that section begins ``- Seed NNN, <the seed's ids>:`` (``Fig. 5``, ``Table 7``, ``Eqs. 8-10``,
``App. A.8``, ``Thms C.1-C.4``, ...). What the suite computes, per seed: the ids in the ``source``, ``title`` and
report item titles of every experiment file (``configs/experiments/*.yaml``, attributed to a seed by its
``source``), and in ``paper/theory.py``'s ``SOURCES`` (``make paper EXP=theory``). A bullet's id is computed when
one of those is the same id, or lies inside it (``App. A`` listed, ``Appendix A.2`` run), or is it with a letter
(``Table 3`` listed, ``Table 3a`` run). The section "Implemented in part" is the other way round: each of its
bullets names something an experiment or the theory report does compute, and says what differs.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# how an experiment's ``source`` names its seed
SEED_MARKERS = {"000": "Cutting the Skip", "002": "seeds/002", "003": "seeds/003", "004": "seeds/004"}
KINDS = {"Figures": "Fig", "Figure": "Fig", "Figs.": "Fig", "Fig.": "Fig", "Tables": "Table", "Table": "Table",
         "Eqs.": "Eq", "Eq.": "Eq", "Equations": "Eq", "Equation": "Eq", "Appendix": "App", "App.": "App",
         "App": "App", "Sections": "Sec", "Section": "Sec", "Sec.": "Sec", "Theorems": "Thm", "Theorem": "Thm",
         "Thms": "Thm", "Thm": "Thm", "Props.": "Prop", "Prop.": "Prop", "Propositions": "Prop",
         "Proposition": "Prop", "Lemma": "Lemma", "footnote": "footnote"}
NUMBER = r"(?:[A-Z]\.)?\d+(?:\.\d+)*[a-z]?|[A-Z]\b"
ID = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in sorted(KINDS, key=len, reverse=True)) +
                rf")\s*((?:{NUMBER})(?:\s*(?:,|and|-)\s*(?:{NUMBER}))*)")
BULLET = re.compile(r"^- Seed (\d{3}), ([^:]+):")


def _expand(first: str, last: str) -> list[str]:
    """``7-8`` -> 7, 8; ``C.1-C.4`` -> C.1 ... C.4; ``4.1-4.2`` -> 4.1, 4.2 (the last number counts)."""
    head_a, _, tail_a = first.rpartition(".")
    head_b, _, tail_b = last.rpartition(".")
    if head_a == head_b and tail_a.isdigit() and tail_b.isdigit():
        prefix = f"{head_a}." if head_a else ""
        return [f"{prefix}{i}" for i in range(int(tail_a), int(tail_b) + 1)]
    return [first, last]


def result_ids(text: str) -> set[str]:
    """Every id written in ``text``, as ``Kind number``: ``Tables 5 and 6`` gives ``Table 5``, ``Table 6``."""
    ids = set()
    for kind, numbers in ID.findall(text):
        parts = re.split(r"\s*(,|and|-)\s*", numbers)
        values, i = [], 0
        while i < len(parts):
            if i + 2 < len(parts) and parts[i + 1] == "-":
                values += _expand(parts[i], parts[i + 2])
                i += 3
            else:
                values.append(parts[i])
                i += 2
        ids |= {f"{KINDS[kind]} {v}" for v in values if v}
    return ids


def theory_sources() -> dict[str, str]:
    """``paper/theory.py``'s ``SOURCES``, read from the file (importing it would import torch and the models)."""
    tree = ast.parse((ROOT / "paper" / "theory.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "SOURCES":
            return ast.literal_eval(node.value)
    raise AssertionError("paper/theory.py has no SOURCES: {section: 'seed, places'}")


def computed_ids() -> dict[str, set[str]]:
    """Per seed, the ids the experiment files and the theory report name."""
    out: dict[str, set[str]] = {seed: set() for seed in SEED_MARKERS}
    for path in sorted((ROOT / "configs" / "experiments").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        seeds = [seed for seed, marker in SEED_MARKERS.items() if marker in spec["source"]]
        assert len(seeds) == 1, f"{path.name}: its source names no seed, or several: {spec['source']!r}"
        titles = [spec["source"], spec["title"], *(item.get("title", "") for item in spec.get("report", []))]
        out[seeds[0]] |= {i for text in titles for i in result_ids(text)}
    for places in theory_sources().values():
        seed, _, rest = places.partition(", ")
        out[seed] |= result_ids(rest)
    return out


def covers(done: str, listed: str) -> bool:
    """``done`` (an id the suite computes) is ``listed``, lies inside it, or is it with a letter."""
    (kind_a, number_a), (kind_b, number_b) = done.split(" ", 1), listed.split(" ", 1)
    return kind_a == kind_b and (number_a == number_b or number_a.startswith(number_b + ".")
                                 or re.fullmatch(re.escape(number_b) + "[a-z]", number_a) is not None)


def bullets(section: str) -> list[tuple[str, str, str]]:
    """``(seed, head, line)`` of each bullet of the section ``### <section>`` of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    body = text.split(f"### {section}\n", 1)[1].split("\n#", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("- ")]
    out = []
    for line in lines:
        match = BULLET.match(line)
        assert match, f"a bullet of '{section}' does not begin '- Seed NNN, <ids>:': {line!r}"
        out.append((match.group(1), match.group(2), line))
    assert out, f"docs/architecture.md has no bullets under '### {section}'"
    return out


def listed_but_computed(entries: list[tuple[str, str, str]], done: dict[str, set[str]]) -> list[str]:
    """Each bullet id that the suite computes, with the ids that compute it."""
    found = []
    for seed, head, _ in entries:
        ids = result_ids(head)
        assert ids, f"'Seed {seed}, {head}' names no figure, table, equation, appendix, section, theorem or lemma"
        for listed in sorted(ids):
            hits = sorted(d for d in done.get(seed, set()) if covers(d, listed))
            if hits:
                found.append(f"seed {seed} {listed} (computed: {', '.join(hits)})")
    return found


def test_result_ids_reads_lists_ranges_and_the_papers_spellings():
    assert result_ids("Tables 5 and 6; Figures 4, 7-8; App. A.4.4; Thms C.1-C.4; Eqs. 14-20") == {
        "Table 5", "Table 6", "Fig 4", "Fig 7", "Fig 8", "App A.4.4", "Thm C.1", "Thm C.2", "Thm C.3", "Thm C.4",
        *(f"Eq {i}" for i in range(14, 21))}
    assert result_ids("Section 3 and Appendix E; Table 2 and Figure 3; App 8.1, Figure 1c") == {
        "Sec 3", "App E", "Table 2", "Fig 3", "App 8.1", "Fig 1c"}


def test_not_implemented_names_nothing_an_experiment_or_the_theory_report_computes():
    found = listed_but_computed(bullets("Not implemented"), computed_ids())
    assert not found, ("docs/architecture.md lists as not implemented what the suite computes; move it to "
                       f"'Implemented in part' with what differs, or drop it: {found}")


def test_the_check_catches_an_implemented_figure_listed_as_missing():
    done = computed_ids()
    fake = [("003", "Fig. 6", "- Seed 003, Fig. 6: ConvMixer"), ("000", "Lemma 1", "- Seed 000, Lemma 1: x"),
            ("002", "Table 3", "- Seed 002, Table 3: ablations"), ("000", "Table 7", "- Seed 000, Table 7: the LM"),
            ("004", "Thm C.1", "- Seed 004, Thm C.1: a proof")]
    found = listed_but_computed(fake, done)
    assert [f.split(" (")[0] for f in found] == ["seed 003 Fig 6", "seed 000 Lemma 1", "seed 002 Table 3",
                                                 "seed 000 Table 7"]


def test_implemented_in_part_names_only_what_the_suite_computes():
    done = computed_ids()
    for seed, head, line in bullets("Implemented in part"):
        assert any(covers(d, listed) for listed in result_ids(head) for d in done[seed]), (
            f"nothing computes {line!r}: it belongs under 'Not implemented'")
