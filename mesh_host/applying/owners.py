"""Owners: a declared "user" or "user:group" as the ids of this machine, and ids said back as names.

Names are looked up in the running machine's user database, under --root too (give numeric ids
for an image whose users differ from the building machine's). A user given alone brings its
primary group.
"""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass


class NoSuchOwner(ValueError):
    """A declared owner names a user or group this machine does not have."""


@dataclass(frozen=True)
class Ids:
    uid: int
    gid: int

    def __str__(self) -> str:
        return f"{user_name(self.uid)}:{group_name(self.gid)}"


def resolve(owner: str) -> Ids:
    """The ids of `owner` ("user" or "user:group", names or numbers) on this machine."""
    user, _, group = owner.partition(":")
    uid, primary = _user(user)
    if group:
        return Ids(uid, _group(group))
    if primary is None:
        raise NoSuchOwner(f'user {uid} has no entry here to take its group from: give "{uid}:GROUP"')
    return Ids(uid, primary)


def _user(user: str) -> tuple[int, int | None]:
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        if user.isdigit():
            return int(user), None
        raise NoSuchOwner(f"no user {user!r} on this machine") from None
    return entry.pw_uid, entry.pw_gid


def _group(group: str) -> int:
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise NoSuchOwner(f"no group {group!r} on this machine") from None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
