"""Making PostgreSQL match the delivered consumers.

Each consumer's role exists, may log in and holds that password (as a SCRAM verifier computed
here); its database exists and is owned by it. What the provisioner creates is marked with a
comment in PostgreSQL itself (`COMMENT ON ROLE|DATABASE ... IS 'managed by mesh-postgres-provisioner'`):
that is its footprint. Managed databases and roles no longer delivered are dropped; a role or a
database without the mark is never touched, and a consumer whose name is taken by one is refused.

A password is compared, never re-applied blindly: by the keyed digest of the one last applied
(`Digests`, kept between polls) while PostgreSQL still holds the verifier it held then, otherwise
against that verifier itself (read from `pg_authid` when the provisioner may: a superuser). So a
second run with nothing changed issues no `CREATE` or `ALTER`, and a password changed by hand is
put back. Every identifier and value reaches a statement through psycopg's composition
(`sql.Identifier`, `sql.Literal`) or parameters, never by formatting text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from psycopg import sql

from examples.postgres_provisioner import scram
from examples.postgres_provisioner.consumers import Consumer, Digests
from examples.postgres_provisioner.errors import PostgresUnavailable
from registry.runtime import event

log = logging.getLogger(__name__)
T = TypeVar("T")

MARK = "managed by mesh-postgres-provisioner"
APPLICATION = "mesh-postgres-provisioner"


@dataclass
class Outcome:
    """What one reconcile did, by role and database name, and what it refused and why."""

    created_roles: list[str] = field(default_factory=list)
    altered_roles: list[str] = field(default_factory=list)
    created_databases: list[str] = field(default_factory=list)
    altered_databases: list[str] = field(default_factory=list)
    dropped_databases: list[str] = field(default_factory=list)
    dropped_roles: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused

    @property
    def changed(self) -> bool:
        lists = (self.created_roles, self.altered_roles, self.created_databases, self.altered_databases)
        return any(lists) or bool(self.dropped_databases or self.dropped_roles)

    def summary(self) -> str:
        counts = {
            "roles created": self.created_roles,
            "roles altered": self.altered_roles,
            "databases created": self.created_databases,
            "databases altered": self.altered_databases,
            "databases dropped": self.dropped_databases,
            "roles dropped": self.dropped_roles,
            "refused": self.refused,
        }
        return ", ".join(f"{len(names)} {what}" for what, names in counts.items())


@dataclass(frozen=True)
class _Role:
    can_login: bool
    managed: bool


@dataclass(frozen=True)
class _Database:
    owner: str
    managed: bool


class _State:
    """The roles and databases PostgreSQL holds, and the verifiers of the managed roles."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        rows = conn.execute(
            "SELECT rolname, rolcanlogin, shobj_description(oid, 'pg_authid') = %s FROM pg_roles", (MARK,)
        ).fetchall()
        self.roles = {str(name): _Role(bool(login), bool(managed)) for name, login, managed in rows}
        rows = conn.execute(
            "SELECT datname, pg_get_userbyid(datdba), shobj_description(oid, 'pg_database') = %s FROM pg_database",
            (MARK,),
        ).fetchall()
        self.databases = {str(name): _Database(str(owner), bool(managed)) for name, owner, managed in rows}
        self.verifiers = _verifiers(conn, [name for name, role in self.roles.items() if role.managed])


def _verifiers(conn: psycopg.Connection[tuple[object, ...]], roles: Sequence[str]) -> dict[str, str] | None:
    """The stored verifier of each of `roles`, or None when this connection may not read them."""
    try:
        rows = conn.execute("SELECT rolname, rolpassword FROM pg_authid WHERE rolname = ANY(%s)", (list(roles),))
    except psycopg.errors.InsufficientPrivilege:
        return None
    return {str(name): str(stored or "") for name, stored in rows.fetchall()}


def connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection with libpq's settings (`dsn`, then the `PG*` variables)."""
    try:
        return psycopg.connect(dsn, autocommit=True, fallback_application_name=APPLICATION, client_encoding="UTF8")
    except psycopg.OperationalError as err:
        raise PostgresUnavailable(_first_line(err)) from None


def reconcile(dsn: str, consumers: Sequence[Consumer], digests: Digests) -> Outcome:
    """Makes PostgreSQL match `consumers`; raises `PostgresUnavailable` when it cannot be reached."""
    try:
        with connect(dsn) as conn:
            return _Reconcile(conn, digests).run(consumers)
    except psycopg.OperationalError as err:
        raise PostgresUnavailable(_first_line(err)) from None


