"""The converging engine: makes the machine (or a --root) match a declaration, owning its footprint.

An apply, in order:
1. Every declared owner is looked up: one this machine lacks fails the apply before any change.
   Every archive is read and checked whole (archive.py): one refused refuses the declaration.
2. What the footprint holds and the declaration no longer declares is removed, last applied
   first: a file the host created is deleted; a directory it created is removed when empty (one
   still holding what is not the host's is kept, marked no longer declared, and removed by a later
   apply once empty); a service is returned to how the host first found it (stopped if it was
   not running, disabled if it was not enabled; a unit whose file is gone is only stopped);
   what the host found there and adopted, or what a declared directory `knows`, is left as it
   is and forgotten.
3. Each resource, in the stated order, is judged against what is there and changed only where it
   differs: a directory is created (its folder must exist) or its mode and owner returned; a file
   is written whole when its content differs (atomically: a new file renamed over it), else its
   mode and owner returned in place; a service is enabled or disabled, started or stopped, after
   `systemctl daemon-reload` when a unit file changed in this apply; an archive's members are put
   in place (see archive.py). A directory or archive with `unknown: move-out` then moves out its
   strays (see unknown.py). A resource whose id the footprint holds at another path is moved
   there first, whole (renamed), unless something stands at both paths: that step fails.
Each step is recorded in the footprint once it worked (a directory or file as soon as it is
created). A step that fails stops the apply: ApplyFailed carries what was done before it.
Applying twice changes nothing the second time: the report's changes are then empty.

The host follows no link it did not make: not where a path goes, nor among its folders from the
outermost directory it declares or owns down (a module writing in its folder could plant one);
links above that (`/lib -> usr/lib`) are the machine's. Such a step fails; a removal releases.
Each step finds its folder once, by descriptor (safe_fs), and judges and changes what is in it
through that descriptor: a link swapped in while it works is refused, never followed.
Services need the real machine: under --root they are skipped, saying so, and not recorded.
A dry run judges every step the same way and changes nothing, the footprint included.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath

from mesh_host.applying import safe_fs
from mesh_host.applying.archive import ArchiveRefused, Tree, UnpackFailed, Verified, remove, unpack, verified
from mesh_host.applying.footprint import (
    AnyOwned,
    Footprint,
    Member,
    OwnedArchive,
    OwnedDirectory,
    OwnedFile,
    OwnedService,
    holding,
    load,
    save,
)
from mesh_host.applying.owners import Ids, NoSuchOwner, resolve
from mesh_host.applying.roots import MOVED_IN_HOME, Root, RootError, moved_folder
from mesh_host.applying.safe_fs import FOLLOWS_NO_LINK, closing, kind
from mesh_host.applying.services import ServiceFailed, Systemctl, verbs_back, verbs_toward
from mesh_host.applying.unknown import Moved, destination, move_out, strays
from mesh_host.declaration import (
    MAX_CONTENT_BYTES,
    Archive,
    Declaration,
    Directory,
    File,
    Folder,
    PathResource,
    Resource,
    Service,
    label,
)
from mesh_host.errors import DeclarationRefused, MeshHostError, StateError
from mesh_host.runner import Runner, run

UNIT_FOLDERS = frozenset(
    PurePosixPath(folder)
    for folder in ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
)
NO_LONGER_DECLARED = "no longer declared"
_DONE = {"enable": "enabled", "disable": "disabled", "start": "started", "stop": "stopped"}


@dataclass(frozen=True)
class Event:
    """One thing an apply did (a change) or has to say (a note), about one resource."""

    where: str  # the resource's id, else resources[3]; or "no longer declared"
    subject: str  # a machine path or a unit
    what: str

    def render(self) -> str:
        return f"{self.where}  {self.subject}  {self.what}"

    def as_json(self) -> dict[str, str]:
        return {"where": self.where, "subject": self.subject, "what": self.what}


@dataclass(frozen=True)
class Report:
    """What an apply changed (a dry run: would change), and what it has to say beyond."""

    changes: tuple[Event, ...] = ()
    notes: tuple[Event, ...] = ()
    dry_run: bool = False

    def render(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        summary = f"{verb} {len(self.changes)}" if self.changes else "nothing to change: the machine matches"
        return "\n".join([*self.lines(), summary])

    def lines(self) -> list[str]:
        """One line per change, then per note."""
        return [event.render() for event in self.changes] + [f"note: {event.render()}" for event in self.notes]

    def as_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "changes": [event.as_json() for event in self.changes],
            "notes": [event.as_json() for event in self.notes],
        }


class ApplyFailed(MeshHostError):
    """The step at `where` on `subject` failed for `why`; no later step ran; `done` is what was done before."""

    def __init__(self, where: str, subject: str, why: str, done: Report) -> None:
        super().__init__(where, subject, why, done)
        self.where = where
        self.subject = subject
        self.why = why
        self.done = done

    def __str__(self) -> str:
        done = "; ".join(event.render() for event in self.done.changes) or "nothing"
        verb = "would fail" if self.done.dry_run else "failed"
        return f"{self.where} {self.subject} {verb}: {self.why}\ndone before it: {done}"


class _StepFailed(Exception):
    """A step cannot go on, for its message."""


@dataclass(frozen=True)
class Host:
    """Where an apply works: the root, the footprint's folder, the home whose mesh-moved receives strays."""

    root: Root
    state: Path  # the folder footprint.json is in, as this filesystem finds it
    home: PurePosixPath  # a machine path: the moved-out folder is home/.local/state/mesh-moved/<module>
    runner: Runner = run
    services: bool | None = None  # apply services: on the real machine only unless said (a test's fake runner)

    @property
    def applies_services(self) -> bool:
        return self.root.is_machine if self.services is None else self.services


