"""Sites: machines elsewhere, each site one nats-server leafed to the hub in a JetStream domain of
its own. Reached through the surface of `registry.access`, like every module of it.

    topology   where the nodes live, as the mesh file names the hub and the sites
    links      what each site's leaf link may carry, and why
    accounts   each site's own account at the hub, where its links bind: what they may reach there
    servers    the hub's and each site's nats-server configuration, and sites.json
    jwt        the same in decentralized JWT mode
    file       sites.json read back (a site's seat, `grants --check`)
    plan       what issuing the sites again would change (`grants --check`)
"""
