"""What issuing the sites again would change, compared as data: the part of `grants --check` that
reads `sites.json` (`registry.access.sites.file`) before and after.

A site is known by its name: added, removed, or changed (its JetStream domain, its nodes gained
and lost, its seat's key, and each leaf link's user key, the account it binds to at the hub and
its permitted subjects, widened or narrowed, by direction). The hub's domain, URLs and listen
address are compared as values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from registry.access.sites.file import HubFileEntry, LinkEntry, PermitEntry, SiteFileEntry, SitesFile


@dataclass(frozen=True)
class SitesPlan:
    """The changes, one line each as `--check` prints them (`+` added, `-` removed, `~` changed)."""

    changes: tuple[str, ...] = ()

    @property
    def unchanged(self) -> bool:
        return not self.changes

    def summary(self) -> str:
        return "sites: nothing would change" if self.unchanged else f"sites: {len(self.changes)} changes"


def plan_sites(before: SitesFile | None, after: SitesFile | None) -> SitesPlan:
    """What issuing `after` changes over `before` (`None`: no sites there)."""
    old = {site.name: site for site in before.sites} if before is not None else {}
    new = {site.name: site for site in after.sites} if after is not None else {}
    changes = [*_hub_changes(before, after)]
    changes += [f"+ site {name}: {_nodes(new[name].nodes)}" for name in sorted(new.keys() - old.keys())]
    changes += [f"- site {name}" for name in sorted(old.keys() - new.keys())]
    for name in sorted(old.keys() & new.keys()):
        changes += _site_changes(old[name], new[name])
    return SitesPlan(tuple(changes))


def _hub_changes(before: SitesFile | None, after: SitesFile | None) -> list[str]:
    if before is None or after is None or before.hub == after.hub:
        return []
    return [f"~ hub: {_fields_changed(before.hub, after.hub)}"]


def _fields_changed(before: HubFileEntry, after: HubFileEntry) -> str:
    return ", ".join(
        f"{name} {getattr(before, name)} -> {getattr(after, name)}"
        for name in type(before).model_fields
        if getattr(before, name) != getattr(after, name)
    )


def _site_changes(before: SiteFileEntry, after: SiteFileEntry) -> list[str]:
    said: list[str] = []
    if before.domain != after.domain:
        said.append(f"domain {before.domain} -> {after.domain}")
    said += [f"+ node {node}" for node in after.nodes if node not in before.nodes]
    said += [f"- node {node}" for node in before.nodes if node not in after.nodes]
    if before.seat_key != after.seat_key:
        said.append("seat key changed")
    lines = [f"~ site {after.name}: {', '.join(said)}"] if said else []
    old = {link.label: link for link in before.links}
    new = {link.label: link for link in after.links}
    lines += [f"+ site {after.name} link {label}" for label in sorted(new.keys() - old.keys())]
    lines += [f"- site {after.name} link {label}" for label in sorted(old.keys() - new.keys())]
    lines += [
        f"~ site {after.name} link {label}: {how}"
        for label in sorted(old.keys() & new.keys())
        if (how := _link_changed(old[label], new[label]))
    ]
    return lines


def _link_changed(before: LinkEntry, after: LinkEntry) -> str:
    said = ["user key changed"] if before.user_key != after.user_key else []
    if before.hub_account != after.hub_account:
        said.append(f"bound at the hub to {after.hub_account} (was {before.hub_account or 'the same account'})")
    for direction, earlier, later in (
        ("publish", before.publish, after.publish),
        ("subscribe", before.subscribe, after.subscribe),
    ):
        was, now = _subjects(earlier), _subjects(later)
        widened = [s for s in now if s not in was]
        narrowed = [s for s in was if s not in now]
        if widened:
            said.append(f"{direction} widened: + {', + '.join(widened)}")
        if narrowed:
            said.append(f"{direction} narrowed: - {', - '.join(narrowed)}")
    return "; ".join(said)


def _subjects(permits: Iterable[PermitEntry]) -> list[str]:
    return [permit.subject for permit in permits]


def _nodes(nodes: Iterable[str]) -> str:
    listed = list(nodes)
    return f"{len(listed)} node{'s' if len(listed) != 1 else ''} ({', '.join(listed)})"
