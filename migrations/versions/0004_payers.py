"""Payers: the signed fees of each envelope, usage per payer, originator and UTC day, and the
token buckets the API limits share across the node's processes.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NS_PER_DAY = 86_400 * 1_000_000_000

STATEMENTS = [
    # The fees the originator signed (UnsignedOriginatorEnvelope fields 5 and 6). Writers that
    # do not name them (chain payloads: the payer pays gas instead) store 0.
    """ALTER TABLE originator_envelopes
        ADD COLUMN base_fee_picodollars bigint NOT NULL DEFAULT 0,
        ADD COLUMN congestion_fee_picodollars bigint NOT NULL DEFAULT 0""",
    # Usage per payer, originator and UTC day (XIP-49 3.3.1). `envelope_bytes` counts the
    # signed originator envelopes as stored; `gas` is what this node paid for the payer's
    # chain payloads (wei).
    """CREATE TABLE payer_usage (
        payer_address bytea NOT NULL,
        originator_node_id integer NOT NULL,
        day date NOT NULL,
        envelopes bigint NOT NULL DEFAULT 0,
        envelope_bytes bigint NOT NULL DEFAULT 0,
        base_fee_picodollars numeric NOT NULL DEFAULT 0,
        congestion_fee_picodollars numeric NOT NULL DEFAULT 0,
        gas_wei numeric NOT NULL DEFAULT 0,
        PRIMARY KEY (payer_address, originator_node_id, day)
    )""",
    # Every writer of envelopes (sequencer, replication, chain index) counts in the same
    # statement, so usage is exactly the stored envelopes: a rolled-back batch counts nothing.
    # Only rows really inserted are in the transition table (ON CONFLICT DO NOTHING skips).
    f"""CREATE FUNCTION payer_usage_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO payer_usage AS u (payer_address, originator_node_id, day, envelopes,
                                      envelope_bytes, base_fee_picodollars,
                                      congestion_fee_picodollars)
        SELECT payer_address, originator_node_id,
               date '1970-01-01' + (originator_ns / {NS_PER_DAY})::integer,
               count(*), sum(octet_length(envelope)), sum(base_fee_picodollars),
               sum(congestion_fee_picodollars)
        FROM inserted
        WHERE payer_address IS NOT NULL
        GROUP BY 1, 2, 3
        ORDER BY 1, 2, 3
        ON CONFLICT (payer_address, originator_node_id, day) DO UPDATE SET
            envelopes = u.envelopes + excluded.envelopes,
            envelope_bytes = u.envelope_bytes + excluded.envelope_bytes,
            base_fee_picodollars = u.base_fee_picodollars + excluded.base_fee_picodollars,
            congestion_fee_picodollars =
                u.congestion_fee_picodollars + excluded.congestion_fee_picodollars;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER payer_usage_count AFTER INSERT ON originator_envelopes
        REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT
        EXECUTE FUNCTION payer_usage_count()""",
    # Token buckets of the API limits (XIP-49 3.2.5), shared by the node's processes. Losing
    # them in a crash only refills them: UNLOGGED spares the WAL on every lease.
    """CREATE UNLOGGED TABLE limit_buckets (
        key text PRIMARY KEY,
        tokens double precision NOT NULL,
        updated_s double precision NOT NULL,
        granted double precision NOT NULL DEFAULT 0
    )""",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE limit_buckets")
    op.execute("DROP TRIGGER payer_usage_count ON originator_envelopes")
    op.execute("DROP FUNCTION payer_usage_count()")
    op.execute("DROP TABLE payer_usage")
    op.execute(
        "ALTER TABLE originator_envelopes DROP COLUMN base_fee_picodollars,"
        " DROP COLUMN congestion_fee_picodollars"
    )
