"""The node's own state in its env folder: one owner for every file the client keeps there.

- `files`: how any of them is written (an exclusive temporary file, mode 0600, fsync, rename) and
  read (a regular file only, never through a link, never more than a bound);
- `records`: one record type (`Record`: name, pydantic schema, size bound), read, validated and
  written atomically; the node's records by name and schema (the ledger, the memory, the waiting
  and the refused writes, the rollouts), the node-local digest key and the keyed digest, the last
  good env files, and which leftovers are the client's.

Every other folder of the client reaches its files through here; this package imports none of them.
"""
