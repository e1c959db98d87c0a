"""`status`, read like `systemctl status`: the node's client, then each module's state and file.

The header says whether a client runs for the node (its lease: held by host and pid since when,
renewed how long ago, or not running), the settings file and the env folder used. Then, per
module, what `applied` says (applied or pending and why, since when, the change action's last
outcome) and whether its env file is as applied: in place, drifted, missing or none written yet,
judged by the node's keyed digest (`envfile`), never by printing a value. Writes the bus refused
at the last reconcile (a full bucket, say) are read from the client's own record in the env folder
(`resolving.own`): which bucket refused and the server's answer, also when applied itself refused the
records, so that what applied holds is older than that reconcile.

Writes that wait for the hub (a node at a site whose link is cut, `resolving.own`) are read from the
client's record of them: since when, how the client knows (the write and its answer: `NoResponders`,
timed out) and which records are not yet written there. The verb that lists the applied records
is answered at the site by its seat, from the site's copies, where no waiting record is yet: those
take their place, and status says so. When the verb does not answer (the site's seat stopped while
writes wait), the records are read from the site's copy, one direct get per module the env
folder's ledger names, with those waiting in their place. The lease then reads as last renewed
before the cut, so the client is said to be renewing it in vain, not to be stopped.

Status only reads: no lease taken, no write, no key made where there is none. On a terminal the
state marks are coloured (rich); anywhere else the same lines are plain text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from provisioner_client.errors import MaterializeError
from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.resolving.own import LEASE, Part, Refusals, Waiting, link_down, read_refusals, read_waiting
from provisioner_client.resolving.scope import NodeScope
from registry.command_line import timestamp_of
from registry.contract import AppliedValue, JsonRefused, buckets, read_json
from registry.errors import BusError, RegistryError
from registry.runtime import json_text
from registry.wire import SKEW, Bus, Holder, KvItem, get_direct, get_stamped, node_key

FileState = Literal["in place", "drifted", "missing", "none", "unknown"]
Mark = Literal["ok", "pending", "bad"]


@dataclass(frozen=True)
class ClientLease:
    """What the node's lease says of its client; `holder` None when there is none or it cannot be read."""

    holder: Holder | None = None
    renewed_ago: timedelta | None = None
    unreadable: bool = False
    waiting: Part | None = None  # the client's renewals wait for the hub: since when, how known

    @property
    def running(self) -> bool:
        if self.holder is None or self.renewed_ago is None:
            return False
        return self.renewed_ago <= timedelta(seconds=self.holder.ttl_seconds) + SKEW

    def describe(self, node: str) -> str:
        if self.unreadable:
            return "unknown (its lease record cannot be read)"
        if self.holder is None or self.renewed_ago is None:
            return f"not running (no client holds the lease of node {node})"
        ago = f"{self.renewed_ago.total_seconds():.0f} s ago"
        if self.waiting is not None:
            wait = self.waiting
            return (
                f"held by {self.holder.describe()}, its lease last renewed {ago} at the hub; "
                f"its renewals have waited for the hub since {timestamp_of(wait.since)} (see Stale)"
            )
        if self.running:
            return f"running on {self.holder.describe()} (lease renewed {ago})"
        return f"not running (last held by {self.holder.describe()}; lease last renewed {ago})"

    def as_json(self) -> dict[str, object]:
        holder = self.holder.model_dump(mode="json") if self.holder is not None else None
        ago = self.renewed_ago.total_seconds() if self.renewed_ago is not None else None
        wait = self.waiting.as_json() if self.waiting is not None else None
        return {
            "running": self.running,
            "holder": holder,
            "renewed_seconds_ago": ago,
            "unreadable": self.unreadable,
            "renewals_waiting": wait,
        }


@dataclass(frozen=True)
class ModuleStatus:
    module: str
    applied: AppliedValue
    on_disk: str | None
    expected_path: Path | None = None
    unjudged: str | None = None  # why the file could not be judged (the env folder unreadable to this user)
    in_place: bool = False  # as written: `EnvFolder.intact`, the judge of reconcile and the drift watch

    @property
    def since(self) -> str | None:
        """When the applied record last changed (`changed_at`; records written before it have none)."""
        return self.applied.changed_at

    @property
    def file_state(self) -> FileState:
        if self.applied.digest is None:
            return "none"
        if self.unjudged is not None:
            return "unknown"
        if self.in_place:
            return "in place"
        return "missing" if self.on_disk is None else "drifted"

    @property
    def drifted(self) -> bool:
        return self.file_state in ("drifted", "missing")

    @property
    def action_failed(self) -> bool:
        """The last change action did not succeed: it is not run again for the same file."""
        return self.applied.action is not None and not self.applied.action.ok

    @property
    def ok(self) -> bool:
        """Applied, its file judged in place, its last change action succeeded."""
        in_place = self.file_state == "in place"
        return self.applied.state == "applied" and in_place and not self.action_failed

    @property
    def mark(self) -> Mark:
        return "ok" if self.ok else "bad" if self.drifted or self.action_failed else "pending"

    def as_json(self) -> dict[str, object]:
        facts = {
            "on_disk": self.on_disk,
            "drifted": self.drifted,
            "file_state": self.file_state,
            "since": self.since,
            "ok": self.ok,
        }
        return {**self.applied.model_dump(mode="json"), **facts}


