"""The postgres provisioner against a real PostgreSQL (tests/postgres.py): roles and databases made
to match the delivered consumers, rotation, removal, hostile names and passwords, idempotence judged
by the server's own statement log, and no password in any log line, argument or server log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from examples.postgres_provisioner import scram
from examples.postgres_provisioner.consumers import Digests, parse_consumers, parse_env
from examples.postgres_provisioner.errors import DeliveryError, PostgresUnavailable
from examples.postgres_provisioner.reconcile import Outcome
from examples.postgres_provisioner.watching import Plan, apply_once
from mesh_dev.standins import DEV_SECRETS, Vault, vault_serving
from provisioner_client.materializing.envfile import render
from provisioner_client.reconcile import ClientPlan, reconcile
from registry.access import Kind
from registry.provider import Bind, BoundNeed, provide
from tests.helpers import clean_environment, sh_env
from tests.isolation import Mesh, mesh_server, party
from tests.postgres import Lines, Postgres, initialised_cluster, running_postgres

APP = {"name": "app", "database": "app", "password": "app-pass-1"}
BILLING = {"name": "billing", "database": "billing_db", "password": "b;'\"illing pass"}
VICTIM = "victim"


@pytest.fixture(scope="session")
def cluster_template() -> Iterator[Path]:
    with initialised_cluster() as data:
        yield data


@pytest.fixture
def postgres(cluster_template: Path) -> Iterator[Postgres]:
    with running_postgres(cluster_template) as server:
        server.query(f"CREATE ROLE {VICTIM} LOGIN PASSWORD 'victim-pass'")
        server.query(f"CREATE DATABASE {VICTIM}db OWNER {VICTIM}")
        yield server


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return tmp_path / "env" / "postgres.env"


def deliver(path: Path, *consumers: Mapping[str, str]) -> None:
    """The provider module's env file as the node client writes it, replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    value = json.dumps({"consumers": list(consumers)})
    temporary = path.with_name(".postgres.env.tmp")
    temporary.write_bytes(render("postgres", {"PG_CONSUMERS": value, "PG_PORT": "5432"}))
    temporary.replace(path)


def apply(postgres: Postgres, env_file: Path, digests: Digests | None = None) -> Outcome:
    return apply_once(Plan(env_file=env_file, dsn=postgres.admin_dsn), digests or Digests())


def logs_in(postgres: Postgres, consumer: Mapping[str, str]) -> tuple[object, ...]:
    """Connects over TCP with the consumer's password: who and where the server says it is."""
    dsn = postgres.tcp_dsn(consumer["name"], consumer["password"], consumer["database"])
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_user, current_database()").fetchone()
    assert row is not None
    return row


def refused(postgres: Postgres, consumer: Mapping[str, str]) -> bool:
    try:
        logs_in(postgres, consumer)
    except psycopg.OperationalError as err:
        return "password authentication failed" in str(err)
    return False


def changes_in(statements: list[str]) -> list[str]:
    return [s for s in statements if s.split(" ", 1)[0].upper() in ("CREATE", "ALTER", "DROP", "COMMENT")]


def test_each_consumer_gets_its_role_and_its_own_database_and_logs_in(postgres: Postgres, env_file: Path) -> None:
    deliver(env_file, APP, BILLING)

    outcome = apply(postgres, env_file)

    assert outcome.ok and outcome.created_roles == ["app", "billing"]
    assert outcome.created_databases == ["app", "billing_db"]
    assert postgres.databases() | {} == {
        "postgres": "postgres",
        f"{VICTIM}db": VICTIM,
        "app": "app",
        "billing_db": "billing",
    }
    assert logs_in(postgres, APP) == ("app", "app")
    assert logs_in(postgres, BILLING) == ("billing", "billing_db")


@pytest.mark.parametrize("same_process", [True, False], ids=["the next poll", "a new process"])
def test_a_second_run_with_nothing_changed_creates_and_alters_nothing(
    postgres: Postgres, env_file: Path, same_process: bool
) -> None:
    deliver(env_file, APP, BILLING)
    digests = Digests()
    apply(postgres, env_file, digests)
    before = postgres.log_size()

    again = apply(postgres, env_file, digests if same_process else Digests())

    assert again.ok and not again.changed, again.summary()
    assert changes_in(postgres.statements(before)) == []


