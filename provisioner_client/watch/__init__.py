"""Watch mode: the node's lease held, changes followed (the fleet's rollouts among them), and drifted
env files put back."""
