"""The Markdown a reader sees: the README, CONTRIBUTING.md and every page of the docs site. The
example and reference tests read them all, wherever a section moves."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES: tuple[Path, ...] = (REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md")))


def name(page: Path) -> str:
    """A page's path from the repository root, as messages and test ids show it."""
    return page.relative_to(REPO).as_posix()


def table(header: str) -> list[list[str]]:
    """The rows (cells) of the one table, on any page, whose header line is ``header``."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        if header not in lines:
            continue
        rows = []
        for line in lines[lines.index(header) + 2 :]:
            if not line.startswith("|"):
                break
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        found.append((name(page), rows))
    assert len(found) == 1, f"expected one table headed {header!r}, found it on {[page for page, _ in found] or 'no page'}"
    return found[0][1]
