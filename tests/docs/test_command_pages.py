"""Each command has a page in docs/commands/, listed in the site's navigation, whose reference part
is exactly what the command's ``--help`` prints today."""

from __future__ import annotations

import pytest
import yaml

from .command_pages import REPO, command_names, page, reference, split

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", command_names())
def test_the_command_page_shows_the_current_help(name: str) -> None:
    path = page(name)
    assert path.exists(), f"{name} has no page: run `python tests/docs/command_pages.py` and write its prose"
    prose, generated = split(path.read_text(encoding="utf-8"))
    assert prose.startswith(f"# sbrules {name}"), f"{path}: the page's title is `# sbrules {name}`"
    assert len(prose.strip().splitlines()) > 2, f"{path}: the page needs a few lines of prose above the reference"
    assert generated == reference(name).rstrip() + "\n", (
        f"{path}: the reference is not the command's --help: run `python tests/docs/command_pages.py`"
    )


def test_every_command_page_is_in_the_site_navigation() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(entries: object) -> list[str]:
        found: list[str] = []
        if isinstance(entries, list):
            for entry in entries:
                found += pages(entry)
        elif isinstance(entries, dict):
            for value in entries.values():
                found += pages(value)
        elif isinstance(entries, str):
            found.append(entries)
        return found

    listed = set(pages(config["nav"]))
    missing = [name for name in command_names() if f"commands/{name}.md" not in listed]
    assert not missing, f"mkdocs.yml's nav lacks these command pages: {missing}"
