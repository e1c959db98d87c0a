"""What a node's modules need, and its resolution: the manifests, the node's own keys and their
memory, and every placeholder resolved through the registry.
"""
