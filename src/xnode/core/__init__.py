"""The pure rules of the node (XIP-49): no I/O, no adapters. See docs/architecture.md."""
