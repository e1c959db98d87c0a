"""The operators' commands: `mesh-provisioner` (`cli`), the query's tables, `top`, `remove-node` and
`grants`. Only what prints loads rich.
"""