def test_a_password_changed_by_hand_is_put_back(postgres: Postgres, env_file: Path) -> None:
    deliver(env_file, APP)
    digests = Digests()
    apply(postgres, env_file, digests)
    postgres.query("ALTER ROLE app PASSWORD 'changed-by-hand'")

    again = apply(postgres, env_file, digests)

    assert again.altered_roles == ["app"]
    assert logs_in(postgres, APP) == ("app", "app")


def test_rotation_refuses_the_old_password_accepts_the_new_and_alters_nothing_else(
    postgres: Postgres, env_file: Path
) -> None:
    deliver(env_file, APP, BILLING)
    digests = Digests()
    apply(postgres, env_file, digests)
    rotated = {**APP, "password": "app-pass-2"}
    deliver(env_file, rotated, BILLING)
    before = postgres.log_size()

    outcome = apply(postgres, env_file, digests)

    assert outcome.ok and outcome.altered_roles == ["app"]
    assert not (outcome.created_roles or outcome.created_databases or outcome.dropped_roles)
    assert [s.split(" ")[:3] for s in changes_in(postgres.statements(before))] == [["ALTER", "ROLE", '"app"']]
    assert refused(postgres, APP)
    assert logs_in(postgres, rotated) == ("app", "app")
    assert logs_in(postgres, BILLING) == ("billing", "billing_db")


def test_a_consumer_removed_loses_its_role_and_database_and_what_was_made_by_hand_stays(
    postgres: Postgres, env_file: Path
) -> None:
    deliver(env_file, APP, BILLING)
    apply(postgres, env_file)
    with psycopg.connect(postgres.tcp_dsn("billing", BILLING["password"], "billing_db")) as session:
        deliver(env_file, APP)
        outcome = apply(postgres, env_file)
        assert session.closed or session.broken or _session_gone(session)

    assert outcome.dropped_databases == ["billing_db"] and outcome.dropped_roles == ["billing"]
    assert postgres.roles() >= {"app", VICTIM, "postgres"} and "billing" not in postgres.roles()
    assert "billing_db" not in postgres.databases() and postgres.databases()[f"{VICTIM}db"] == VICTIM
    assert logs_in(postgres, APP) == ("app", "app")
    assert logs_in(postgres, {"name": VICTIM, "database": f"{VICTIM}db", "password": "victim-pass"})


def _session_gone(session: psycopg.Connection[tuple[object, ...]]) -> bool:
    try:
        session.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


def test_a_role_made_by_hand_is_never_taken_over(postgres: Postgres, env_file: Path) -> None:
    deliver(env_file, APP, {"name": VICTIM, "database": "stolen", "password": "attacker"})

    outcome = apply(postgres, env_file)

    assert not outcome.ok and outcome.created_roles == ["app"]
    assert outcome.refused == [
        f"{VICTIM!r}: role exists and was not created by mesh-postgres-provisioner: left as it is"
    ]
    assert "stolen" not in postgres.databases()
    assert logs_in(postgres, {"name": VICTIM, "database": f"{VICTIM}db", "password": "victim-pass"})
    deliver(env_file)
    assert apply(postgres, env_file).dropped_roles == ["app"]
    assert VICTIM in postgres.roles()


HOSTILE = [
    {
        "name": 'x"; DROP ROLE victim; --',
        "database": "d'; DROP DATABASE victimdb; --",
        "password": "p'; DROP ROLE victim; --",
    },
    {"name": "Ünïcødé ロール with spaces", "database": "データベース", "password": 'quote " and \\ and $HOME and `x`'},
    {"name": "long", "database": "long", "password": "ロ" + ("a;'\" \\" * 200)[:999]},
    {"name": "prepared", "database": "prepared", "password": "non\u00a0breaking soft\u00adhyphen cafe\u0301 ﬁ"},
    {"name": "right to left", "database": "rtl", "password": "\u05d0abc\u05d1"},
]


def test_hostile_names_and_passwords_are_applied_literally(postgres: Postgres, env_file: Path) -> None:
    assert len(HOSTILE[2]["password"]) == 1000
    deliver(env_file, *HOSTILE)

    outcome = apply(postgres, env_file)

    assert outcome.ok, outcome.refused
    assert postgres.roles() == {"postgres", VICTIM, *(c["name"] for c in HOSTILE)}
    assert postgres.databases() == {
        "postgres": "postgres",
        f"{VICTIM}db": VICTIM,
        **{c["database"]: c["name"] for c in HOSTILE},
    }
    for consumer in HOSTILE:
        assert logs_in(postgres, consumer) == (consumer["name"], consumer["database"])
    assert not apply(postgres, env_file).changed