def apply(declaration: Declaration, host: Host, *, dry_run: bool = False) -> Report:
    """Makes the machine match `declaration` (a dry run: says what that would change)."""
    owners = _owners(declaration, dry_run=dry_run)
    with contextlib.ExitStack() as opened:
        archives = _archives(declaration, host.root, opened)
        if dry_run:
            return _Applying(declaration, host, load(host.state), owners, archives, dry_run=True).run()
        with holding(host.state):
            return _Applying(declaration, host, load(host.state), owners, archives, dry_run=False).run()


def _archives(declaration: Declaration, root: Root, opened: contextlib.ExitStack) -> dict[str, Verified]:
    """Every declared archive read and checked whole, by its path; DeclarationRefused naming each
    one refused (a digest that differs, a hostile member), before anything changes."""
    archives, problems = {}, []
    for index, resource in enumerate(declaration.resources):
        if not isinstance(resource, Archive):
            continue
        where = f"resources[{index}]" + (f" ({resource.id})" if resource.id else "")
        try:
            source = root.real(PurePosixPath(resource.source))
            archives[resource.path] = opened.enter_context(verified(source, resource.sha256, resource.mode))
        except (ArchiveRefused, RootError) as err:
            problems.append(f"{where}.source: {err}")
            continue
        problems.extend(_members_declared(declaration, where, resource, archives[resource.path]))
    if problems:
        raise DeclarationRefused(declaration.source, tuple(problems))
    return archives


def _members_declared(declaration: Declaration, where: str, archive: Archive, unpacked: Verified) -> list[str]:
    """A path declared where a member of the archive goes: the two would fight over it."""
    names = {member.name for member in unpacked.members}
    return [
        f"{where}: {resource.path} is declared by {label(index, resource)} and is a member of this archive"
        for index, resource in enumerate(declaration.resources)
        if not isinstance(resource, Service)
        and resource.at.is_relative_to(archive.at)
        and str(resource.at.relative_to(archive.at)) in names
    ]


def _owners(declaration: Declaration, *, dry_run: bool) -> dict[str, Ids]:
    owners = {}
    for index, resource in enumerate(declaration.resources):
        owner = getattr(resource, "owner", None)
        if owner is None or owner in owners:
            continue
        try:
            owners[owner] = resolve(owner)
        except NoSuchOwner as err:
            why = f"{err}; nothing was changed (every owner is looked up before the first step)"
            where = f"{label(index, resource)}.owner"
            raise ApplyFailed(where, _subject(resource), why, Report(dry_run=dry_run)) from None
    return owners


