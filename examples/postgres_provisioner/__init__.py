"""A provider program made real: makes a PostgreSQL accept the consumers the mesh delivered to
the provider module's env file. See README.md beside this file."""
