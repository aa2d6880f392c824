"""The front door leads somewhere: every relative link of README.md and docs/*.md names a file that exists,
and every page under docs/ is reachable from the README in one hop."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_names_a_file_that_exists():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_every_docs_page_is_one_hop_from_the_readme():
    linked = {(ROOT / t).resolve() for t in LINK.findall((ROOT / "README.md").read_text())}
    assert {p.resolve() for p in PAGES[1:]} <= linked
