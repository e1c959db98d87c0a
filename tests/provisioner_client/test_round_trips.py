"""How many requests a reconcile sends, seen by a plain subscriber on the same server: a verb is
asked once per name however many modules use it, a mesh-wide bucket's values are read by one batch,
and a reconcile with nothing changed lists none of the node's keys and asks only stamps."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mesh_dev.standins import SECRET_SUBJECT, StandIns
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.contract import buckets
from registry.wire import Bus, Message


@asynccontextmanager
async def counted(bus: Bus, subjects: dict[str, str]) -> AsyncIterator[Counter[str]]:
    """Requests seen on each subject filter (by name) while the block runs."""
    seen: Counter[str] = Counter()
    subscriptions = []
    for name, subject in subjects.items():

        async def count(msg: Message, name: str = name) -> None:
            seen[f"{name} stamp" if msg.subject.endswith(".>") else name] += 1

        subscriptions.append(await bus.subscribe(subject, count))
    try:
        yield seen
    finally:
        await bus.flush()
        for subscription in subscriptions:
            await subscription.unsubscribe()


def with_secret_users(plan: ClientPlan, count: int) -> None:
    for index in range(count):
        document = {
            "module": f"user{index}",
            "env": {"PASSWORD": "${secret:db-password}", "LEVEL": "${config:log-level}"},
        }
        (plan.manifests / f"user{index}.json").write_text(json.dumps(document))


SUBJECTS = {
    "vault": SECRET_SUBJECT,
    "config batch": "$JS.API.DIRECT.GET.KV_mesh-config_values",
    "config gets": "$JS.API.DIRECT.GET.KV_mesh-config_values.>",
    "verb": buckets.VERB_SUBJECT,
}


async def test_a_secret_used_by_many_modules_is_asked_once_and_config_is_read_by_one_batch(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    with_secret_users(plan, 5)
    async with counted(bus, SUBJECTS) as seen:
        report = await reconcile(bus, plan)
    assert report.ok, report.summary()
    assert seen["vault"] == 1
    assert seen["config batch"] == 1 and seen["config gets"] == 0
    assert seen["config gets stamp"] == 1, "the config bucket's stamp, read before its values"
    assert seen["verb"] >= 3, "the first reconcile lists the node's keys through the verb"


async def test_an_unchanged_reconcile_asks_no_listing_and_reads_no_value_again(
    domains: StandIns, bus: Bus, plan: ClientPlan
) -> None:
    with_secret_users(plan, 5)
    await reconcile(bus, plan)
    async with counted(bus, SUBJECTS) as seen:
        again = await reconcile(bus, plan)
    assert again.ok and not any(again.writes.values())
    assert seen["verb"] == 0
    assert seen["config batch"] == 0
    assert seen["config gets"] == 0 and seen["config gets stamp"] == 1, "one stamp of the config bucket, no value"
    assert seen["vault"] == 1, "secrets are asked every time, and compared by digest"
