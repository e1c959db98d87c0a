"""Telling what a machine is and can be asked to do: `profile` (each capability detected by one
detector of `detect/`, every verdict saying how it knows) and `inventory` (each fact with its source)."""
