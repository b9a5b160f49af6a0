"""Links between the documentation's pages land on a page and a heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs_blocks import ROOT, documents, heading_anchors

LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def test_every_link_to_a_heading_finds_it() -> None:
    broken = []
    for page in [*documents(), ROOT / "CHANGELOG.md"]:
        for target, anchor in LINK.findall(page.read_text()):
            linked = page.parent / target if target else page
            if not linked.is_file() or anchor not in heading_anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert broken == []


def test_a_wrong_anchor_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Worker processes (`--workers`)\n")
    assert heading_anchors(page) == {"worker-processes---workers"}
