"""The errors of mesh-host, each carrying what it is about and building its own message.

    MeshHostError
    ├── DeclarationRefused   the declaration is outside the vocabulary: refused whole, nothing changed
    ├── StateError           the footprint in --state cannot be read, written or held
    └── ApplyFailed          a step failed: no later step ran; carries what had been done (apply.py)

Every error passes all its fields to `Exception.__init__`, so that it pickles (a test runs the
engine in a child process as an unprivileged user and gets the error back).
"""

from __future__ import annotations

MAX_PROBLEMS_SAID = 20  # a declaration wrong everywhere is said in its first twenty problems


class MeshHostError(Exception):
    """What mesh-host refuses or fails to do, said in one message."""


class DeclarationRefused(MeshHostError):
    """The declaration read from `source` is refused whole, for each of `problems` (`resources[3].type: ...`)."""

    def __init__(self, source: str, problems: tuple[str, ...]) -> None:
        super().__init__(source, problems)
        self.source = source
        self.problems = problems

    def __str__(self) -> str:
        said = list(self.problems[:MAX_PROBLEMS_SAID])
        if len(self.problems) > MAX_PROBLEMS_SAID:
            said.append(f"and {len(self.problems) - MAX_PROBLEMS_SAID} more")
        return f"{self.source}: declaration refused whole, nothing was changed:\n" + "\n".join(
            f"  {problem}" for problem in said
        )


class StateError(MeshHostError):
    """The footprint at `path` cannot be used, for `why`."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


class StateHeld(StateError):
    """Another mesh-host holds the footprint at `path` (its lock)."""
