"""The docs' install blocks, as a user copies them from the tutorial and the how-tos."""

from __future__ import annotations

import re

from tests.wheel import REPO


def tutorial_block(name: str, page: str = "tutorial.md") -> str:
    """The code block between ``<!-- startproject:NAME -->`` and its closing marker."""
    tutorial = (REPO / "docs" / page).read_text()
    section = re.search(
        rf"<!-- startproject:{name} -->\s*```python\n(.*?)```\s*<!-- /startproject:{name} -->",
        tutorial,
        re.DOTALL,
    )
    assert section, f"docs/{page} has no startproject:{name} block"
    return section.group(1)
