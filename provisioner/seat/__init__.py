"""The seat: the server's composition (connection, buckets, the hourly compile of the registry, the
verb served) and the buckets it creates and keeps.
"""
