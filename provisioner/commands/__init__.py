"""The operators' commands: `mesh-provisioner` (`cli`), the query's tables, `top`, `remove-node`,
`grants` (and its `--push`) and `rollout`. Only what prints loads rich.
"""
