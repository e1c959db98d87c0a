"""One record of the node's own in the env folder: a JSON file of one schema, bounded in size.

`Record.read` takes only a regular file (`files.read_regular`: never a link, a FIFO or a folder),
at most `limit` bytes, parsed as bounded JSON and validated by the record's pydantic model;
`Record.write` writes it atomically (`files.write_atomically`, mode 0600). A file that cannot be
read is a `MaterializeError` naming it; one that is JSON but not a record of its kind is a
`NotARecord` (a `MaterializeError`), so that an owner can tell "unreadable" from "of another shape".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from provisioner_client.errors import MaterializeError
from provisioner_client.state import files
from registry.contract import JsonRefused, read_json, to_json

M = TypeVar("M", bound=BaseModel)


class NotARecord(MaterializeError):
    """The file is JSON, but not a record of its kind."""


@dataclass(frozen=True)
class Record(Generic[M]):
    """A record's file `name` in the env folder, its `model`, its bound in bytes, `what` it is
    called in an error and the `shape` it must have. `readable`: written indented, for an operator."""

    name: str
    model: type[M]
    limit: int
    what: str
    shape: str
    readable: bool = False

    def path(self, folder: Path) -> Path:
        return folder / self.name

    def read(self, folder: Path) -> M | None:
        """The record kept in `folder`; None when there is none."""
        path = self.path(folder)
        found = files.read_regular(path, limit=self.limit, what=self.what)
        if found is None:
            return None
        try:
            document = read_json(found.content, max_bytes=self.limit)
        except JsonRefused as err:
            raise MaterializeError(path, f"cannot be read: {err.reason}", what=self.what) from None
        try:
            return self.model.model_validate(document)
        except ValidationError:
            raise NotARecord(path, f"is not a record of {self.shape}", what=self.what) from None

    def write(self, folder: Path, value: M) -> None:
        """Keeps `value` in `folder`, on disk before this returns."""
        files.make_folder(folder)
        files.write_atomically(self.path(folder), self._content(value), what=self.what)

    def remove(self, folder: Path) -> bool:
        """The record removed; whether one was there."""
        return files.remove(self.path(folder), what=self.what)

    def _content(self, value: M) -> bytes:
        if not self.readable:
            return to_json(value)
        document = value.model_dump(mode="json")
        return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
