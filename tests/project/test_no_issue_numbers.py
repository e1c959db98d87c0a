"""No issue number in the documentation nor in the code: a number refers to a tracker nobody reading
the repository can follow, so each place says the reason itself. Read: the README, every Markdown
file, every Python file and `scripts/` (what the repository holds, not `.venv` or what a run left)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
LEFT_OUT = {".venv", ".git", "site", "build", "dist", "state", "node_modules", "__pycache__"}
# "issue 23", "Issue #7", "issues 9 and 10", "the issue's promise", "#23" (a tracker's reference)
ISSUE_NUMBER = re.compile(r"\bissues? #?[0-9]+|\bissue's\b|(?<![\w&#/])#[0-9]{2,}\b", re.IGNORECASE)


def documents_and_code() -> Iterator[Path]:
    """Every file searched; this one, whose examples are issue numbers, aside."""
    for folder, folders, files in os.walk(ROOT):
        folders[:] = sorted(f for f in folders if f not in LEFT_OUT and (not f.startswith(".") or f == ".ci"))
        for name in sorted(files):
            path = Path(folder, name)
            top = path.relative_to(ROOT).parts[0]
            if (path.suffix in {".py", ".md"} or top in {"scripts", ".ci"}) and path != Path(__file__):
                yield path


def test_the_search_reads_the_documentation_the_code_and_the_scripts() -> None:
    read = {str(path.relative_to(ROOT)) for path in documents_and_code()}
    assert {"README.md", "docs/index.md", "scripts/test", "scripts/run", ".ci/run", "registry/__init__.py"} <= read
    assert not any(name.startswith(".venv/") for name in read)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Rollouts (issue 23): waves", True),
        ("as Issue #7 asked", True),
        ("the issue's promise", True),
        ("see #23", True),
        ("issue the grants again", False),
        ("registry.access.issuing.issue_grants", False),
        ("the issued accounts", False),
        ('"#7f7f7f" and &#39;', False),
    ],
)
def test_an_issue_number_is_found_and_the_verb_issue_is_not(text: str, found: bool) -> None:
    assert (ISSUE_NUMBER.search(text) is not None) == found


def test_no_document_docstring_or_comment_names_an_issue_number() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in documents_and_code()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if ISSUE_NUMBER.search(line)
    ]
    assert found == []
