"""xnode: a node daemon for the XIP-49 decentralized message-replication network.

The modules at this level are the domain core: pure functions and values, no I/O.
Adapters live in subpackages (api, store, chain, replication).
"""