@pytest.mark.parametrize(
    ("consumer", "reason"),
    [
        ({"name": "n" * 1000, "database": "d", "password": "p"}, "consumer 2: name is 1000 bytes; PostgreSQL keeps 63"),
        ({"name": "n", "database": "é" * 32, "password": "p"}, "consumer 2: database is 64 bytes"),
        ({"name": "pg_monitor", "database": "d", "password": "p"}, "consumer 2: name 'pg_monitor' is reserved"),
        ({"name": "n", "database": "d", "password": "é" * 513}, "consumer 2: the password is longer than 1024 bytes"),
        ({"name": "app", "database": "other", "password": "p"}, "name 'app' is given to two consumers"),
        ({"name": "n", "database": "d", "password": ""}, "consumer 2: password must be a non-empty text"),
        ({"name": "n", "database": "d", "password": "p", "extra": "x"}, "consumer 2: expected exactly the fields"),
    ],
    ids=[
        "a name PostgreSQL would truncate",
        "a database name too long in bytes",
        "a reserved name",
        "a password libpq cannot send",
        "a name given twice",
        "an empty password",
        "an unknown field",
    ],
)
def test_a_delivery_postgres_cannot_take_literally_changes_nothing(
    postgres: Postgres, env_file: Path, consumer: Mapping[str, str], reason: str
) -> None:
    deliver(env_file, APP, consumer)
    before = postgres.log_size()

    with pytest.raises(DeliveryError) as refusal:
        apply(postgres, env_file)

    assert reason in str(refusal.value)
    assert "é" * 10 not in str(refusal.value)
    assert postgres.statements(before) == [] and "app" not in postgres.roles()


def test_postgres_away_is_said_clearly(env_file: Path, tmp_path: Path) -> None:
    deliver(env_file, APP)
    with pytest.raises(PostgresUnavailable) as away:
        apply_once(Plan(env_file=env_file, dsn=f"host={tmp_path} port=1 user=postgres"), Digests())
    assert str(away.value).startswith("PostgreSQL is not available: connection")
    assert APP["password"] not in str(away.value)


def test_watch_mode_applies_each_change_and_no_password_reaches_a_log_or_an_argument(
    postgres: Postgres, env_file: Path
) -> None:
    deliver(env_file, APP, BILLING)
    rotated = {**APP, "password": "app-pass-rotated"}
    command = [
        sys.executable,
        "-m",
        "examples.postgres_provisioner",
        "--env-file",
        str(env_file),
        "--dsn",
        postgres.admin_dsn,
        "--watch",
        "--poll",
        "0.05",
        "--log-level",
        "DEBUG",
    ]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, env=clean_environment())
    assert child.stderr is not None
    lines = Lines(child.stderr)
    try:
        lines.until("reconciled 2 consumers: 2 roles created")
        arguments = Path(f"/proc/{child.pid}/cmdline").read_bytes().decode()
        deliver(env_file, rotated)
        lines.until(
            "reconciled 1 consumers: 0 roles created, 1 roles altered, 0 databases created, "
            "0 databases altered, 1 databases dropped, 1 roles dropped"
        )
        assert refused(postgres, APP) and logs_in(postgres, rotated) == ("app", "app")
        child.send_signal(signal.SIGTERM)
        lines.until("stopping on SIGTERM")
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
        child.stderr.close()
    passwords = [APP["password"], BILLING["password"], rotated["password"]]
    for password in passwords:
        assert password not in arguments
        assert not [line for line in lines.seen if password in line]
        assert password not in postgres.log()
    assert "ALTER ROLE" in postgres.log()  # the log does hold the statements: what it holds is judged


def test_the_console_script_exits_by_what_happened(postgres: Postgres, env_file: Path) -> None:
    def run(*extra: str) -> int:
        command = [sys.executable, "-m", "examples.postgres_provisioner", "--env-file", str(env_file), *extra]
        return subprocess.run(command, env=clean_environment(), capture_output=True, check=False).returncode

    deliver(env_file, APP)
    assert run("--dsn", postgres.admin_dsn) == 0
    assert run("--dsn", f"host={env_file.parent} port=1 user=postgres") == 3
    assert run("--dsn", postgres.admin_dsn, "--variable", "MISSING") == 2
    deliver(env_file, {"name": VICTIM, "database": "v2", "password": "p"})
    assert run("--dsn", postgres.admin_dsn) == 1


