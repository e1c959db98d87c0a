"""The client's own files.

Every file the node client writes (the env files, the ledger, the digest key, the state file) is
written one way: an exclusive temporary file of a random name beside it, mode 0600 set on the
descriptor, fsync, rename. Something other than a regular file in the place of one is a clear
error naming the path and what is there, never a traceback, and watch mode keeps running through
it. A temporary file a killed client left is removed by the next run, and nothing else is.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import stat
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from mesh_dev.standins import StandIns
from provisioner_client.materializing.envfile import LEDGER, EnvFolder
from provisioner_client.reconcile import ClientPlan
from provisioner_client.resolving.memory import FILE, Memory
from provisioner_client.state import files
from provisioner_client.state.records import KEY
from provisioner_client.watch.watching import WatchTiming, watch
from registry.contract import buckets
from registry.wire import Bus, delete, get_direct, node_key, put
from tests.helpers import NODE, Reports, logged
from tests.provisioner_client.cli import client, client_env

OWN_FILES = {"env file": "app.env", "ledger": LEDGER, "digest key": KEY, "state file": FILE}
PLANTED = ("a" * 16, "b" * 16)  # the first two names the writer is made to try, each taken by a planted file
TIMING = WatchTiming(
    debounce=timedelta(seconds=0.05),
    refresh=timedelta(seconds=30),
    poll=timedelta(seconds=0.2),
    backoff_max=timedelta(seconds=0.5),
    drift_poll=timedelta(seconds=0.2),
)


def fingerprint(path: Path) -> tuple[int, int, int, int, int]:
    """What a write, a chmod, a removal or a replacement would change (not the access time)."""
    found = path.lstat()
    return (found.st_ino, found.st_mode, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def assert_own(path: Path) -> None:
    """A regular file (never a link) of mode 0600."""
    found = path.lstat()
    assert stat.S_ISREG(found.st_mode), f"{path} is not a regular file"
    assert stat.S_IMODE(found.st_mode) == 0o600, f"{path} has mode {stat.S_IMODE(found.st_mode):o}"


def changed_memory(folder: Path) -> Memory:
    memory = Memory.load(folder, NODE)
    memory.world = secrets.token_hex(4)  # something new to keep, so that `save` writes
    return memory


# -- the state file's temporary file, as the hostile tester found it -----------------------------


def test_links_planted_at_the_state_files_temporary_names_are_never_written_through(tmp_path: Path) -> None:
    folder = tmp_path / "env"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    for pid in range(os.getpid(), os.getpid() + 5):  # the names the client used: the state file's name and a pid
        (folder / f"{FILE}.{pid}.tmp").symlink_to(victim)
    assert changed_memory(folder).save()
    assert victim.read_text() == "keep me\n"
    assert_own(folder / FILE)


def test_a_planted_0644_file_at_the_state_files_temporary_name_leaves_the_state_file_0600(tmp_path: Path) -> None:
    folder = tmp_path / "env"
    folder.mkdir(mode=0o700)
    planted = folder / f"{FILE}.{os.getpid()}.tmp"
    planted.write_text("planted\n")
    planted.chmod(0o644)
    assert changed_memory(folder).save()
    assert_own(folder / FILE)


# -- every file written the same way -------------------------------------------------------------


@pytest.fixture
def predictable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's random part made predictable: it tries `PLANTED` first, then a random one, for every file."""
    names = itertools.cycle([*PLANTED, None])
    monkeypatch.setattr(files, "_random_part", lambda: next(names) or secrets.token_hex(8))


def plant(folder: Path, target: str, victim: Path) -> list[Path]:
    """At the first planted name a link to `victim`, at the second a regular 0644 file."""
    link, regular = (folder / f".{target}.{part}.tmp" for part in PLANTED)
    link.symlink_to(victim)
    regular.write_text("planted\n")
    regular.chmod(0o644)
    return [link, regular]


