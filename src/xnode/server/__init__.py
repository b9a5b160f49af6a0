"""The composition root of a node (and the parts the gateway shares with it):
`bootstrap` (settings, identity, database, registry, chain connection), `wiring` (builds and
starts the node's parts), `serving` (gRPC, HTTP and metrics listeners, their drain),
`stops` (the one stop order), `gauges` and `roles` (worker processes)."""
