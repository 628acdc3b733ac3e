"""The documentation: the MkDocs site (mkdocs.yml, docs/) builds with `--strict`, and every
relative link in the READMEs and the docs pages leads to a file that exists, and to a
heading there where the link names one.

MkDocs checks the links between docs pages itself; the READMEs (README.md, examples/,
images/) are not part of the site, so their links are checked here, as the docs' are (one
rule for all). Integration, not unit: it runs `mkdocs` as a process.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "examples" / "README.md",
    ROOT / "images" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]

# [text](target) and [text](<target>), not images' sources on the web; code spans and fenced
# blocks are taken out first (a `[i](x)` in code is not a link).
_LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    return _CODE.sub("", _FENCE.sub("", text))


def _slugs(heading: str) -> set[str]:
    """The anchors a heading gets: Python-Markdown's toc (what MkDocs renders) and GitHub's
    (where the READMEs are read); they differ only on runs of spaces and hyphens."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    toc = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text)).strip("-")
    github = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
    return {toc, github}


def _anchors(page: Path) -> set[str]:
    return set().union(*(_slugs(h) for h in _HEADING.findall(_FENCE.sub("", page.read_text()))))


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    """`page: target (why)` for every relative link that leads nowhere, paths from `root`."""
    problems = []
    for page in pages:
        for target in _LINK.findall(_prose(page.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto: ... : not a file here
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no file {path})")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"{where} (no heading #{anchor} in {dest.relative_to(root)})")
    return problems


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    assert [p for p in PAGES if not p.exists()] == []
    problems = broken_links(PAGES)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_a_broken_link_or_anchor_is_found(tmp_path):
    # The check itself can fail: a missing file and a missing heading are each reported.
    (tmp_path / "other.md").write_text("# Some Heading: here\n\ntext\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](other.md#some-heading-here) [self](#title) [web](https://x.y/z)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[code](missing.md)`\n\n"
        "```\n[fenced](missing.md)\n```\n"
    )
    assert broken_links([page], root=tmp_path) == [
        "page.md: missing.md (no file missing.md)",
        "page.md: other.md#nope (no heading #nope in other.md)",
    ]


def test_the_site_builds_strictly(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    site = tmp_path / "site"
    for page in (ROOT / "docs").glob("*.md"):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.exists(), f"{page.name} was not built"