@pytest.mark.usefixtures("predictable_names")
def test_every_file_the_client_writes_takes_an_exclusive_temporary_file_and_mode_0600_whatever_was_planted(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "env"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    memory = changed_memory(folder)  # loaded before anything is planted: a load removes leftovers
    planted = [path for target in OWN_FILES.values() for path in plant(folder, target, victim)]
    before = {path: fingerprint(path) for path in planted}
    old_umask = os.umask(0)  # the mode is set on the descriptor, whatever the umask
    try:
        EnvFolder(folder).materialize("app", b"A=1\n")  # the digest key, the ledger, the env file
        assert memory.save()  # the state file
    finally:
        os.umask(old_umask)
    assert victim.read_text() == "keep me\n"
    for target in OWN_FILES.values():
        assert_own(folder / target)
    assert {path: fingerprint(path) for path in planted} == before, "a planted file was written to or removed"
    assert (folder / "app.env").read_bytes() == b"A=1\n"


# -- something other than a regular file where one of the client's files goes --------------------


def put_a_folder_at(path: Path) -> None:
    """A folder (holding a file, so that nothing removes it by accident) where `path` was."""
    if path.exists():
        path.unlink()
    path.mkdir()
    (path / "inside").write_text("mine\n")


@pytest.mark.parametrize(
    ("what", "code"),
    [
        pytest.param("env file", 7, id="an env file: its module pending"),
        pytest.param("ledger", 12, id="the ledger: a local failure"),
        pytest.param("digest key", 12, id="the digest key: a local failure"),
        pytest.param("state file", 0, id="the state file: a warning, the keys are listed"),
    ],
)
async def test_a_folder_where_a_file_of_the_client_goes_is_a_clear_error_never_a_traceback(
    domains: StandIns, nats_server: LocalNats, plan: ClientPlan, what: str, code: int
) -> None:
    env = client_env(nats_server.url, plan)
    first, out, _ = await client("reconcile", env=env)
    assert first == 0, out
    path = plan.materialize / OWN_FILES[what]
    put_a_folder_at(path)
    found, out, err = await client("reconcile", env=env)
    assert "Traceback" not in err
    assert found == code, (out, err)
    assert f"{path}: is a folder, not a regular file" in out + err, (out, err)
    assert (path / "inside").read_text() == "mine\n"
    assert not [p.name for p in plan.materialize.iterdir() if p.name.endswith(".tmp")], "a failed write leaves none"


async def poke(bus: Bus, domains: StandIns, reports: Reports, why: str) -> None:
    """A config change, and the reconcile it wakes."""
    seen = len(reports.all)
    await put(bus, domains.config, "greeting", json.dumps(secrets.token_hex(4)).encode())
    await reports.until(lambda: len(reports.all) > seen, why)


@pytest.mark.parametrize("what", list(OWN_FILES))
async def test_watch_mode_says_what_is_in_the_way_keeps_running_and_tries_again(
    domains: StandIns, bus: Bus, plan: ClientPlan, what: str
) -> None:
    path = plan.materialize / OWN_FILES[what]
    reports = Reports(15)
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, TIMING, on_report=reports, task_status=task_status))
        with logged(f"{path}: is a folder, not a regular file") as said:
            put_a_folder_at(path)
            if what != "env file":  # an env file is looked at every drift poll; the others at a reconcile
                await put(bus, domains.config, "greeting", b'"in the way"')
            await said.wait(15)
        shutil.rmtree(path)
        await poke(bus, domains, reports, "a reconcile once the folder is gone")
        if what != "ledger":  # without its ledger the client takes no env file for its own: they stay pending
            await reports.until(lambda: reports.all[-1].ok, "every module applied again")
            assert_own(path)
        tg.cancel_scope.cancel()


async def test_the_drift_watch_says_once_that_it_cannot_read_the_digest_key(
    domains: StandIns, bus: Bus, plan: ClientPlan, caplog: pytest.LogCaptureFixture
) -> None:
    polls = 8
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: watch(bus, plan, TIMING, task_status=task_status))
        with logged("cannot look at the env files for drift") as said:
            put_a_folder_at(plan.materialize / KEY)
            await said.wait(5)
        await anyio.sleep(polls * TIMING.drift_poll.total_seconds())
        tg.cancel_scope.cancel()
    told = [r for r in caplog.records if r.getMessage().startswith("cannot look at the env files for drift")]
    assert len(told) == 1, f"said {len(told)} times in {polls} polls"


