"""The envelope table partitioned by expiry (docs/operations.md, "Retention"), so expiry drops
whole partitions instead of deleting rows.

`originator_envelopes` is range-partitioned on `expiry_unixtime`, the column the read path
hides expired envelopes by:

- `originator_envelopes_never` (the DEFAULT partition, CHECK expiry IS NULL): what never
  expires (identity updates, chain payloads); its CHECK spares it a scan whenever a partition
  is added;
- `originator_envelopes_expired`, MINVALUE up to the lowest time partition: envelopes that
  arrive already expired, and what the upgrade found expired;
- one partition per period (xnode.core.partitions), created ahead by the node;
- `originator_envelopes_later`, from the last period to MAXVALUE: retentions longer than the
  partitions made so far; the node moves its rows when it adds periods.

A primary key of a partitioned table must hold the partition key, so (originator, sequence id)
stays unique through `envelope_keys`: a trigger claims the key before a row goes in and
skips the row when the key is taken (what ON CONFLICT DO NOTHING did), and deleted rows give
their keys back. Dropping a partition deletes its keys by their expiry. A key holds its
envelope's expiry, so a lookup by sequence id visits the one partition that holds it.

Revision ID: 0009
Revises: 0008
"""

import time

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COLUMNS = """(
    originator_node_id integer NOT NULL,
    originator_sequence_id bigint NOT NULL,
    originator_ns bigint NOT NULL,
    topic bytea NOT NULL,
    expiry_unixtime bigint,
    payer_address bytea,
    envelope bytea NOT NULL,
    base_fee_picodollars bigint NOT NULL DEFAULT 0,
    congestion_fee_picodollars bigint NOT NULL DEFAULT 0
)"""

_KEYS = """
CREATE TABLE envelope_keys (
    originator_node_id integer NOT NULL,
    originator_sequence_id bigint NOT NULL,
    expiry_unixtime bigint,
    PRIMARY KEY (originator_node_id, originator_sequence_id)
)"""

# The key is claimed first. When it is taken but no envelope holds it, the row is the second
# half of an UPDATE moving it to another partition (a fork's newcomer with another expiry):
# the key follows it. A volatile function's query sees the rows its statement deleted.
_CLAIM_KEY = """
CREATE FUNCTION envelope_key_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO envelope_keys VALUES (NEW.originator_node_id, NEW.originator_sequence_id,
                                      NEW.expiry_unixtime)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM originator_envelopes
    WHERE originator_node_id = NEW.originator_node_id
      AND originator_sequence_id = NEW.originator_sequence_id;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE envelope_keys SET expiry_unixtime = NEW.expiry_unixtime
    WHERE originator_node_id = NEW.originator_node_id
      AND originator_sequence_id = NEW.originator_sequence_id;
    RETURN NEW;
END $$"""

# A statement-level DELETE trigger does not fire for rows an UPDATE moves between partitions.
_RELEASE_KEYS = """
CREATE FUNCTION envelope_keys_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM envelope_keys k USING deleted d
    WHERE k.originator_node_id = d.originator_node_id
      AND k.originator_sequence_id = d.originator_sequence_id;
    RETURN NULL;
END $$"""

# Lookups by sequence id read a key's expiry to visit one partition (xnode.store.partitions):
# an UPDATE that keeps its row in its partition keeps the key's expiry exact too.
_FOLLOW_EXPIRY = """
CREATE FUNCTION envelope_key_expiry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE envelope_keys SET expiry_unixtime = NEW.expiry_unixtime
    WHERE originator_node_id = NEW.originator_node_id
      AND originator_sequence_id = NEW.originator_sequence_id;
    RETURN NULL;
END $$"""

TRIGGERS = [
    """CREATE TRIGGER envelope_key_expiry AFTER UPDATE OF expiry_unixtime
        ON originator_envelopes FOR EACH ROW
        WHEN (OLD.expiry_unixtime IS DISTINCT FROM NEW.expiry_unixtime)
        EXECUTE FUNCTION envelope_key_expiry()""",
    """CREATE TRIGGER envelope_key_claim BEFORE INSERT ON originator_envelopes
        FOR EACH ROW EXECUTE FUNCTION envelope_key_claim()""",
    """CREATE TRIGGER envelope_keys_release AFTER DELETE ON originator_envelopes
        REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT
        EXECUTE FUNCTION envelope_keys_release()""",
    """CREATE TRIGGER payer_usage_count AFTER INSERT ON originator_envelopes
        REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT
        EXECUTE FUNCTION payer_usage_count()""",
]

