"""The verb `mesh-provisioner.provisioning`, answered: a request validated and scoped to who asks
(`handler`, `request`), the one place that decides how it is answered (`answering`), the views
answered from memory (`registry_view`, `nodes`), and listings paged or streamed from a bucket.
"""
