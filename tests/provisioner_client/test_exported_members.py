"""The public surface of provisioner_client is what __all__ says, and each name is importable."""

from __future__ import annotations

import provisioner_client


def test_the_public_surface_is_pinned() -> None:
    assert sorted(provisioner_client.__all__) == [
        "ClientError",
        "ClientPlan",
        "ClientSettings",
        "ForeignKeyError",
        "ManifestError",
        "MaterializeError",
        "ModuleReport",
        "NodeStatus",
        "Report",
        "WatchTiming",
        "read_status",
        "reconcile",
        "watch",
    ]
    for name in provisioner_client.__all__:
        assert getattr(provisioner_client, name) is not None
