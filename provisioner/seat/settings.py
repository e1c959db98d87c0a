"""What `mesh-provisioner serve` can be told (`ServerSettings`), read once at the edge by
`registry.edge.load_settings`: command-line flags, then environment variables
`MESH_PROVISIONER_<FIELD>`, then the TOML config file given by `--config` (top-level keys named as
the fields; NATS options in its `[nats]` table), then the defaults. Unknown names are errors.
Durations take a unit (`90s`, `10m`, `1h`). NATS connection options are
`registry.edge.BusSettings` (`--nats-*`, `NATS_*`).

A module of its own, loaded by `serve` alone: the other commands' arguments are
`provisioner.settings`, and a one-shot query builds none of the server's.

Example config file:

    domains_file = "/etc/mesh-provisioner/domains.toml"
    grants_file = "/etc/mesh-provisioner/grants.json"
    providers = ["postgres"]
    compile_interval = 3600
    bucket_replicas = 3
    log_format = "json"

    [nats]
    url = "nats://nats-1:4222,nats://nats-2:4222"
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from provisioner.settings import ENV_PREFIX
from registry.edge import Duration, LogSettings, flag_of
from registry.errors import SettingsError
from registry.runtime import MetricsListen


def _comma_separated(value: Any) -> Any:
    """A list given as text (a flag, an environment variable) is comma-separated names."""
    return [name.strip() for name in value.split(",") if name.strip()] if isinstance(value, str) else value


# A provider module's name makes its bucket's name `<provider>_bound`: only what a bucket name holds.
ProviderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+$")]
# A site's name is its JetStream domain (`registry.access.sites.topology`).
SiteName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+$", max_length=64)]


PauseOnFailure = Literal["placed", "declared", "off"]


def _pause_mode(given: object) -> object:
    """A yes or no as it was before the modes: yes is `placed`, no is `off`."""
    if isinstance(given, bool):
        return "placed" if given else "off"
    if isinstance(given, str) and given.lower() in {"true", "false", "yes", "no", "1", "0"}:
        return "placed" if given.lower() in {"true", "yes", "1"} else "off"
    return given


class ServerSettings(LogSettings):
    """Everything `mesh-provisioner serve` can be told besides how to reach NATS."""

    env_prefix: ClassVar[str] = ENV_PREFIX
    # The node client's variables share the prefix; on a machine running both they are not ours to refuse.
    foreign_env_prefixes: ClassVar[tuple[str, ...]] = ("MESH_PROVISIONER_CLIENT_",)

    domains_file: Path | None = Field(default=None, description="a TOML file adding or overriding domains")
    grants_file: Path | None = Field(
        default=None,
        description="the grants.json written by `mesh-provisioner grants`; without it only requests from the "
        "seat's own account (a single-account development bus) are answered, any other account's refused",
    )
    providers: Annotated[list[ProviderName], BeforeValidator(_comma_separated)] = Field(
        default_factory=list, description="provider modules (comma-separated) whose <provider>_bound bucket it creates"
    )
    compile_interval: Duration = Field(
        default=timedelta(hours=1), gt=timedelta(0), description="how often the registry is compiled again"
    )
    compile_lease_ttl: Duration = Field(
        default=timedelta(seconds=15),
        gt=timedelta(0),
        description="how long the compile lease outlives its holder's last renewal (renewed every third of it)",
    )
    rollback_check: Duration = Field(
        default=timedelta(seconds=30),
        gt=timedelta(0),
        description="how often the seat looks whether a stream it follows went back (a server restarted from a "
        "store behind the writes it had acknowledged): the registry is then compiled again and its views re-read",
    )
    bucket_replicas: int = Field(default=1, ge=1, le=5, description="replicas of the buckets the server creates")
    bucket_storage: Literal["file", "memory"] = Field(
        default="file", description="storage of the buckets the server creates"
    )
    bucket_history: int = Field(default=1, ge=1, le=64, description="values kept per key in the buckets it creates")
    bucket_max_value_size: int = Field(
        default=64 * 1024, ge=1024, description="bytes one value may hold in the buckets it creates (under max_payload)"
    )
    bucket_max_bytes: int = Field(
        default=1024**3, ge=1024 * 1024, description="bytes each bucket it creates may hold in all"
    )
    max_concurrent_requests: int = Field(default=32, ge=1, description="verb requests answered at once")
    max_waiting_requests: int = Field(
        default=1000, ge=0, description="requests waiting beyond those; more are answered 503"
    )
    max_concurrent_per_party: int = Field(
        default=4, ge=1, description="verb requests of one party (another account) answered at once"
    )
    max_waiting_per_party: int = Field(
        default=64, ge=0, description="requests of one party waiting beyond those; more of its are answered 503"
    )
    node_answer_rate: int = Field(
        default=8 * 1024 * 1024,
        ge=0,
        description="bytes of answers a second one node (or writer) is sent, past a burst of 4 s of it; 0: no bound",
    )
    reader_answer_rate: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="bytes of answers a second one operator or provider is sent, past 4 s of it; 0: no bound",
    )
    metrics_listen: MetricsListen | None = Field(
        default=None,
        description="where the seat serves its Prometheus metrics at /metrics: PORT (on 127.0.0.1) or HOST:PORT; "
        "none: no endpoint (provisioner.metrics)",
    )
    shutdown_timeout: Duration = Field(
        default=timedelta(seconds=10), ge=timedelta(0), description="how long requests in flight may take on stop"
    )
    cursor_ttl: Duration = Field(
        default=timedelta(seconds=120), gt=timedelta(0), description="how long a paged listing's cursor stays valid"
    )
    max_cursors: int = Field(default=32, ge=1, description="paged listings kept at once")
    cursor_cache_bytes: int = Field(
        default=128 * 1024 * 1024, ge=0, description="bytes of pages kept for all listings together"
    )
    node_quota_keys: int = Field(
        default=20_000, ge=1, description="keys one node may hold in each of needs, applied, collect and fleet"
    )
    node_quota_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        description="bytes one node may hold in each of those buckets (keys, headers and values, as the stream "
        "counts them); at most the nodes' share of a bucket, three quarters of bucket_max_bytes",
    )
    max_cursors_per_party: int = Field(
        default=8, ge=1, description="paged listings one party (a node, an operator...) may keep at once"
    )
    cursor_cache_bytes_per_party: int = Field(
        default=32 * 1024 * 1024, ge=0, description="bytes of pages one party's listings may hold"
    )
    site: SiteName | None = Field(
        default=None,
        description="run as the seat of this site (a site of sites_file), on the site's server with the site's "
        "seat credentials (seat-SITE.nk or .creds): it makes and checks the site's copies of the hub's buckets and "
        "answers the site's nodes from them; it compiles nothing and writes no bucket of the hub. None: the hub's seat",
    )
    sites_file: Path | None = Field(
        default=None,
        description="the sites.json `mesh-provisioner grants --mesh` wrote (OUT/sites/); with site: that site's "
        "seat; without: the hub's seat, which makes the durable consumers the sites' copies take",
    )

    forget_after: Duration = Field(
        default=timedelta(days=1),
        gt=timedelta(0),
        description="how long a node's lease may stay unrenewed or released before every collection leaves its "
        "contributions out (gone.<node> in the fleet bucket); they come back once it is back",
    )
    gone_marks_interval: Duration = Field(
        default=timedelta(seconds=10),
        gt=timedelta(0),
        description="how often the hub's seat judges which nodes collections forget, and writes what changed",
    )
    pause_on_failure: Annotated[PauseOnFailure, BeforeValidator(_pause_mode)] = Field(
        default="placed",
        description="the hub's seat pauses a module's rollout when a node running it fails its change "
        "(rollout.<module> in the fleet bucket): 'placed', when placement says the node runs it; "
        "'declared', also a module placement holds for no node, on a node's needs of it (its own word); "
        "'off': only operators pause (provisioner.seat.rollouts)",
    )
    sites_reread: Duration = Field(
        default=timedelta(seconds=30),
        gt=timedelta(0),
        description="the hub's seat: how often it reads sites_file again, for the consumers of sites added or removed",
    )

    @model_validator(mode="after")
    def _quota_within_the_nodes_share(self) -> Self:
        from provisioner.seat.quotas import nodes_share  # noqa: PLC0415 (the seat's: a query never loads it)

        share = nodes_share(self.bucket_max_bytes)
        if self.node_quota_bytes > share:
            reason = (
                f"{self.node_quota_bytes} is more than the nodes' share of a bucket ({share}: "
                f"{flag_of(type(self), 'bucket_max_bytes')} less the seat's reserve); lower it or raise the bucket"
            )
            raise SettingsError(flag_of(type(self), "node_quota_bytes"), reason)
        return self

    @model_validator(mode="after")
    def _site_with_its_file(self) -> Self:
        if self.site is not None and self.sites_file is None:
            raise SettingsError(flag_of(type(self), "site"), f"needs {flag_of(type(self), 'sites_file')}: sites.json")
        if self.site is not None and self.grants_file is None:
            reason = f"needs {flag_of(type(self), 'grants_file')}: a site's seat answers its nodes, other accounts"
            raise SettingsError(flag_of(type(self), "site"), reason)
        return self