@dataclass(frozen=True)
class NodeStatus:
    node: str
    modules: dict[str, ModuleStatus]
    unreadable: dict[str, str]
    client: ClientLease = field(default_factory=ClientLease)
    settings_file: Path | None = None
    materialize: Path | None = None
    refused: Refusals | None = None  # writes the bus refused at the last reconcile
    refused_unknown: str | None = None  # why the client's record of refused writes cannot be read
    waiting: Waiting | None = None  # writes that wait for the hub (a site's link down)
    waiting_unknown: str | None = None  # why the client's record of waiting writes cannot be read
    read_at_site: str | None = None  # why the applied records were read at the site, not listed by the verb

    @property
    def stale(self) -> bool:
        """What the hub holds of this node is older than what it did: writes wait for it."""
        return self.waiting is not None or self.waiting_unknown is not None

    @property
    def ok(self) -> bool:
        """Every module applied, its file on disk as recorded and its last change action succeeded,
        and no write refused: a drifted or missing file is not ok (watch mode or the next reconcile
        puts it back), nor a failed action (the service may not run what the file holds), nor a
        full bucket (what is recorded may be older than the manifests), so the exit code tells a script."""
        if self.unreadable or self.refused is not None or self.refused_unknown is not None or self.stale:
            return False
        return all(m.ok for m in self.modules.values())

    @property
    def unrecorded(self) -> bool:
        """The last reconcile's applied records were refused: applied holds older ones, or none."""
        return self.refused is not None and buckets.APPLIED.name in self.refused.buckets

    @property
    def mark(self) -> Mark:
        if self.ok:
            return "ok"
        bad = self.unreadable or self.refused is not None or any(m.mark == "bad" for m in self.modules.values())
        return "bad" if bad else "pending"

    def as_json(self, *, to_terminal: bool = False) -> str:
        """The status as JSON: ASCII alone for a terminal (`registry.runtime.json_text`)."""
        document = {
            "node": self.node,
            "ok": self.ok,
            "client": self.client.as_json(),
            "settings_file": str(self.settings_file) if self.settings_file else None,
            "materialize": str(self.materialize) if self.materialize else None,
            "modules": {name: status.as_json() for name, status in sorted(self.modules.items())},
            "unreadable": self.unreadable,
            "refused": self.refused.as_json() if self.refused is not None else None,
            "refused_unknown": self.refused_unknown,
            "waiting": self.waiting.as_json() if self.waiting is not None else None,
            "waiting_unknown": self.waiting_unknown,
            "read_at_site": self.read_at_site,
        }
        return json_text(document, indent=2, to_terminal=to_terminal)

    def counts(self) -> str:
        """How many modules, applied, pending, drifted, unjudged, failed and unreadable, said in words."""
        modules = self.modules.values()
        applied = sum(m.applied.state == "applied" for m in modules)
        pending, drifted = len(self.modules) - applied, sum(m.drifted for m in modules)
        said = [f"{len(self.modules)} modules", f"{applied} applied"]
        said += [f"{pending} pending"] if pending else []
        said += [f"{drifted} files drifted or missing"] if drifted else []
        unjudged = sum(m.file_state == "unknown" for m in modules)
        said += [f"{unjudged} files not judged"] if unjudged else []
        failed = sum(m.action_failed for m in modules)
        said += [f"{failed} change actions failed"] if failed else []
        said += [f"{len(self.unreadable)} records unreadable"] if self.unreadable else []
        said += [f"writes refused by {', '.join(sorted(self.refused.buckets))}"] if self.refused else []
        said += [f"writes to the hub waiting since {timestamp_of(self.waiting.since)}"] if self.waiting else []
        return ", ".join(said)


