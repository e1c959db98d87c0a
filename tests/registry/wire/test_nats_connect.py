"""The `nats` CLI's conventions on a real nats-server: every way of naming the server, every kind of
credential (flags and contexts alike, on servers with accounts, passwords, tokens and TLS), and a
one-shot command that cannot connect failing at once in one line."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path

import anyio
import nkeys
import pytest
from anyio.abc import SocketAttribute, SocketStream

from mesh_dev.local_nats import LocalNats, local_nats
from provisioner.commands.cli import build_parser
from registry.access import Kind, new_seed, write_secret
from registry.edge import DEV_CONTEXT, BusSettings, given_flags, load_settings
from registry.errors import BusError
from registry.wire import BusOptions, ask, connect, connect_within
from tests.helpers import clean_environment, in_own_task, logged
from tests.isolation import Mesh, party

OPS = party(Kind.OPERATOR, "ops")
LONG = timedelta(minutes=10)  # a deadline no test waits out: a refusal must end the wait first


def options_of(argv: list[str], environ: Mapping[str, str], config: Path | None = None) -> BusOptions:
    """The connection options `mesh-provisioner query` reads from these flags, variables and file."""
    args = build_parser().parse_args(["query", *argv])
    return load_settings(BusSettings, given_flags(args, BusSettings), config, environ).options("test")


def with_contexts(tmp_path: Path, contexts: Mapping[str, Mapping[str, object]], selected: str = "") -> dict[str, str]:
    """An environment whose `nats` CLI configuration holds `contexts`, `selected` selected."""
    folder = tmp_path / "config" / "nats"
    (folder / "context").mkdir(parents=True, exist_ok=True)
    for name, fields in contexts.items():
        (folder / "context" / f"{name}.json").write_text(json.dumps(fields))
    if selected:
        (folder / "context.txt").write_text(selected)
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "home")}


async def reaches(options: BusOptions) -> str:
    """Connects as `options` say, makes sure the server heard us, and says where the URL came from."""
    async with connect_within(options, LONG) as bus:
        await bus.flush()
    return options.servers_from


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- naming the server ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "said"),
    [
        pytest.param("-s", "the command line", id="-s"),
        pytest.param("--server", "the command line", id="--server"),
        pytest.param("--nats-url", "the command line", id="--nats-url"),
        pytest.param("NATS_URL", "NATS_URL", id="NATS_URL"),
        pytest.param("[nats] url", "config file", id="the config file's [nats] url"),
        pytest.param("--context", "nats context 'lab' at", id="--context"),
        pytest.param("NATS_CONTEXT", "nats context 'lab' at", id="NATS_CONTEXT"),
        pytest.param("selected", "the nats CLI's selected context 'lab' at", id="the nats CLI's selected context"),
        pytest.param("dev", f"{DEV_CONTEXT}'s context at", id="mesh-provisioner-dev's context"),
    ],
)
async def test_each_way_of_naming_the_server_reaches_it(
    nats_server: LocalNats, tmp_path: Path, how: str, said: str
) -> None:
    elsewhere = f"nats://127.0.0.1:{free_port()}"  # what a lower source says: never reached
    lab = {"url": nats_server.url}
    dev = {"url": nats_server.url if how == "dev" else elsewhere, "mesh_provisioner_dev_pid": os.getpid()}
    environ = with_contexts(tmp_path, {"lab": lab, DEV_CONTEXT: dev}, selected="lab" if how == "selected" else "")
    config = tmp_path / "query.toml"
    config.write_text(f'[nats]\nurl = "{nats_server.url if how == "[nats] url" else elsewhere}"\n')
    argv = {
        "-s": ["-s", nats_server.url],
        "--server": ["--server", nats_server.url],
        "--nats-url": ["--nats-url", nats_server.url],
        "--context": ["--context", "lab"],
    }.get(how, [])
    environ |= {"NATS_URL": nats_server.url} if how == "NATS_URL" else {}
    environ |= {"NATS_CONTEXT": "lab"} if how == "NATS_CONTEXT" else {}
    uses_file = how in ("[nats] url", "-s", "--server", "--nats-url", "NATS_URL")  # the file is below these
    assert (await reaches(options_of(argv, environ, config if uses_file else None))).startswith(said)


async def test_a_comma_separated_list_reaches_the_server_that_answers(nats_server: LocalNats) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    options = options_of(["-s", f"{dead},{nats_server.url}"], {})
    assert options.servers == (dead, nats_server.url)
    await reaches(options)


# -- credentials ---------------------------------------------------------------------------------


async def test_an_operator_asks_the_verb_with_its_key_from_a_flag_and_from_a_context(
    mesh: Mesh, tmp_path: Path
) -> None:
    """Static accounts: its nkey seed (`--nkey`, a context's `nkey`); JWT: its `.creds` (`--creds`)."""
    own = mesh.options(OPS)
    field, path = ("creds", own.creds) if own.creds else ("nkey", own.nkey_seed)
    environ = with_contexts(tmp_path, {"ops": {"url": mesh.server.url, field: str(path)}}, selected="ops")
    by_flag = options_of(["--server", mesh.server.url, f"--{field}", str(path)], {})
    by_context = options_of([], environ)
    for options in (by_flag, by_context):
        async with connect_within(options, LONG) as bus:
            answer = await ask(bus, {"what": "needs"})
        assert answer["what"] == "needs"
    assert (by_context.creds, by_context.nkey_seed) == (own.creds, own.nkey_seed)


async def test_a_key_the_accounts_do_not_know_is_refused_at_once_naming_the_server(mesh: Mesh, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger.nk"
    write_secret(stranger, new_seed(nkeys.PREFIX_BYTE_USER))
    options = options_of(["--server", mesh.server.url, "--nkey", str(stranger)], {})
    with pytest.raises(BusError) as refused:
        await reaches(options)
    message = str(refused.value)
    assert message.startswith(f"connect: no NATS server at {mesh.server.url} (from the command line) accepted")
    assert "authorization violation" in message.lower()


@pytest.fixture
async def password_server(tmp_path: Path) -> AsyncIterator[LocalNats]:
    users = 'authorization { users = [ { user: "ops", password: "s3cret" } ] }'
    async with in_own_task(local_nats(tmp_path / "nats-password", users)) as server:
        yield server


@pytest.mark.parametrize(
    ("argv", "environ", "context"),
    [
        pytest.param(["--user", "ops", "--password", "s3cret"], {}, {}, id="--user and --password"),
        pytest.param(["--nats-user", "ops"], {"NATS_PASSWORD": "s3cret"}, {}, id="--nats-user and NATS_PASSWORD"),
        pytest.param(["--context", "ops"], {}, {"user": "ops", "password": "s3cret"}, id="a context's user, password"),
    ],
)
async def test_a_user_and_password_log_in(
    password_server: LocalNats, tmp_path: Path, argv: list[str], environ: dict[str, str], context: dict[str, str]
) -> None:
    environ |= with_contexts(tmp_path, {"ops": {"url": password_server.url, **context}})
    await reaches(options_of([*argv, *([] if context else ["-s", password_server.url])], environ))


async def test_a_wrong_password_is_refused_and_not_said(password_server: LocalNats) -> None:
    with pytest.raises(BusError, match=r"(?i)authorization violation") as refused:
        await reaches(options_of(["-s", password_server.url, "--user", "ops", "--password", "wrong-one"], {}))
    assert "wrong-one" not in str(refused.value)


async def test_a_token_logs_in(tmp_path: Path) -> None:
    async with local_nats(tmp_path / "nats", 'authorization { token: "t0ken" }') as server:
        await reaches(options_of(["-s", server.url], {"NATS_TOKEN": "t0ken"}))
        environ = with_contexts(tmp_path, {"tok": {"url": server.url, "token": "t0ken"}}, selected="tok")
        await reaches(options_of([], environ))


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    folder.mkdir(parents=True)
    files = {name: folder / f"{name}.pem" for name in ("ca", "ca-key", "server", "server-key", "client", "client-key")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        ["req", "-x509", *ec, "-keyout", files["ca-key"], "-out", files["ca"], "-subj", "/CN=test CA", "-days", "1"]
    )
    for who, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        request = folder / f"{who}.csr"
        _openssl(["req", *ec, "-keyout", files[f"{who}-key"], "-out", request, "-subj", f"/CN={who}"])
        extension_file = folder / f"{who}.ext"
        extension_file.write_text(extension + "\n")
        _openssl(
            [
                "x509",
                "-req",
                "-in",
                request,
                "-CA",
                files["ca"],
                "-CAkey",
                files["ca-key"],
                "-CAcreateserial",
                "-out",
                files[who],
                "-days",
                "1",
                "-extfile",
                extension_file,
            ]
        )
    return files


def _openssl(args: list[str | Path]) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certificates with")
async def test_tls_with_a_client_certificate_from_the_flags_and_from_a_context(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "tls")
    tls = (
        f'tls {{ cert_file: "{files["server"]}", key_file: "{files["server-key"]}", '
        f'ca_file: "{files["ca"]}", verify: true }}'
    )
    async with local_nats(tmp_path / "nats", tls) as server:
        flags = ["--tlsca", str(files["ca"]), "--tlscert", str(files["client"]), "--tlskey", str(files["client-key"])]
        await reaches(options_of(["-s", server.url, *flags], {}))
        context = {
            "url": server.url,
            "ca": str(files["ca"]),
            "cert": str(files["client"]),
            "key": str(files["client-key"]),
        }
        await reaches(options_of(["--context", "tls"], with_contexts(tmp_path, {"tls": context})))
        with pytest.raises(BusError):  # no client certificate: the server refuses it
            await reaches(options_of(["-s", server.url, "--tlsca", str(files["ca"]), "--nats-timeout", "2"], {}))


# -- failing at once -----------------------------------------------------------------------------


async def test_without_a_server_a_one_shot_connect_fails_at_once_in_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every server refusing ends the wait, however long it may be; nothing is logged meanwhile."""
    urls = ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]  # privileged ports no test server takes: refused at once
    environ = with_contexts(tmp_path, {"lab": {"url": ",".join(urls)}}, selected="lab")
    options = options_of(["--nats-timeout", "PT10M"], environ)
    with caplog.at_level(logging.INFO, logger="registry.wire.bus"), pytest.raises(BusError) as refused:
        await reaches(options)
    where = tmp_path / "config" / "nats" / "context" / "lab.json"
    assert str(refused.value).startswith(
        f"connect: no NATS server at {', '.join(urls)} (from the nats CLI's selected context 'lab' at {where}) "
        "accepted the connection: ConnectionRefusedError"
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_server_that_never_answers_is_given_up_after_the_timeout() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as silent, anyio.create_task_group() as tg:
        tg.start_soon(silent.serve, _say_nothing)
        port = silent.extra(SocketAttribute.local_port)  # noqa: S610  (anyio's typed attribute, no SQL)
        options = options_of(["-s", f"nats://127.0.0.1:{port}", "--nats-timeout", "0.5"], {})
        with pytest.raises(BusError) as refused:
            await reaches(options)
        tg.cancel_scope.cancel()
    assert str(refused.value).startswith(
        f"connect: no NATS server at nats://127.0.0.1:{port} (from the command line) answered within 0.5 s"
    )


async def test_a_long_running_connect_waits_for_a_server_saying_where_it_looks(tmp_path: Path) -> None:
    """`serve` and `reconcile --watch` wait for a first server as for a lost one: told at a slowing
    interval, naming the servers and where they came from, never given up."""
    port = free_port()
    options = options_of(["-s", f"nats://127.0.0.1:{port}"], {})
    told = f"still connecting to nats at nats://127.0.0.1:{port} (from the command line): "
    with logged(told, "registry.wire.bus") as waiter:
        async with anyio.create_task_group() as tg:
            connected, closed = anyio.Event(), anyio.Event()

            async def connecting() -> None:
                async with connect(options) as bus:
                    await bus.flush()
                    connected.set()
                closed.set()

            tg.start_soon(connecting)
            await waiter.wait(within=30)
            async with local_nats(tmp_path / "late", port=port):
                with anyio.fail_after(30):
                    await connected.wait()
                    await closed.wait()  # drained while the server is still there, not retried for seconds


async def _say_nothing(stream: SocketStream) -> None:
    async with stream:
        await anyio.sleep_forever()


async def test_query_without_a_server_exits_3_with_one_line_naming_where_the_url_came_from(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    environ = clean_environment() | with_contexts(tmp_path, {"lab": {"url": url}}, selected="lab")
    command = [str(Path(sys.executable).parent / "mesh-provisioner"), "query", "needs", "--node", "node-1"]
    result = await anyio.run_process(command, env=environ, check=False)
    assert (result.returncode, result.stdout) == (3, b"")
    [line] = result.stderr.decode().splitlines()
    assert line.startswith(f"mesh-provisioner query: connect: no NATS server at {url} (from the nats CLI's selected ")