@pytest.mark.parametrize(
    "value",
    ['{"consumers": []}', 'quote " back \\ dollar $HOME tick ` end', "new\nline # not a comment", "", "é ロ"],
    ids=["json", "every escaped character", "a newline and a hash", "empty", "unicode"],
)
def test_the_env_file_reads_back_what_the_node_client_wrote(value: str) -> None:
    text = render("postgres", {"A": "first", "PG_CONSUMERS": value, "Z": "last"}).decode()
    assert parse_env(text, "test") == {"A": "first", "PG_CONSUMERS": value, "Z": "last"}


def test_a_consumers_value_is_read_whole() -> None:
    consumers = parse_consumers(json.dumps({"consumers": [APP, BILLING]}), "test")
    assert [(c.name, c.database) for c in consumers] == [("app", "app"), ("billing", "billing_db")]
    assert APP["password"] not in repr(consumers)


def test_a_verifier_holds_no_password_and_matches_only_its_own() -> None:
    stored = scram.verifier("pencil")
    assert stored.startswith("SCRAM-SHA-256$4096:") and "pencil" not in stored
    assert scram.matches("pencil", stored) and not scram.matches("pencil2", stored)
    fixed = scram.verifier("pencil", salt=b"0123456789abcdef")
    assert fixed == scram.verifier("pencil", salt=b"0123456789abcdef") != stored


@pytest.mark.parametrize(
    ("password", "prepared"),
    [
        ("plain ascii \t", b"plain ascii \t"),
        ("non\u00a0breaking", b"non breaking"),
        ("soft\u00adhyphen", b"softhyphen"),
        ("cafe\u0301 \ufb01", "café fi".encode()),
        ("\u05d0abc\u05d1", "\u05d0abc\u05d1".encode()),  # bidirectional text out of order: used raw
        ("bell\u0007é", "bell\u0007é".encode()),  # a prohibited control character: used raw
    ],
    ids=["ascii as is", "a non-ASCII space mapped", "a soft hyphen removed", "NFKC", "bidi raw", "prohibited raw"],
)
def test_saslprep_prepares_a_password_as_postgres_does(password: str, prepared: bytes) -> None:
    assert scram.saslprep(password) == prepared


def test_postgres_runs_as_an_unprivileged_user(postgres: Postgres) -> None:
    postmaster = int((postgres.root / "data" / "postmaster.pid").read_text().split()[0])
    assert Path(f"/proc/{postmaster}").stat().st_uid != 0


def test_the_provisioner_stands_on_registry_alone() -> None:
    script = "import json, sys\nimport examples.postgres_provisioner.cli\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout)
    forbidden = ("provisioner", "provisioner_client", "mesh_dev", "nats")
    assert [m for m in loaded if m.split(".")[0] in forbidden] == []


def test_the_dev_vault_issues_structured_consumers_and_rotates_one() -> None:
    vault = Vault()
    issued = parse_consumers(vault.consumers_value("db"), "vault")
    assert [(c.name, c.database, c.password) for c in issued] == [("app", "app", DEV_SECRETS["db-password"])]
    vault.rotate_consumer("app", 'new "pass"; é')
    assert [c.password for c in parse_consumers(vault.consumers_value("db"), "vault")] == ['new "pass"; é']
    assert vault.secrets["db-password"] == 'new "pass"; é', "the consumer module reads the same credential"
    with pytest.raises(KeyError):
        vault.rotate_consumer("nobody", "x")


