"""snapshot, batch and direct gets, and converge against a real nats-server."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import nats
import nats.aio.client
import nats.aio.msg
import pytest
from nats.js import JetStreamContext
from pydantic import SecretStr

from mesh_dev.local_nats import local_nats
from registry.contract import APPLIED, Bucket
from registry.errors import ConvergeError, NoResponders, PermissionDenied, WrongLastSequence
from registry.wire import (
    MULTI_LAST_LIMIT,
    Bus,
    BusOptions,
    KvItem,
    TooManyKeys,
    connect,
    converge,
    current_snapshot,
    get_direct,
    get_last_many,
    get_latest,
    get_latest_paged,
    replicated,
    snapshot,
    update,
)
from tests.helpers import put_many, until, wait_for


def bucket(name: str) -> Bucket:
    return Bucket(name, APPLIED)


async def test_snapshot_of_an_empty_bucket_is_empty(bus: Bus, js: JetStreamContext) -> None:
    await js.create_key_value(bucket="empty", direct=True)
    assert await snapshot(bus, bucket("empty")) == []


async def test_snapshot_keeps_only_the_filtered_keys_and_latest_values(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="b", direct=True)
    for key, value in [("n1.a", b"1"), ("n1.a", b"2"), ("n2.a", b"3"), ("n1", b"4"), ("n10.a", b"5")]:
        await kv.put(key, value)
    items = await snapshot(bus, bucket("b"), ["n1", "n1.>"])
    assert sorted((i.key, i.value) for i in items) == [("n1", b"4"), ("n1.a", b"2")]


async def test_a_snapshot_as_it_began_ends_while_its_keys_are_still_written(bus: Bus, js: JetStreamContext) -> None:
    """A writer keeps adding keys under the filter while the snapshot reads: read as it began, the
    snapshot ends, with every key written before it began."""
    kv = await js.create_key_value(bucket="d", direct=True)
    for index in range(50):
        await kv.put(f"n1.before{index}", b"x" * 1000)

    async def keep_writing() -> None:
        index = 0
        while True:
            await kv.put(f"n1.during{index}", b"x" * 1000)
            index += 1

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(keep_writing)
        with anyio.fail_after(10):
            items = await snapshot(bus, bucket("d"), ["n1.>"], as_it_began=True)
        tasks.cancel_scope.cancel()
    assert {item.key for item in items} >= {f"n1.before{index}" for index in range(50)}


async def test_converge_writes_only_differences_and_deletes_the_rest(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="c", direct=True)
    first = await converge(bus, bucket("c"), [], {"n1.a": b"1", "n1.b": b"2"})
    assert sorted(first.written) == ["n1.a", "n1.b"]
    current = await snapshot(bus, bucket("c"), ["n1.>"], include_deleted=True)
    second = await converge(bus, bucket("c"), current, {"n1.a": b"1", "n1.c": b"3"})
    assert (second.written, second.deleted) == (["n1.c"], ["n1.b"])
    sequence = (await kv.status()).stream_info.state.last_seq
    current = await snapshot(bus, bucket("c"), ["n1.>"], include_deleted=True)
    third = await converge(bus, bucket("c"), current, {"n1.a": b"1", "n1.c": b"3"})
    assert not third
    assert (await kv.status()).stream_info.state.last_seq == sequence
    current = await snapshot(bus, bucket("c"), ["n1.>"], include_deleted=True)
    revived = await converge(bus, bucket("c"), current, {"n1.a": b"1", "n1.b": b"again", "n1.c": b"3"})
    assert revived.written == ["n1.b"]
    assert (await kv.get("n1.b")).value == b"again"


_NO_FLOW_CONTROL = """
accounts { A { jetstream: enabled, users = [
  { user: writer, password: writer }
  { user: lister, password: lister, permissions: {
      publish: { allow: ["$JS.API.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
] } }
"""


async def test_snapshot_with_its_flow_control_refused_fails_as_denied_instead_of_hanging(tmp_path: Path) -> None:
    """Heartbeats keep coming while flow control stalls; they must not count as progress."""
    async with local_nats(tmp_path / "nats", _NO_FLOW_CONTROL) as server:
        options = BusOptions(servers=(server.url,), request_timeout=timedelta(seconds=1))
        writer = await nats.connect(server.url, user="writer", password="writer")
        kv = await writer.jetstream().create_key_value(bucket="big", direct=True)
        limit = anyio.Semaphore(200)

        async def put(i: int) -> None:
            async with limit:
                await kv.put(f"n1.k{i}", b"x" * 1000)

        async with anyio.create_task_group() as tg:
            for i in range(4000):  # about 4 MB: past what the server sends before asking flow control
                tg.start_soon(put, i)
        await writer.drain()
        async with connect(options.model_copy(update={"user": "lister", "password": SecretStr("lister")})) as lister:
            with anyio.fail_after(10), pytest.raises(PermissionDenied, match=r"\$js\.fc\.kv_big"):
                await snapshot(lister, bucket("big"), ["n1.>"])


async def test_get_latest_reads_a_value_a_deletion_and_a_key_never_written(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="g", direct=True)
    revision = await kv.put("n1.a", b'"v"')
    await kv.put("n1.gone", b"x")
    await kv.delete("n1.gone")
    assert await get_latest(bus, bucket("g"), "n1.a") == KvItem("n1.a", b'"v"', revision)
    gone = await get_latest(bus, bucket("g"), "n1.gone")
    assert gone is not None
    assert gone.deleted
    assert await get_latest(bus, bucket("g"), "n1.never") is None


async def test_get_latest_of_a_bucket_without_direct_get_reads_through_the_stream(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="plain")
    await kv.put("k", b"1")
    found = await get_latest(bus, bucket("plain"), "k")
    assert found is not None
    assert (found.key, found.value, found.deleted) == ("k", b"1", False)
    await kv.delete("k")
    gone = await get_latest(bus, bucket("plain"), "k")
    assert gone is not None and gone.deleted
    assert await get_latest(bus, bucket("plain"), "never") is None


async def test_a_listing_leaves_no_consumer_behind_for_long(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="short", direct=True)
    await kv.put("n1.a", b"1")
    for _ in range(20):
        await snapshot(bus, bucket("short"), ["n1.>"])

    async def none_left() -> bool:
        return not (await js.stream_info("KV_short")).state.consumer_count

    # a server answering many queries must not pile up consumers
    await wait_for(none_left, "the listings' consumers gone", every=0.2)


async def test_a_conditional_write_loses_to_another_writer_with_a_typed_error(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="race", direct=True)
    first = await kv.put("n1.a", b"1")
    await kv.put("n1.a", b"theirs")
    with pytest.raises(WrongLastSequence) as raised:
        await update(bus, bucket("race"), "n1.a", b"mine", last=first)
    assert raised.value.err_code == 10071
    assert (await kv.get("n1.a")).value == b"theirs"


async def test_get_last_many_reads_the_latest_values_and_delete_markers_under_a_filter(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="many", direct=True)
    await kv.put("n1.a", b"1")
    latest_a = await kv.put("n1.a", b"2")
    gone = await kv.put("n1.gone", b"x")
    await kv.delete("n1.gone")
    await kv.put("n2.a", b"other node")
    items = await get_last_many(bus, bucket("many"), "n1.>")
    assert sorted((i.key, i.value, i.deleted) for i in items) == [("n1.a", b"2", False), ("n1.gone", b"", True)]
    by_key = {i.key: i for i in items}
    assert by_key["n1.a"].revision == latest_a
    assert by_key["n1.gone"].revision > gone


async def test_get_last_many_of_nothing_matching_is_empty(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="sparse", direct=True)
    await kv.put("n2.a", b"1")
    assert await get_last_many(bus, bucket("sparse"), "n1.>") == []
    await js.create_key_value(bucket="void", direct=True)
    assert await get_last_many(bus, bucket("void"), ">") == []


async def test_get_last_many_of_more_keys_than_one_batch_answers_says_too_many(bus: Bus, js: JetStreamContext) -> None:
    await js.create_key_value(bucket="crowded", direct=True)
    await put_many(bus, bucket("crowded"), {f"n1.k{i}": b"1" for i in range(MULTI_LAST_LIMIT + 1)})
    with pytest.raises(TooManyKeys, match="too many keys"):
        await get_last_many(bus, bucket("crowded"), "n1.>")


async def test_get_last_many_past_its_bytes_says_too_many_and_within_them_reads_every_key(
    bus: Bus, js: JetStreamContext
) -> None:
    await js.create_key_value(bucket="heavy", direct=True)
    await put_many(bus, bucket("heavy"), {f"n1.k{i}": b"x" * 10_000 for i in range(50)})
    with pytest.raises(TooManyKeys, match="its bytes ran out"):
        await get_last_many(bus, bucket("heavy"), "n1.>", max_bytes=100_000)
    assert len(await get_last_many(bus, bucket("heavy"), "n1.>", max_bytes=600_000)) == 50


async def test_get_last_many_of_exactly_the_limit_reads_every_key(bus: Bus, js: JetStreamContext) -> None:
    await js.create_key_value(bucket="full", direct=True)
    await put_many(bus, bucket("full"), {f"n1.k{i}": str(i).encode() for i in range(MULTI_LAST_LIMIT)})
    items = await get_last_many(bus, bucket("full"), "n1.*")
    assert {i.key: i.value for i in items} == {f"n1.k{i}": str(i).encode() for i in range(MULTI_LAST_LIMIT)}


async def test_get_latest_paged_reads_every_key_past_one_batch_each_once_at_its_latest(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="paged", direct=True)
    await put_many(bus, bucket("paged"), {f"n1.k{i}": b"1" for i in range(2_500)})
    await kv.put("n1.k7", b"2")  # rewritten: met at its new sequence alone (history 1)
    await kv.delete("n1.k8")
    await kv.put("n2.other", b"x")
    items = await get_latest_paged(bus, bucket("paged"), "n1.>", page=1000)
    by_key = {i.key: i for i in items}
    assert len(items) == len(by_key) == 2_500
    assert by_key["n1.k7"].value == b"2" and by_key["n1.k8"].deleted and "n2.other" not in by_key
    assert await get_latest_paged(bus, bucket("paged"), "n3.>") == []


async def test_get_last_many_reads_under_several_filters_as_they_were_at_a_sequence(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="cut", direct=True)
    await kv.put("n1", b"bare")
    cut = await kv.put("n1.a", b"old")
    await kv.put("n1.a", b"new")
    await kv.put("n1.b", b"after the cut")
    await kv.put("n10.a", b"another node")
    latest = await get_last_many(bus, bucket("cut"), ["n1", "n1.>"])
    assert sorted((i.key, i.value) for i in latest) == [("n1", b"bare"), ("n1.a", b"new"), ("n1.b", b"after the cut")]
    earlier = await get_last_many(bus, bucket("cut"), ["n1", "n1.>"], up_to_seq=cut)
    assert sorted((i.key, i.value) for i in earlier) == [("n1", b"bare")]  # n1.a's old value is no longer stored


async def test_current_snapshot_reads_a_narrowing_of_more_keys_than_one_batch_answers(
    bus: Bus, js: JetStreamContext
) -> None:
    await js.create_key_value(bucket="wide", direct=True)
    many = {f"n1.k{i}": str(i).encode() for i in range(MULTI_LAST_LIMIT + 1)}
    await put_many(bus, bucket("wide"), {**many, "n2.a": b"other", "n1": b"bare"})
    items = await current_snapshot(bus, bucket("wide"), ["n1", "n1.>"])
    assert {i.key: i.value for i in items} == {**many, "n1": b"bare"}


@pytest.mark.parametrize("direct", [True, False], ids=["by a batch read", "without direct get, by a consumer"])
async def test_current_snapshot_leaves_deleted_keys_out_unless_asked(
    bus: Bus, js: JetStreamContext, direct: bool
) -> None:
    kv = await js.create_key_value(bucket="gone", direct=direct)
    await kv.put("n1.a", b"1")
    await kv.put("n1.b", b"2")
    await kv.delete("n1.b")
    await kv.put("n2.a", b"3")
    kept = await current_snapshot(bus, bucket("gone"), ["n1.>"])
    assert [(i.key, i.value) for i in kept] == [("n1.a", b"1")]
    every = await current_snapshot(bus, bucket("gone"), ["n1.>"], include_deleted=True)
    assert sorted((i.key, i.deleted) for i in every) == [("n1.a", False), ("n1.b", True)]
    assert await current_snapshot(bus, bucket("gone"), ["n3.>"]) == []


async def test_reads_by_direct_get_of_a_missing_bucket_have_no_responders(bus: Bus) -> None:
    with pytest.raises(NoResponders):
        await get_last_many(bus, bucket("absent"), ">")
    with pytest.raises(NoResponders):
        await get_direct(bus, bucket("absent"), "n1.a")


async def test_a_pipelined_converge_writes_and_deletes_what_one_at_a_time_does(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="pipelined", direct=True)
    wanted = {f"n1.k{i}": f"{i}".encode() for i in range(300)}
    first = await converge(bus, bucket("pipelined"), [], wanted, in_flight=32)
    assert sorted(first.written) == sorted(wanted)
    current = await snapshot(bus, bucket("pipelined"), ["n1.>"], include_deleted=True)
    changed = {key: b"again" if key.endswith("0") else value for key, value in wanted.items() if key != "n1.k1"}
    second = await converge(bus, bucket("pipelined"), current, changed, in_flight=32)
    assert (sorted(second.written), second.deleted) == (sorted(k for k in wanted if k.endswith("0")), ["n1.k1"])
    stored = await snapshot(bus, bucket("pipelined"), ["n1.>"])
    assert {item.key: item.value for item in stored} == changed
    sequence = (await kv.status()).stream_info.state.last_seq
    current = await snapshot(bus, bucket("pipelined"), ["n1.>"], include_deleted=True)
    assert not await converge(bus, bucket("pipelined"), current, changed, in_flight=32)
    assert (await kv.status()).stream_info.state.last_seq == sequence


async def test_a_pipelined_converge_that_loses_a_write_says_what_it_had_done(bus: Bus, js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="raced", direct=True)
    await converge(bus, bucket("raced"), [], {f"n1.k{i}": b"old" for i in range(50)}, in_flight=8)
    current = await snapshot(bus, bucket("raced"), ["n1.>"], include_deleted=True)
    await kv.put("n1.k7", b"another writer")
    with pytest.raises(ConvergeError) as caught:
        await converge(bus, bucket("raced"), current, {f"n1.k{i}": b"new" for i in range(50)}, in_flight=8)
    assert caught.value.key == "n1.k7"
    assert isinstance(caught.value.__cause__, WrongLastSequence)
    assert (await kv.get("n1.k7")).value == b"another writer"
    written = [item.key for item in await snapshot(bus, bucket("raced"), ["n1.>"]) if item.value == b"new"]
    assert caught.value.done == f"{len(written)} written, 0 deleted"


async def test_a_stream_of_one_replica_is_listed_without_asking_its_leader(
    bus: Bus, nc: nats.aio.client.Client, js: JetStreamContext
) -> None:
    """Its one server answers the batch read: the leader's floor (a stream message get) would
    only add a round trip. Its configuration is asked once, then trusted for a few seconds."""
    kv = await js.create_key_value(bucket="single", direct=True)
    await kv.put("n1.a", b"1")
    asked: list[str] = []

    async def count(msg: nats.aio.msg.Msg) -> None:
        asked.append(msg.subject.split(".")[3])

    for api in ("STREAM.MSG.GET", "STREAM.INFO"):
        await nc.subscribe(f"$JS.API.{api}.KV_single", cb=count)
    await nc.flush()
    for _ in range(3):
        items = await current_snapshot(bus, bucket("single"), ["n1.>"])
        assert [(i.key, i.value) for i in items] == [("n1.a", b"1")]
    # nats-server hands a request to the JetStream API's import (`$JS.API.>`, matched first) before it
    # queues this listener's copy, both on the asker's goroutine: on a loaded machine the answer and our
    # flush's PONG can come first (CI once counted none). A late copy is waited for; a missing one fails.
    await until(lambda: bool(asked), 5)
    await nc.flush()
    assert asked == ["INFO"]
    assert not await replicated(bus, bucket("single"))
