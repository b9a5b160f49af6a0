"""docs/clients.md's SDK snippets are the code the suite runs: each one is found, as
written (indentation aside), in the file the page names above it."""

from __future__ import annotations

import re

from tests.support.docs_blocks import ROOT

PAGE = ROOT / "docs" / "clients.md"
SOURCE = re.compile(r"`([\w/.\-]+\.(?:py|mjs|js))`")


def snippets(page: str) -> list[tuple[str, str]]:
    """(the first source file named since the last block, the block) for each ```python
    and ```js block."""
    found: list[tuple[str, str]] = []
    named: str | None = None
    block: list[str] | None = None
    for line in page.splitlines():
        if block is not None:
            if line == "```":
                found.append((str(named), "\n".join(block)))
                named, block = None, None
            else:
                block.append(line)
        elif line in ("```python", "```js"):
            block = []
        elif named is None and (match := SOURCE.search(line)):
            named = match.group(1)
        elif line.startswith("```"):
            named = None
    return found


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _found_in(snippet: str, source: str) -> bool:
    want, have = _lines(snippet), _lines(source)
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def test_every_sdk_snippet_is_code_the_suite_runs() -> None:
    found = snippets(PAGE.read_text())
    assert len(found) == 5, found
    for path, snippet in found:
        assert _found_in(snippet, (ROOT / path).read_text()), f"{path}:\n{snippet}"


def test_a_changed_snippet_is_caught() -> None:
    assert _found_in("a = 1\n  b = 2\n", "x\na = 1\nb = 2\n")
    assert not _found_in("a = 1\nb = 3\n", "x\na = 1\nb = 2\n")