async def test_end_to_end_a_consumer_connects_with_what_the_mesh_delivered_through_rotation_and_removal(
    postgres: Postgres, tmp_path: Path
) -> None:
    """Seat, vault on its own key, the provider writing `postgres_bound`, the provider machine n2's
    client writing the consumers into its env file, the provisioner in watch mode, and consumer
    node n1's client resolving where and how to connect: every party on its own account."""
    n1, n2 = _node_plan(tmp_path, "n1", APP_MANIFEST), _node_plan(tmp_path, "n2", PROVIDER_MANIFEST)
    vault = Vault(parties=None)
    async with mesh_server(tmp_path / "mesh") as mesh, _vault_served(mesh, vault):
        vault.parties = mesh.grants.party_map()
        async with (
            mesh.connect(party(Kind.NODE, "n1")) as consumer_node,
            mesh.connect(party(Kind.NODE, "n2")) as provider_node,
            mesh.connect(party(Kind.PROVIDER, "postgres")) as provider,
        ):
            bind = _binding(postgres.port)
            await reconcile(consumer_node, n1)  # registers its needs
            await provide(provider, "postgres", bind)
            assert (await reconcile(provider_node, n2)).ok
            with _watching(postgres, n2.materialize / "postgres.env") as lines:
                await anyio.to_thread.run_sync(lines.until, "reconciled 1 consumers: 1 roles created")
                assert (await reconcile(consumer_node, n1)).ok
                first = sh_env(n1.materialize / "app.env")
                assert _connect_as(first) == ("app", "app")

                vault.rotate_consumer("app", "rotated; 'é\" pass")
                assert (await reconcile(provider_node, n2)).ok
                await anyio.to_thread.run_sync(lines.until, "1 roles altered")
                assert (await reconcile(consumer_node, n1)).ok
                rotated = sh_env(n1.materialize / "app.env")
                assert rotated["DB_PASSWORD"] == "rotated; 'é\" pass"
                assert _connect_as(rotated) == ("app", "app")
                with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                    _connect_as(first)

                (n1.manifests / "app.json").unlink()
                await reconcile(consumer_node, n1)
                removed = await provide(provider, "postgres", bind)
                vault.consumers["db"] = ()
                assert (await reconcile(provider_node, n2)).ok
                await anyio.to_thread.run_sync(lines.until, "1 databases dropped, 1 roles dropped")
    assert sorted(removed.deleted) == ["n1.app.db.database", "n1.app.db.host", "n1.app.db.port"]
    assert "app" not in postgres.roles() and VICTIM in postgres.roles()
    assert "rotated" not in postgres.log() and "rotated" not in "\n".join(lines.seen)


APP_MANIFEST = {
    "module": "app",
    "env": {
        "DB_HOST": "${bound:postgres:db:host}",
        "DB_PORT": "${bound:postgres:db:port}",
        "DB_NAME": "${bound:postgres:db:database}",
        "DB_USER": "app",
        "DB_PASSWORD": "${secret:db-password}",
    },
}
PROVIDER_MANIFEST = {"module": "postgres", "env": {"PG_CONSUMERS": "${consumers:db}"}}


def _node_plan(tmp_path: Path, node: str, manifest: Mapping[str, object]) -> ClientPlan:
    manifests = tmp_path / node / "manifests"
    manifests.mkdir(parents=True)
    (manifests / f"{manifest['module']}.json").write_text(json.dumps(manifest))
    return ClientPlan(node, manifests, tmp_path / node / "env", timedelta(seconds=5))


def _binding(port: int) -> Bind:
    """The provider's answer for provision db: where it serves, and the database named after the module."""

    def bind(need: BoundNeed) -> object:
        values: dict[str | None, object] = {"host": "127.0.0.1", "port": port, "database": need.module}
        return values.get(need.local) if need.provision == "db" else None

    return bind


@asynccontextmanager
async def _vault_served(mesh: Mesh, vault: Vault) -> AsyncIterator[None]:
    async with mesh.connect(party(Kind.VAULT)) as bus, vault_serving(bus, vault):
        yield


@contextmanager
def _watching(postgres: Postgres, env_file: Path) -> Iterator[Lines]:
    """The provisioner in watch mode, as its own process, until the block ends (then SIGTERM)."""
    command = [
        sys.executable,
        "-m",
        "examples.postgres_provisioner",
        "--env-file",
        str(env_file),
        "--dsn",
        postgres.admin_dsn,
        "--watch",
        "--poll",
        "0.05",
    ]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, env=clean_environment())
    assert child.stderr is not None
    try:
        yield Lines(child.stderr)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
        child.stderr.close()


def _connect_as(env: Mapping[str, str]) -> tuple[object, ...]:
    dsn = make_conninfo(
        host=env["DB_HOST"],
        port=env["DB_PORT"],
        dbname=env["DB_NAME"],
        user=env["DB_USER"],
        password=env["DB_PASSWORD"],
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_user, current_database()").fetchone()
    assert row is not None
    return row


@pytest.mark.parametrize(
    ("value", "says"),
    [("[" * 10_000 + "]" * 10_000, "levels deep"), ("{not json", "not valid JSON")],
    ids=["nested 10,000 deep", "not JSON"],
)
def test_a_hostile_consumers_value_is_a_delivery_error_never_a_crash(value: str, says: str) -> None:
    with pytest.raises(DeliveryError, match=says):
        parse_consumers(value, "vault")