def _subject(resource: Resource) -> str:
    return resource.unit if isinstance(resource, Service) else resource.path


@dataclass
class _Applying:
    declaration: Declaration
    host: Host
    footprint: Footprint
    owners: dict[str, Ids]
    archives: dict[str, Verified]  # by path
    dry_run: bool
    changes: list[Event] = field(default_factory=list)
    notes: list[Event] = field(default_factory=list)
    units_changed: bool = False  # a unit file was written or removed since systemd last reloaded
    units_written: bool = False  # ... at all in this apply (a dry run cannot judge a unit not yet written)
    _where: str = ""
    appearing: set[PurePosixPath] = field(default_factory=set)  # a dry run: folders it would create
    vanishing: set[PurePosixPath] = field(default_factory=set)  # a dry run: what it would remove
    governed: frozenset[PurePosixPath] = frozenset()  # folders declared or owned as it began (see _linked_folder)
    moving: dict[PurePosixPath, PurePosixPath] = field(default_factory=dict)  # a dry run: moved, new -> old path

    def __post_init__(self) -> None:
        declared = {folder.at for folder in self.declaration.folders}
        owned = {PurePosixPath(o.path) for o in self.footprint.owned if isinstance(o, OwnedDirectory | OwnedArchive)}
        self.governed = frozenset(declared | owned)

    @property
    def root(self) -> Root:
        return self.host.root

    @property
    def systemctl(self) -> Systemctl:
        return Systemctl(self.host.runner)

    def run(self) -> Report:
        declared: set[tuple[str, str]] = {(r.type, r.path) for r in self.declaration.paths.values()}
        declared |= {("service", unit) for unit in self.declaration.units}
        named = {(r.type, r.id) for r in self.declaration.paths.values() if r.id is not None}
        for owned in reversed(self.footprint.owned):
            if owned.key not in declared and (owned.key[0], owned.id) not in named:  # named: moved, not removed
                self._step(NO_LONGER_DECLARED, owned.key[1], partial(self._remove, owned))
        for index, resource in enumerate(self.declaration.resources):
            self._step(label(index, resource), _subject(resource), partial(self._converge, resource))
        return self._report()

    def _report(self) -> Report:
        return Report(tuple(self.changes), tuple(self.notes), self.dry_run)

    def _step(self, where: str, subject: str, step: Callable[[], None]) -> None:
        self._where = where
        try:
            step()
        except (_StepFailed, ServiceFailed, RootError, NoSuchOwner, UnpackFailed) as err:
            raise ApplyFailed(where, subject, str(err), self._report()) from None
        except StateError as err:
            raise ApplyFailed(where, subject, f"recording it failed: {err}", self._report()) from None
        except OSError as err:
            said = err.strerror or str(err)
            raise ApplyFailed(
                where, subject, f"{said}: {err.filename}" if err.filename else said, self._report()
            ) from None

    def _change(self, subject: object, what: str) -> None:
        self.changes.append(Event(self._where, str(subject), f"would be {what}" if self.dry_run else what))

    def _note(self, subject: object, what: str) -> None:
        self.notes.append(Event(self._where, str(subject), what))

    def _record(self, owned: AnyOwned) -> None:
        self._keep(self.footprint.keeping(owned))

    def _forget(self, key: tuple[str, str]) -> None:
        self._keep(self.footprint.forgetting(key))

    def _keep(self, footprint: Footprint) -> None:
        if footprint != self.footprint:
            self.footprint = footprint
            if not self.dry_run:
                save(self.host.state, footprint)

    def _converge(self, resource: Resource) -> None:
        if isinstance(resource, Directory):
            self._directory(resource)
        elif isinstance(resource, File):
            self._file(resource)
        elif isinstance(resource, Archive):
            self._archive(resource)
        else:
            self._service(resource)

    # directories

    def _directory(self, directory: Directory) -> None:
        self._no_link_among_folders(directory.at)
        self._moved(directory)
        with self._folder_of(self._found(directory.at)) as (folder, name):
            now = _stat(folder, name)
            entry = self.footprint.entry(("directory", directory.path))
            created = entry.created if isinstance(entry, OwnedDirectory) else now is None
            self._folder(directory, folder, now)
        self._record(_owned_directory(directory, created=created))
        if directory.unknown == "move-out" and not (self.dry_run and (now is None or directory.at in self.moving)):
            self._move_out(directory)

    def _folder(self, folder: Folder, parent: int | None, now: os.stat_result | None) -> None:
        """A directory, or an archive's folder, in `parent`: made, or its mode and owner returned."""
        ids = self._ids(folder)
        if now is None:
            self._create_directory(folder, parent, ids)
        else:
            assert parent is not None  # something stands in it
            _must_be(folder.at, now, stat.S_ISDIR, "directory")
            self._settle(folder.at, parent, now, folder.mode, ids)

    def _create_directory(self, directory: Folder, folder: int | None, ids: Ids | None) -> None:
        self._folder_exists(directory.at)
        said = f"created ({directory.mode:04o} {ids or 'as the host'})"
        if self.dry_run or folder is None:
            self.appearing.add(directory.at)
        else:
            safe_fs.make_folder(folder, directory.at.name, 0o700)
            self._record(_owned_folder(directory, created=True))
            try:
                self._attributes(folder, directory.at.name, directory.mode, ids, is_folder=True)
            except BaseException:
                self._change(directory.at, "created (mode 0700: its owner and mode could not be set)")
                raise
        self._change(directory.at, said)

    def _move_out(self, directory: Folder) -> None:
        assert directory.module is not None  # the declaration requires it with move-out
        folder = moved_folder(self.host.home, directory.module)
        top = self._top(directory.at)
        if self.dry_run:
            for stray in strays(self.root, directory.at, self._kept(), top, self._member_folders()):
                self._change(stray, f"moved out to {destination(self.root, stray, folder)}")
            return

        def said(moved: Moved) -> None:
            self._change(moved.source, f"moved out to {moved.to}")

        move_out(self.root, directory.at, self._kept(), top, folder, into=self._member_folders(), done=said)

    def _kept(self) -> set[PurePosixPath]:
        """What a folder's strays never include: what is declared, owned, known, or the host's own."""
        kept = set(self.declaration.paths) | {
            PurePosixPath(o.key[1]) for o in self.footprint.owned if o.key[0] != "service"
        }
        for resource in self.declaration.folders:
            kept.update(resource.known)
        kept.update(self._members(folders=False))
        kept.add(self.host.home / MOVED_IN_HOME)
        with contextlib.suppress(ValueError):
            kept.add(PurePosixPath("/") / self.host.state.relative_to(self.root.base))
        return kept

    def _members(self, *, folders: bool) -> set[PurePosixPath]:
        """The archives' members (as unpacked now, and as recorded), their folders or the rest."""
        listed = [(o.path, o.members) for o in self.footprint.owned if isinstance(o, OwnedArchive)]
        listed += [(path, archive.members) for path, archive in self.archives.items()]
        return {
            PurePosixPath(path) / member.name
            for path, members in listed
            for member in members
            if (member.kind == "directory") == folders
        }

    def _member_folders(self) -> set[PurePosixPath]:
        return self._members(folders=True)

    # files

    def _file(self, file: File) -> None:
        self._no_link_among_folders(file.at)
        self._moved(file)
        with self._folder_of(self._found(file.at)) as (folder, name):
            now = _stat(folder, name)
            entry = self.footprint.entry(("file", file.path))
            created = entry.created if isinstance(entry, OwnedFile) else now is None
            ids = self._ids(file)
            if now is None:
                self._folder_exists(file.at)
                self._write(file, folder, ids or _host_ids())
                self._change(file.at, f"created ({len(file.data)} bytes, {file.mode:04o} {ids or 'as the host'})")
            else:
                assert folder is not None  # something stands in it
                _must_be(file.at, now, stat.S_ISREG, "file")
                if _content_differs(folder, name, file.data):
                    self._write(file, folder, ids or Ids(now.st_uid, now.st_gid))
                    self._change(file.at, f"rewritten ({len(file.data)} bytes declared)")
                    self._say(file.at, _differences(now, file.mode, ids))
                else:
                    self._settle(file.at, folder, now, file.mode, ids)
        self._record(_owned_file(file, created=created))

    def _write(self, file: File, folder: int | None, ids: Ids) -> None:
        self._unit_file_changes(file.at)
        if not self.dry_run and folder is not None:
            _write_atomically(folder, file.at.name, file.data, file.mode, ids)

    # archives

    def _archive(self, archive: Archive) -> None:
        self._no_link_among_folders(archive.at)
        self._moved(archive)
        with self._folder_of(self._found(archive.at)) as (folder, name):
            now = _stat(folder, name)
            entry = self.footprint.entry(("archive", archive.path))
            created = entry.created if isinstance(entry, OwnedArchive) else now is None
            before = entry.members if isinstance(entry, OwnedArchive) else ()
            self._folder(archive, folder, now)
            unpacked = self.archives[archive.path]
            if self.dry_run and now is None:
                said = f"unpacked ({len(unpacked.members)} members, {unpacked.size} bytes of files)"
                self._change(archive.at, said)
            else:
                record = partial(self._record_archive, archive, created)
                unpack(self._tree(archive.at, folder, name), unpacked, before, self._ids(archive), record)
        if archive.unknown == "move-out" and not (self.dry_run and (now is None or archive.at in self.moving)):
            self._move_out(archive)

    def _record_archive(self, archive: Archive, created: bool, members: tuple[Member, ...]) -> None:
        self._record(_owned_archive(archive, created=created, members=members))

    def _tree(self, at: PurePosixPath, folder: int | None, name: str) -> Tree:
        def change(member: str, what: str) -> None:
            self._change(at / member if member else at, what)

        def note(member: str, what: str) -> None:
            self._note(at / member if member else at, what)

        return Tree(folder, name, self.dry_run, change, note)

    def _remove_archive(self, owned: OwnedArchive, path: PurePosixPath) -> None:
        with self._folder_of(path) as (folder, name):
            now = _stat(folder, name)
            if folder is None or now is None or not stat.S_ISDIR(now.st_mode):
                said = "already gone: forgotten" if now is None else f"released: {kind(now)} stands there now"
                self._note(path, said)
                self._forget(owned.key)
                return
            tree = self._tree(path, folder, name)
            kept = remove(tree, owned.members)
        self.vanishing.update(path / member for member in tree.vanishing)
        if not owned.created:
            self._note(path, "released: left as it is, it was there before the host")
            self._forget(owned.key)
            return
        self._remove_directory(owned.model_copy(update={"members": kept}), path)

    # a resource moved: its id declared at another path

    def _moved(self, resource: PathResource) -> None:
        """Moves the resource, whole, from where the footprint has it under the same id."""
        entry = None if resource.id is None else self.footprint.named(resource.type, resource.id)
        if entry is None or entry.key == (resource.type, resource.path):
            return
        old = PurePosixPath(entry.key[1])
        self._no_link_among_folders(old)
        with (
            self._folder_of(self._found(old)) as (old_folder, old_name),
            self._folder_of(self._found(resource.at)) as (new_folder, new_name),
        ):
            there = None if self._vanished(old) else _stat(old_folder, old_name)
            if there is not None and _stat(new_folder, new_name) is not None:
                raise _StepFailed(
                    f"{resource.id} was at {self.root.under(old)}, and something stands at both paths: "
                    "the host does not choose between them (remove one)"
                )
            if there is not None:
                self._move(resource.at, old, (old_folder, old_name), (new_folder, new_name))
        moved = entry.model_copy(update={"path": resource.path})
        key = (resource.type, resource.path)
        found = self.footprint.entry(key)
        self._keep(self.footprint.forgetting(entry.key) if found else self.footprint.replacing(entry.key, moved))

    def _move(
        self, at: PurePosixPath, old: PurePosixPath, source: tuple[int | None, str], target: tuple[int | None, str]
    ) -> None:
        """Renames what stands at `old` to `at`, each named in the folder held (a link as a link)."""
        self._folder_exists(at)
        self._change(at, f"moved from {old}")
        self.vanishing.add(old)
        if self.dry_run:
            self.moving[at] = old
            self.appearing.add(at)
            return
        (old_folder, old_name), (new_folder, new_name) = source, target
        assert old_folder is not None and new_folder is not None  # something stands at old; at's folder exists
        safe_fs.rename(old_folder, old_name, new_folder, new_name)

    def _found(self, path: PurePosixPath) -> PurePosixPath:
        """Where `path` is found now: in a dry run, a path moved (or inside one) is still at its old place."""
        for new in (path, *path.parents):
            if new in self.moving:
                return self.moving[new] / path.relative_to(new)
        return path

    def _vanished(self, path: PurePosixPath) -> bool:
        return any(gone in self.vanishing for gone in (path, *path.parents))

    # services

    def _service(self, service: Service) -> None:
        if not self.host.applies_services:
            self._note(
                service.unit, f"skipped: services are applied on the real machine, not under --root {self.root.base}"
            )
            return
        if self.units_changed:
            self._change("systemd", "reloaded (daemon-reload: a unit file changed)")
            if not self.dry_run:
                self.systemctl.reload()
            self.units_changed = False
        state = self.systemctl.state(service.unit)
        if self.dry_run and not state.exists and self.units_written:
            self._note(service.unit, "judged once its unit file is written: made as declared then")
            return
        if state.need_reload and not self.dry_run:
            self.systemctl.reload()
            state = self.systemctl.state(service.unit)
        running = service.state == "running"
        verbs = verbs_toward(service.unit, state, running=running, enabled=service.enabled)
        for verb in verbs:
            self._change(service.unit, _DONE[verb])
            if not self.dry_run:
                self.systemctl.act(verb, service.unit)
        if verbs and not self.dry_run:
            self._verify(service)
        entry = self.footprint.entry(("service", service.unit))
        before = entry.before if isinstance(entry, OwnedService) else state.before
        enabled = service.enabled
        if enabled is None and isinstance(entry, OwnedService):
            enabled = entry.enabled  # declared before: what the host changed is still returned once undeclared
        self._record(
            OwnedService(id=service.id, unit=service.unit, state=service.state, enabled=enabled, before=before)
        )

    def _verify(self, service: Service) -> None:
        state = self.systemctl.state(service.unit)
        if verbs_toward(service.unit, state, running=service.state == "running", enabled=service.enabled):
            raise ServiceFailed(service.unit, f"systemctl did as asked, yet it is {state.said()}")

    # what is no longer declared

    def _remove(self, owned: AnyOwned) -> None:
        if isinstance(owned, OwnedService):
            self._remove_service(owned)
            return
        path = PurePosixPath(owned.path)
        knower = self._knower(path)
        linked = self._linked_folder(path)
        if knower is not None:
            self._note(path, f"released: left in place, {knower} knows it")
        elif linked is not None:
            self._note(path, f"released: a symbolic link stands at its folder {linked}: {FOLLOWS_NO_LINK}")
        elif not owned.created:
            self._note(path, "released: left as it is, it was there before the host")
        elif isinstance(owned, OwnedFile):
            self._remove_file(path, owned.sha256)
        elif isinstance(owned, OwnedArchive):
            self._remove_archive(owned, path)
            return
        else:
            self._remove_directory(owned, path)
            return
        self._forget(owned.key)

    def _knower(self, path: PurePosixPath) -> str | None:
        for index, resource in enumerate(self.declaration.resources):
            if isinstance(resource, Directory | Archive) and any(
                path.is_relative_to(known) for known in resource.known
            ):
                return f"{label(index, resource)} ({resource.path})"
        return None

    def _remove_file(self, path: PurePosixPath, sha256: str) -> None:
        with self._folder_of(path) as (folder, name):
            now = _stat(folder, name)
            if folder is None or now is None:
                self._note(path, "already gone: forgotten")
            elif not stat.S_ISREG(now.st_mode):
                self._note(path, f"released: {kind(now)} stands there now, not the file the host wrote")
            elif now.st_size > MAX_CONTENT_BYTES or _digest(folder, name) != sha256:  # larger than any it writes
                # edited since: not the host's to delete
                self._note(path, "released: left in place, its content is no longer what the host wrote")
            else:
                self._change(path, "removed")
                self._unit_file_changes(path)
                self.vanishing.add(path)
                if not self.dry_run:
                    safe_fs.remove_file(folder, name)  # what was judged in the folder held: a link is unlinked

    def _remove_directory(self, owned: OwnedDirectory | OwnedArchive, path: PurePosixPath) -> None:
        with self._folder_of(path) as (folder, name):
            now = _stat(folder, name)
            if folder is None or now is None or not stat.S_ISDIR(now.st_mode):
                said = "already gone: forgotten" if now is None else f"released: {kind(now)} stands there now"
                self._note(path, said)
                self._forget(owned.key)
                return
            with closing(safe_fs.open_child(folder, name)) as inner:
                held = [entry for entry, _ in safe_fs.listing(inner) if path / entry not in self.vanishing]
            if held:
                shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
                self._note(path, f"kept: it holds what is not the host's ({shown}); removed once empty")
                self._record(owned.model_copy(update={"declared": False}))
                return
            self._change(path, "removed")
            self.vanishing.add(path)
            if not self.dry_run:
                safe_fs.remove_folder(folder, name)
        self._forget(owned.key)

    def _remove_service(self, owned: OwnedService) -> None:
        if not self.host.applies_services:
            self._note(owned.unit, "skipped: services are returned on the real machine, not under --root")
            self._record(owned.model_copy(update={"declared": False}))
            return
        state = self.systemctl.state(owned.unit)
        for verb in verbs_back(state, owned.before, enablement=owned.enabled is not None):
            self._change(owned.unit, f"{_DONE[verb]} (as the host found it)")
            if not self.dry_run:
                self.systemctl.act(verb, owned.unit)
        if not state.exists:
            self._note(owned.unit, f"its unit is gone ({state.said()}): forgotten")
        self._forget(owned.key)

    # shared

    def _unit_file_changes(self, path: PurePosixPath) -> None:
        if path.parent in UNIT_FOLDERS:
            self.units_changed = self.units_written = True

    def _no_link_among_folders(self, path: PurePosixPath) -> None:
        linked = self._linked_folder(path)
        if linked is not None:
            raise _StepFailed(f"a symbolic link stands at its folder {self.root.under(linked)}: {FOLLOWS_NO_LINK}")

    def _top(self, path: PurePosixPath) -> PurePosixPath | None:
        """The outermost directory the host declares or owns that holds `path` or is it: from there
        down, no link is followed."""
        tops = [folder for folder in (*reversed(path.parents), path) if folder in self.governed]
        return tops[0] if tops else None

    @contextlib.contextmanager
    def _folder_of(self, path: PurePosixPath) -> Iterator[tuple[int | None, str]]:
        """A descriptor of `path`'s folder (None when it does not exist) and `path`'s name in it."""
        try:
            folder = self.root.open_folder(path.parent, self._top(path.parent))
        except FileNotFoundError:
            yield None, path.name
            return
        with closing(folder):
            yield folder, path.name

    def _linked_folder(self, path: PurePosixPath) -> PurePosixPath | None:
        """The first of `path`'s folders, from the outermost directory the host declares or owns down,
        that is a link: one planted there (by a module writing in its folder) would lead the host's
        writes and removals elsewhere. Links above it (`/lib -> usr/lib`) are the machine's, followed."""
        tops = [folder for folder in path.parents if folder in self.governed]
        if not tops:
            return None
        for folder in reversed(path.parents):
            if folder.is_relative_to(tops[-1]) and _is_link(self.root.real(folder)):
                return folder
        return None

    def _ids(self, resource: PathResource) -> Ids | None:
        return None if resource.owner is None else self.owners[resource.owner]

    def _folder_exists(self, path: PurePosixPath) -> None:
        folder = path.parent
        if folder in self.appearing or (self.root.folder(folder).is_dir() and folder not in self.vanishing):
            return
        raise _StepFailed(f"its folder {self.root.under(folder)} does not exist: declare it as a directory before")

    def _settle(self, path: PurePosixPath, folder: int, now: os.stat_result, mode: int, ids: Ids | None) -> None:
        """Returns the owner and mode of `path` (in `folder`) to what is declared, saying what differed."""
        differences = _differences(now, mode, ids)
        if differences and not self.dry_run:
            self._attributes(folder, path.name, mode, ids, is_folder=stat.S_ISDIR(now.st_mode))
        self._say(path, differences)

    def _say(self, path: PurePosixPath, differences: list[str]) -> None:
        for difference in differences:
            self._change(path, difference)

    @staticmethod
    def _attributes(folder: int, name: str, mode: int, ids: Ids | None, *, is_folder: bool) -> None:
        """Sets them on what is at `name` in `folder` through a descriptor opened without following a
        link: one swapped in since it was looked at (by a module writing in the folder) is refused."""
        owner = None if ids is None else (ids.uid, ids.gid)
        with _giving(ids):
            safe_fs.set_attributes(folder, name, mode, owner, folder=is_folder)


