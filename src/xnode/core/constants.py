"""Numbers that several rooms share (the core, the store's SQL, the Spark jobs): one definition
each. Numbers owned by one rule stay with it: the retention default in xnode.core.retention,
the plan version in xnode.core.prune_plan."""

from __future__ import annotations

from typing import Final

NS_PER_SECOND: Final = 1_000_000_000
SECONDS_PER_DAY: Final = 86_400

# Reserved originator ids for payloads read from the chain (docs/protocol.md): commits of group
# messages and identity updates. Their envelopes never expire and are never pruned.
GROUP_MESSAGES_ORIGINATOR: Final = 0
IDENTITY_UPDATES_ORIGINATOR: Final = 1
CHAIN_ORIGINATORS: Final = (GROUP_MESSAGES_ORIGINATOR, IDENTITY_UPDATES_ORIGINATOR)