class _Reconcile:
    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], digests: Digests) -> None:
        self.conn = conn
        self.digests = digests
        self.state = _State(conn)
        self.outcome = Outcome()
        self.failed: set[str] = set()

    def run(self, consumers: Sequence[Consumer]) -> Outcome:
        for consumer in consumers:
            self._step(consumer.name, self._role, consumer)
            if consumer.name not in self.failed:
                self._step(consumer.database, self._database, consumer)
        names = {c.name for c in consumers}
        databases = {c.database for c in consumers}
        for database, found in sorted(self.state.databases.items()):
            if found.managed and database not in databases:
                self._step(database, self._drop_database, database)
        for role, found_role in sorted(self.state.roles.items()):
            if found_role.managed and role not in names:
                self._step(role, self._drop_role, role)
        return self.outcome

    def _step(self, name: str, action: Callable[[T], None], subject: T) -> None:
        """`action(subject)`; PostgreSQL refusing it refuses `name`, and the rest goes on."""
        try:
            action(subject)
        except psycopg.OperationalError:
            raise
        except psycopg.Error as err:
            self._refuse(name, f"PostgreSQL refused: {_first_line(err)}")

    def _role(self, consumer: Consumer) -> None:
        found = self.state.roles.get(consumer.name)
        if found is None:
            self._create_role(consumer)
        elif not found.managed:
            self._refuse(consumer.name, "role exists and was not created by mesh-postgres-provisioner: left as it is")
        elif not found.can_login or not self._password_holds(consumer):
            self._alter_role(consumer)

    def _password_holds(self, consumer: Consumer) -> bool:
        digest = self.digests.of(consumer.name, consumer.password)
        stored = None if self.state.verifiers is None else self.state.verifiers.get(consumer.name, "")
        if self.digests.applied(consumer.name) == (digest, stored or ""):
            return True
        if stored and scram.matches(consumer.password, stored):
            self.digests.remember(consumer.name, digest, stored)
            return True
        return False

    def _create_role(self, consumer: Consumer) -> None:
        stored = scram.verifier(consumer.password)
        with self.conn.transaction():
            self._run("CREATE ROLE {} WITH LOGIN PASSWORD {}", sql.Identifier(consumer.name), sql.Literal(stored))
            self._run("COMMENT ON ROLE {} IS {}", sql.Identifier(consumer.name), sql.Literal(MARK))
        self._applied(consumer, stored)
        self.outcome.created_roles.append(consumer.name)
        log.info("role created", extra=event(name=consumer.name))

    def _alter_role(self, consumer: Consumer) -> None:
        stored = scram.verifier(consumer.password)
        self._run("ALTER ROLE {} WITH LOGIN PASSWORD {}", sql.Identifier(consumer.name), sql.Literal(stored))
        self._applied(consumer, stored)
        self.outcome.altered_roles.append(consumer.name)
        log.info("role's password set", extra=event(name=consumer.name))

    def _applied(self, consumer: Consumer, stored: str) -> None:
        known = "" if self.state.verifiers is None else stored
        self.digests.remember(consumer.name, self.digests.of(consumer.name, consumer.password), known)

    def _database(self, consumer: Consumer) -> None:
        found = self.state.databases.get(consumer.database)
        if found is None:
            self._run("CREATE DATABASE {} OWNER {}", sql.Identifier(consumer.database), sql.Identifier(consumer.name))
            self._run("COMMENT ON DATABASE {} IS {}", sql.Identifier(consumer.database), sql.Literal(MARK))
            self.outcome.created_databases.append(consumer.database)
            log.info("database created", extra=event(name=consumer.database, what=f"owner {consumer.name}"))
        elif not found.managed:
            self._refuse(consumer.database, "database exists and was not created by mesh-postgres-provisioner")
        elif found.owner != consumer.name:
            self._run("ALTER DATABASE {} OWNER TO {}", sql.Identifier(consumer.database), sql.Identifier(consumer.name))
            self.outcome.altered_databases.append(consumer.database)
            log.info("database given to its consumer", extra=event(name=consumer.database))

    def _drop_database(self, database: str) -> None:
        self._run("DROP DATABASE {} WITH (FORCE)", sql.Identifier(database))
        self.outcome.dropped_databases.append(database)
        log.info("database dropped: no longer delivered", extra=event(name=database))

    def _drop_role(self, role: str) -> None:
        self.conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        self._run("DROP ROLE {}", sql.Identifier(role))
        self.digests.forget(role)
        self.outcome.dropped_roles.append(role)
        log.info("role dropped: no longer delivered", extra=event(name=role))

    def _refuse(self, name: str, reason: str) -> None:
        self.failed.add(name)
        log.error("consumer refused: %s", reason, extra=event(name=name))
        self.outcome.refused.append(f"{name!r}: {reason}")

    def _run(self, statement: str, *parts: sql.Composable) -> None:
        self.conn.execute(sql.SQL(statement).format(*parts))


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
