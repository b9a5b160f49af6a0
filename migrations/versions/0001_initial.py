"""Envelope store, vector clock, node identity and misbehavior reports.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATEMENTS = [
    """CREATE TABLE node_info (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        node_id integer NOT NULL,
        public_key bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE originator_envelopes (
        originator_node_id integer NOT NULL,
        originator_sequence_id bigint NOT NULL,
        originator_ns bigint NOT NULL,
        topic bytea NOT NULL,
        expiry_unixtime bigint,
        payer_address bytea,
        envelope bytea NOT NULL,
        PRIMARY KEY (originator_node_id, originator_sequence_id)
    )""",
    # Payloads are end-to-end encrypted: compressing them only costs CPU.
    "ALTER TABLE originator_envelopes ALTER COLUMN envelope SET STORAGE EXTERNAL",
    # Serves topic queries: one range scan per (topic, originator) past the cursor.
    """CREATE INDEX originator_envelopes_topic
        ON originator_envelopes (topic, originator_node_id, originator_sequence_id)""",
    # The node's vector clock: highest sequence id stored per originator. The sequencer
    # locks the row of this node's own id, which serializes originating across processes.
    """CREATE TABLE vector_clock (
        originator_node_id integer PRIMARY KEY,
        sequence_id bigint NOT NULL,
        last_ns bigint NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE misbehavior_reports (
        id bigserial PRIMARY KEY,
        server_time_ns bigint NOT NULL,
        misbehaving_node_id integer NOT NULL,
        type integer NOT NULL,
        submitted_by_node boolean NOT NULL,
        report bytea NOT NULL
    )""",
    "CREATE INDEX misbehavior_reports_time ON misbehavior_reports (server_time_ns)",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE misbehavior_reports, vector_clock, originator_envelopes, node_info")