def _differences(now: os.stat_result, mode: int, ids: Ids | None) -> list[str]:
    """How the owner and mode of what is there differ from what is declared, as a report says it."""
    said = []
    if ids is not None and (now.st_uid, now.st_gid) != (ids.uid, ids.gid):
        said.append(f"owner {Ids(now.st_uid, now.st_gid)} -> {ids}")
    if stat.S_IMODE(now.st_mode) != mode:
        said.append(f"mode {stat.S_IMODE(now.st_mode):04o} -> {mode:04o}")
    return said


def _owned_folder(folder: Folder, *, created: bool) -> OwnedDirectory | OwnedArchive:
    if isinstance(folder, Directory):
        return _owned_directory(folder, created=created)
    return _owned_archive(folder, created=created, members=())


def _owned_archive(archive: Archive, *, created: bool, members: tuple[Member, ...]) -> OwnedArchive:
    return OwnedArchive(
        id=archive.id,
        path=archive.path,
        created=created,
        mode=archive.mode,
        owner=archive.owner,
        unknown=archive.unknown,
        module=archive.module,
        knows=tuple(archive.knows),
        source=archive.source,
        sha256=archive.sha256,
        members=members,
    )


def _owned_directory(directory: Directory, *, created: bool) -> OwnedDirectory:
    return OwnedDirectory(
        id=directory.id,
        path=directory.path,
        created=created,
        mode=directory.mode,
        owner=directory.owner,
        unknown=directory.unknown,
        module=directory.module,
        knows=tuple(directory.knows),
    )


