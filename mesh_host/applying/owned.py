"""`owned`: what this host has applied and still owns, from its footprint, and what each `module`
directory (or archive) holds that the host did not write (the module's, looked at now).

A `program` directory is the program's whole and is not looked into; `knows` are listed as known.
An archive is listed with its member count, not each member. A resource declared with an id is
named by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mesh_host.applying.footprint import (
    AnyOwned,
    Footprint,
    OwnedArchive,
    OwnedDirectory,
    OwnedFile,
    OwnedService,
    load,
)
from mesh_host.applying.roots import Root
from mesh_host.applying.unknown import strays


@dataclass(frozen=True)
class Holding:
    """The footprint, with the modules' files found in `module` directories (or why they could not be)."""

    footprint: Footprint
    modules: dict[str, tuple[str, ...]] = field(default_factory=dict)  # directory -> the module's files
    unseen: dict[str, str] = field(default_factory=dict)  # directory -> why it could not be looked into

    def render(self) -> str:
        if not self.footprint.owned:
            return "this host owns nothing: it has applied nothing here (or all of it was removed)"
        lines = []
        for entry in self.footprint.owned:
            lines.extend(self._lines(entry))
        return "\n".join(lines)

    def _lines(self, entry: AnyOwned) -> list[str]:
        gone = "" if entry.declared else "  (no longer declared: kept while it holds what is not the host's)"
        named = f"{entry.id}  " if entry.id else ""
        if isinstance(entry, OwnedService):
            found = f"found {'running' if entry.before.running else 'stopped'}, "
            found += "enabled" if entry.before.enabled else "disabled"
            enabled = {True: "enabled", False: "disabled", None: "enablement left as found"}[entry.enabled]
            return [f"service    {named}{entry.unit}  {entry.state}, {enabled} (the host {found}){gone}"]
        how = "created" if entry.created else "adopted"
        owner = f" {entry.owner}" if entry.owner else ""
        if isinstance(entry, OwnedFile):
            return [f"file       {named}{entry.path}  {how} {entry.mode:04o}{owner}{gone}"]
        module = f" of module {entry.module}" if entry.module else ""
        unknown = f"  unknown={entry.unknown}{module}" if entry.unknown else module
        if isinstance(entry, OwnedArchive):
            unpacked = f"  {len(entry.members)} members of {entry.source} (sha256 {entry.sha256[:12]})"
            lines = [f"archive    {named}{entry.path}  {how} {entry.mode:04o}{owner}{unknown}{unpacked}{gone}"]
        else:
            lines = [f"directory  {named}{entry.path}  {how} {entry.mode:04o}{owner}{unknown}{gone}"]
        lines += [f"  known      {known}" for known in entry.knows]
        lines += [f"  {entry.module}'s  {path}" for path in self.modules.get(entry.path, ())]
        if entry.path in self.unseen:
            lines.append(f"  not looked into: {self.unseen[entry.path]}")
        return lines

    def as_json(self) -> dict[str, object]:
        owned = []
        for entry in self.footprint.owned:
            said: dict[str, object] = entry.model_dump(mode="json")
            if isinstance(entry, OwnedDirectory | OwnedArchive) and entry.unknown == "module":
                said["modules_files"] = list(self.modules.get(entry.path, ()))
                if entry.path in self.unseen:
                    said["not_looked_into"] = self.unseen[entry.path]
            owned.append(said)
        return {"owned": owned}


def owned(root: Root, state: Path) -> Holding:
    """What the footprint in `state` says this host owns, with the `module` directories looked into now."""
    footprint = load(state)
    kept = {PurePosixPath(entry.key[1]) for entry in footprint.owned if not isinstance(entry, OwnedService)}
    for entry in footprint.owned:
        if isinstance(entry, OwnedDirectory | OwnedArchive):
            kept.update(PurePosixPath(known) for known in entry.knows)
    folders = {
        PurePosixPath(entry.path) for entry in footprint.owned if isinstance(entry, OwnedDirectory | OwnedArchive)
    }
    members: set[PurePosixPath] = set()  # an archive's member folders: the host's, yet looked into
    for entry in footprint.owned:
        if isinstance(entry, OwnedArchive):
            for member in entry.members:
                (members if member.kind == "directory" else kept).add(PurePosixPath(entry.path) / member.name)
    modules, unseen = {}, {}
    for entry in footprint.owned:
        if isinstance(entry, OwnedDirectory | OwnedArchive) and entry.unknown == "module":
            folder = PurePosixPath(entry.path)
            top = min((owner for owner in folders if folder.is_relative_to(owner)), key=lambda owner: len(owner.parts))
            try:
                modules[entry.path] = tuple(str(path) for path in strays(root, folder, kept, top, members))
            except OSError as err:
                unseen[entry.path] = err.strerror or str(err)
    return Holding(footprint, modules, unseen)
