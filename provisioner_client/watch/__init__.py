"""Watch mode: the node's lease held, changes followed, and drifted env files put back."""