def _owned_file(file: File, *, created: bool) -> OwnedFile:
    digest = hashlib.sha256(file.data).hexdigest()
    return OwnedFile(id=file.id, path=file.path, created=created, mode=file.mode, owner=file.owner, sha256=digest)


def _host_ids() -> Ids:
    return Ids(os.geteuid(), os.getegid())


def _stat(folder: int | None, name: str) -> os.stat_result | None:
    return None if folder is None else safe_fs.stat_at(folder, name)


def _is_link(real: Path) -> bool:
    try:
        return stat.S_ISLNK(real.lstat().st_mode)
    except FileNotFoundError:
        return False


def _must_be(path: PurePosixPath, now: os.stat_result, test: Callable[[int], bool], expected: str) -> None:
    if test(now.st_mode):
        return
    if stat.S_ISLNK(now.st_mode):
        raise _StepFailed(f"a symbolic link stands where the {expected} goes: {FOLLOWS_NO_LINK}")
    raise _StepFailed(f"{kind(now)} stands where the {expected} goes")


def _content_differs(folder: int, name: str, data: bytes) -> bool:
    return safe_fs.read_at(folder, name, len(data) + 1) != data


def _digest(folder: int, name: str) -> str:
    return safe_fs.digest_at(folder, name)


def _write_atomically(folder: int, name: str, data: bytes, mode: int, ids: Ids) -> None:
    """Writes a new file beside `name` with its content, owner and mode, flushed, then renames it over."""
    owner = None if (ids.uid, ids.gid) == (os.geteuid(), os.getegid()) else (ids.uid, ids.gid)
    with _giving(ids):
        safe_fs.write_at(folder, name, data, mode, owner)


@contextlib.contextmanager
def _giving(ids: Ids | None) -> Iterator[None]:
    """Says why a chown was refused: giving a file away takes root (or the group's member, for a group)."""
    try:
        yield
    except PermissionError as err:
        if ids is None or err.errno != errno.EPERM:  # EACCES: the folder's, not the giving
            raise
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}, not root"
        raise _StepFailed(f"cannot give it to {ids}: {err.strerror} (the host runs as {who})") from None
