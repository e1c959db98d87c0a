"""What a resolution becomes on the machine: env files written atomically (mode 0600) and the
change action run once per change.
"""
