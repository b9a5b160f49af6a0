"""Payer digests: what each payer envelope's signature covers, kept with the envelopes this
node originates, so a payer envelope already published here is refused rather than stored
(and billed) again (docs/protocol.md, "Replays").

The digest is the payer signature's (keccak256 of the target originator and the client
envelope, XIP-49 3.3.1): `message_retention_days` lies outside it, so a replay with another
retention has the same digest. Envelopes received from peers, chain payloads and those
stored before this migration have none (NULL): a partial index holds only the rest.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

STATEMENTS = [
    "ALTER TABLE originator_envelopes ADD COLUMN payer_digest bytea",
    # On the partitioned table: every partition, those the node adds later included.
    """CREATE INDEX originator_envelopes_payer_digest ON originator_envelopes (payer_digest)
        WHERE payer_digest IS NOT NULL""",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP INDEX originator_envelopes_payer_digest")
    op.execute("ALTER TABLE originator_envelopes DROP COLUMN payer_digest")
