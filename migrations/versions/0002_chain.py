"""Chain indexer: progress per contract, recent block hashes (re-org detection), where each
chain payload came from, identity associations (GetInboxIds) and skipped malformed events.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

STATEMENTS = [
    # The last block fully indexed for each contract, with its hash: on restart the indexer
    # checks that hash against the chain before it goes on.
    """CREATE TABLE chain_progress (
        contract text PRIMARY KEY,
        address bytea NOT NULL,
        block_number bigint NOT NULL,
        block_hash bytea NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    )""",
    # Hashes of recently indexed blocks (range ends and blocks with events). After a re-org
    # the highest one still on the chain is where the canonical chain forked.
    """CREATE TABLE chain_blocks (
        block_number bigint PRIMARY KEY,
        block_hash bytea NOT NULL
    )""",
    # Where each chain payload (originator 0 or 1) was mined; a re-org deletes by block.
    """CREATE TABLE chain_payloads (
        originator_node_id integer NOT NULL,
        originator_sequence_id bigint NOT NULL,
        block_number bigint NOT NULL,
        block_hash bytea NOT NULL,
        transaction_hash bytea NOT NULL,
        log_index integer NOT NULL,
        PRIMARY KEY (originator_node_id, originator_sequence_id)
    )""",
    "CREATE INDEX chain_payloads_block ON chain_payloads (block_number)",
    "CREATE INDEX chain_payloads_transaction ON chain_payloads (transaction_hash)",
    # Association log from identity updates, in chain order: GetInboxIds answers, per
    # identifier, the inbox whose latest association is not revoked afterwards.
    """CREATE TABLE identity_associations (
        identifier text NOT NULL,
        identifier_kind smallint NOT NULL,
        inbox_id text NOT NULL,
        associated boolean NOT NULL,
        sequence_id bigint NOT NULL,
        action_index integer NOT NULL,
        PRIMARY KEY (identifier, identifier_kind, sequence_id, action_index)
    )""",
    "CREATE INDEX identity_associations_sequence ON identity_associations (sequence_id)",
    """CREATE TABLE chain_skipped_events (
        id bigserial PRIMARY KEY,
        contract text NOT NULL,
        block_number bigint NOT NULL,
        block_hash bytea NOT NULL,
        transaction_hash bytea NOT NULL,
        log_index integer NOT NULL,
        sequence_id bigint,
        reason text NOT NULL,
        data bytea,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (block_hash, log_index)
    )""",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute(
        "DROP TABLE chain_skipped_events, identity_associations, chain_payloads, chain_blocks,"
        " chain_progress"
    )
