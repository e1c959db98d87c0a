"""Making a machine match a declaration: the converging engine (`apply`), what it owns (`footprint`,
`owned`), the directories' policies for files it did not write (`unknown`), owners, services, and the
`--root` every path is taken under."""
