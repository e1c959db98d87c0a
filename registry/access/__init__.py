"""Who may do what on the bus: the parties of a mesh, the grants derived for each, their
credentials, and the two ways of giving them to nats-server (a static `accounts.conf`, or signed
JWTs pushed to a resolver). Nothing here needs a connection except pushing an account.
"""

from __future__ import annotations

from registry.access.credentials import SEED_SUFFIX, new_seed, seed_path, write_secret
from registry.access.grants import (
    AccountGrant,
    Grants,
    GrantsFile,
    bound_bucket,
    derive_grants,
    load_party_map,
    read_grants_file,
    writing_domains,
)
from registry.access.issuing import MeshParties, issue_grants
from registry.access.jwt_auth import (
    CLAIMS_UPDATE,
    DEFAULT_RESOLVER_DIR,
    SERVER_AUTH,
    SYSTEM_USER,
    AccountPushError,
    Nkey,
    account_jwt_path,
    account_key,
    account_seed_path,
    claims_of,
    creds_path,
    delete_accounts,
    encode_jwt,
    load_jwt_auth,
    operator_key,
    push_account,
    render_server_auth,
    seeded_accounts,
)
from registry.access.limits import GivenLimits, PartyLimits
from registry.access.live import LiveBuckets, followed_live
from registry.access.mesh_file import MeshFile, MeshFileError, combined, read_mesh_file
from registry.access.parties import DATA_ACCOUNT, REQUEST_INFO, Kind, Party, PartyMap, UnknownAccount
from registry.access.plan import GrantsPlan, ResolverPlan, plan_grants, plan_resolver
from registry.access.sites.file import SiteFileEntry, SitesFile, read_sites_file
from registry.access.sites.links import COPY_PREFIX, CopyConsumer, LeafLink, Permit, leaf_links
from registry.access.sites.plan import SitesPlan, plan_sites
from registry.access.sites.servers import SitesIssued, issue_sites, sites_json
from registry.access.sites.topology import HubEntry, Site, SiteEntry, Topology

__all__ = [
    "CLAIMS_UPDATE",
    "COPY_PREFIX",
    "DATA_ACCOUNT",
    "DEFAULT_RESOLVER_DIR",
    "REQUEST_INFO",
    "SEED_SUFFIX",
    "SERVER_AUTH",
    "SYSTEM_USER",
    "AccountGrant",
    "AccountPushError",
    "CopyConsumer",
    "GivenLimits",
    "Grants",
    "GrantsFile",
    "GrantsPlan",
    "HubEntry",
    "Kind",
    "LeafLink",
    "LiveBuckets",
    "MeshFile",
    "MeshFileError",
    "MeshParties",
    "Nkey",
    "Party",
    "PartyLimits",
    "PartyMap",
    "Permit",
    "ResolverPlan",
    "Site",
    "SiteEntry",
    "SiteFileEntry",
    "SitesFile",
    "SitesIssued",
    "SitesPlan",
    "Topology",
    "UnknownAccount",
    "account_jwt_path",
    "account_key",
    "account_seed_path",
    "bound_bucket",
    "claims_of",
    "combined",
    "creds_path",
    "delete_accounts",
    "derive_grants",
    "encode_jwt",
    "followed_live",
    "issue_grants",
    "issue_sites",
    "leaf_links",
    "load_jwt_auth",
    "load_party_map",
    "new_seed",
    "operator_key",
    "plan_grants",
    "plan_resolver",
    "plan_sites",
    "push_account",
    "read_grants_file",
    "read_mesh_file",
    "read_sites_file",
    "render_server_auth",
    "seed_path",
    "seeded_accounts",
    "sites_json",
    "write_secret",
    "writing_domains",
]
