"""A protocol-level client of the network for tools, tests and benchmarks (XIP-49 3.3; not
MLS): `network.NetworkClient` publishes, queries and subscribes with the checks of 3.3.4,
causal order (3.3.5) and failover (3.3.6); `node.NodeClient` speaks to one node, unchecked."""