# xnode.core.partitions.DEFAULT_PERIOD_SECONDS, and enough periods for the default retention
# (183 days) and then some; the node adds more ahead as time passes.
_PERIOD = 30 * 86_400
_AHEAD = 200 * 86_400


def _partition(name: str, bounds: str) -> str:
    return f"CREATE TABLE {name} PARTITION OF originator_envelopes {bounds}"


def _period_name(lower: int) -> str:
    return "originator_envelopes_" + time.strftime("%Y%m%d", time.gmtime(lower))


def _create_partitions(now: int) -> None:
    low = now // _PERIOD * _PERIOD
    high = -(-(now + _AHEAD) // _PERIOD) * _PERIOD
    op.execute(_partition("originator_envelopes_never", "DEFAULT"))
    op.execute(
        "ALTER TABLE originator_envelopes_never"
        " ADD CONSTRAINT originator_envelopes_never_check CHECK (expiry_unixtime IS NULL)"
    )
    op.execute(_partition("originator_envelopes_expired", f"FOR VALUES FROM (MINVALUE) TO ({low})"))
    for lower in range(low, high, _PERIOD):
        op.execute(
            _partition(_period_name(lower), f"FOR VALUES FROM ({lower}) TO ({lower + _PERIOD})")
        )
    op.execute(_partition("originator_envelopes_later", f"FOR VALUES FROM ({high}) TO (MAXVALUE)"))
    # Only this partition is ever searched by expiry (when periods are added).
    op.execute("CREATE INDEX ON originator_envelopes_later (expiry_unixtime)")


def upgrade() -> None:
    op.execute("ALTER TABLE originator_envelopes RENAME TO originator_envelopes_0008")
    op.execute("DROP TRIGGER payer_usage_count ON originator_envelopes_0008")
    op.execute("ALTER INDEX originator_envelopes_topic RENAME TO originator_envelopes_topic_0008")
    op.execute(f"CREATE TABLE originator_envelopes {_COLUMNS} PARTITION BY RANGE (expiry_unixtime)")
    # Payloads are end-to-end encrypted: compressing them only costs CPU (as in 0001).
    op.execute("ALTER TABLE originator_envelopes ALTER COLUMN envelope SET STORAGE EXTERNAL")
    # Topic queries: one range scan per (topic, originator) past the cursor, in each partition.
    op.execute(
        "CREATE INDEX originator_envelopes_topic"
        " ON originator_envelopes (topic, originator_node_id, originator_sequence_id)"
    )
    # Sequence-id reads within an originator, in each partition.
    op.execute(
        "CREATE INDEX originator_envelopes_key"
        " ON originator_envelopes (originator_node_id, originator_sequence_id)"
    )
    _create_partitions(int(time.time()))
    op.execute(_KEYS)
    op.execute("CREATE INDEX envelope_keys_expiry ON envelope_keys (expiry_unixtime)")
    op.execute(
        "INSERT INTO envelope_keys"
        " SELECT originator_node_id, originator_sequence_id, expiry_unixtime"
        " FROM originator_envelopes_0008"
    )
    op.execute("INSERT INTO originator_envelopes SELECT * FROM originator_envelopes_0008")
    op.execute("DROP TABLE originator_envelopes_0008")
    op.execute(_CLAIM_KEY)
    op.execute(_RELEASE_KEYS)
    op.execute(_FOLLOW_EXPIRY)
    for trigger in TRIGGERS:
        op.execute(trigger)
    op.get_bind().execute(sa.text("ANALYZE originator_envelopes"))


def downgrade() -> None:
    raise NotImplementedError(
        "the partitioned envelope table is not unpartitioned again (restore a backup)"
    )