async def read_status(bus: Bus, node: str, materialize: Path, *, settings_file: Path | None = None) -> NodeStatus:
    folder = EnvFolder(materialize)
    modules: dict[str, ModuleStatus] = {}
    unreadable: dict[str, str] = {}
    waits, waits_unknown = _waiting(materialize, node)
    items, read_at_site = await _applied_items(bus, node, folder, waits)
    for item in items:
        if item.deleted:
            continue
        try:
            module = buckets.APPLIED.shape.parse(item.key)["module"]
            applied = AppliedValue.model_validate(read_json(item.value))
        except RegistryError as err:
            unreadable[item.key] = str(err)
            continue
        except JsonRefused as err:
            unreadable[item.key] = f"not an applied value: {err.reason}"
            continue
        except ValidationError as err:
            unreadable[item.key] = f"not an applied value: {err.errors()[0]['msg']}"
            continue
        modules[module] = _judged(folder, module, applied)
    client = await read_client(bus, node)
    if waits is not None and LEASE in waits.parts:
        client = replace(client, waiting=waits.parts[LEASE])
    refused, unknown = _refusals(materialize, node)
    return NodeStatus(
        node,
        modules,
        unreadable,
        client,
        settings_file,
        materialize,
        refused,
        unknown,
        waiting=waits,
        waiting_unknown=waits_unknown,
        read_at_site=read_at_site,
    )


def _waiting(materialize: Path, node: str) -> tuple[Waiting | None, str | None]:
    """The writes that wait for the hub, or why the client's record of them cannot be read."""
    try:
        return read_waiting(materialize, node), None
    except MaterializeError as err:
        return None, str(err)


async def _applied_items(
    bus: Bus, node: str, folder: EnvFolder, waits: Waiting | None
) -> tuple[list[KvItem], str | None]:
    """The node's applied records as the verb lists them (a site's seat, from the site's copies),
    with those of the client's own that wait for the hub in their place (no copy has them yet), and
    why they were read so. When the verb is out of reach while writes wait (the link down, as they
    told), as the site's copy has them; out of reach with no write waiting, it is said as it is
    (the seat down, say): nothing tells the link is."""
    try:
        listed = await NodeScope(node).read(bus, buckets.APPLIED)
    except BusError as err:
        if waits is None or link_down(err) is None:
            raise
        why = f"the verb was asked for them and answered {link_down(err)}"
    else:
        own = waits.applied_records(buckets.APPLIED.name) if waits is not None else {}
        if not own:
            return listed, None
        merged = {item.key: item for item in listed} | {key: KvItem(key, value, 0) for key, value in own.items()}
        return list(merged.values()), f"{len(own)} of the client's own wait for the hub: in place of the verb's answer"
    found: dict[str, KvItem] = {}
    try:
        modules = set(folder.read_ledger().manifests.values())
    except MaterializeError:
        modules = set()
    for module in sorted(modules):
        key = buckets.APPLIED.shape.build(node=node, module=module)
        item = await get_direct(bus, buckets.APPLIED, key)
        if item is not None:
            found[key] = item
    for key, value in (waits.applied_records(buckets.APPLIED.name) if waits is not None else {}).items():
        found[key] = KvItem(key, value, 0)
    return list(found.values()), why


def _refusals(materialize: Path, node: str) -> tuple[Refusals | None, str | None]:
    """The writes the last reconcile found refused, or why the client's record of them cannot be read."""
    try:
        return read_refusals(materialize, node), None
    except MaterializeError as err:
        return None, str(err)


def _judged(folder: EnvFolder, module: str, applied: AppliedValue) -> ModuleStatus:
    """In place only as reconcile and the drift watch judge it (a regular file of mode 0600 with
    the applied digest); else the digest on disk tells drifted from missing."""
    expected = _expected_path(folder, module)
    try:
        if applied.digest is not None and folder.intact(module, applied.digest):
            return ModuleStatus(module, applied, applied.digest, expected, in_place=True)
        on_disk = folder.digest_on_disk(module)
    except MaterializeError as err:  # the digest key or the ledger is not readable by this user
        return ModuleStatus(module, applied, None, expected, unjudged=str(err))
    return ModuleStatus(module, applied, on_disk, expected)


def _expected_path(folder: EnvFolder, module: str) -> Path | None:
    try:
        return folder.path_of(module)
    except MaterializeError:
        return None


async def read_client(bus: Bus, node: str) -> ClientLease:
    """The node's lease as stored: who holds it and how long ago the server stored its last renewal."""
    stamped = await get_stamped(bus, buckets.LEASES, node_key(node))
    if stamped is None or stamped.item.deleted:
        return ClientLease()
    try:
        holder = Holder.model_validate_json(stamped.item.value)
    except ValidationError:
        return ClientLease(unreadable=True)
    return ClientLease(holder, datetime.now(UTC) - stamped.stored_at)