def test_status_and_the_drift_judge_take_a_folder_for_a_file_not_as_written(tmp_path: Path) -> None:
    folder = EnvFolder(tmp_path / "env")
    done = folder.materialize("app", b"A=1\n")
    put_a_folder_at(done.path)
    assert not folder.intact("app", done.digest)
    assert folder.digest_on_disk("app") is None


# -- what a killed client leaves -----------------------------------------------------------------

KILLED_AT = """
import os, signal, sys
from provisioner_client.cli import main

def killed_at(real):
    def call(src, dst, *args, **kwargs):
        if os.path.basename(dst) == sys.argv[1]:
            os.kill(os.getpid(), signal.SIGKILL)  # as a crash would: the temporary file written, not renamed
        return real(src, dst, *args, **kwargs)
    return call

os.replace, os.link = killed_at(os.replace), killed_at(os.link)
sys.exit(main(sys.argv[2:]))
"""

LOOK_ALIKES = (
    ".app.env.tmp",  # no random part
    "app.env.0123456789abcdef.tmp",  # no leading dot
    ".app.env.0123456789ABCDEF.tmp",  # not the client's hex
    ".notes.txt.0123456789abcdef.tmp",  # not a file of the client's
    ".Bad name.env.0123456789abcdef.tmp",  # not a module's env file
    "sub/.app.env.0123456789abcdef.tmp",  # not in the folder itself
)


def look_alikes(plan: ClientPlan, victim: Path) -> Iterator[Path]:
    """Files the client must leave alone, though some look like its temporary files."""
    for name in LOOK_ALIKES:
        path = plan.materialize / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("not the client's\n")
        yield path
    link = plan.materialize / ".app.env.fedcba9876543210.tmp"  # the client's naming, but a link it never made
    link.symlink_to(victim)
    yield link
    in_manifests = plan.manifests / ".app.json.0123456789abcdef.tmp"  # not in the client's own folder
    in_manifests.write_text("{}\n")
    yield in_manifests


async def lease_expired(bus: Bus) -> None:
    """The killed client's lease removed, as if it had expired (it outlives the client by its ttl)."""
    held = await get_direct(bus, buckets.LEASES, node_key(NODE))
    assert held is not None
    await delete(bus, buckets.LEASES, node_key(NODE), last=held.revision)


def leftovers(folder: Path, target: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") and target in p.name)


@pytest.mark.usefixtures("domains")
@pytest.mark.parametrize("what", list(OWN_FILES))
async def test_a_temporary_file_a_killed_client_left_is_removed_by_the_next_run_and_nothing_else(
    bus: Bus, nats_server: LocalNats, plan: ClientPlan, tmp_path: Path, what: str
) -> None:
    target = OWN_FILES[what]
    env = client_env(nats_server.url, plan)
    command = [sys.executable, "-c", KILLED_AT, target, "reconcile"]
    killed = await anyio.run_process(command, env=env, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    left = leftovers(plan.materialize, target)
    assert left, f"the premise: the killed client left a temporary file of its {what}"
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    alike = list(look_alikes(plan, victim))
    before = {path: (fingerprint(path), path.read_bytes()) for path in alike}
    await lease_expired(bus)
    code, out, err = await client("reconcile", env=env)
    assert code == 0, (out, err)
    assert not set(left) & set(leftovers(plan.materialize, target)), "the leftover is still there"
    assert {path: (fingerprint(path), path.read_bytes()) for path in alike} == before
    assert victim.read_text() == "keep me\n"
    assert_own(plan.materialize / target)


def test_leftovers_of_the_previous_naming_are_removed_too(tmp_path: Path) -> None:
    """The names the client gave its temporary files before (mkstemp's, the state file's pid) are
    its own as well: a machine upgraded after a crash loses them at its first run."""
    folder = EnvFolder(tmp_path / "env")
    folder.materialize("app", b"A=1\n")
    old = [f".app.env.{'k3x_9qzp'}.tmp", f".{LEDGER}.a1b2c3d4.tmp", f"{KEY}.zz99aa00.tmp", f"{FILE}.4242.tmp"]
    for name in old:
        (folder.folder / name).write_text("left\n")
    folder.remove_leftovers()  # the env files', the ledger's and the key's
    Memory.load(folder.folder, NODE)  # the state file's
    assert sorted(p.name for p in folder.folder.iterdir()) == sorted(["app.env", LEDGER, KEY])
