"""The provider SDK: what a domain's provider program needs to read the needs addressed to it
and write its `<provider>_bound` values, on the library's wire and contract alone.
"""

from __future__ import annotations

from registry.provider.sdk import BOUND_KIND, Bind, BoundNeed, bound_needs, desired_values, provide

__all__ = ["BOUND_KIND", "Bind", "BoundNeed", "bound_needs", "desired_values", "provide"]
