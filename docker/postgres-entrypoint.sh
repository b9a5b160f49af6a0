#!/bin/sh
# The part of the official postgres image's entry point that docker-compose.yml uses:
# initdb into an empty $PGDATA (trust when POSTGRES_HOST_AUTH_METHOD=trust), run
# /docker-entrypoint-initdb.d/*.sql once, then the server on all addresses as `postgres`.
set -eu
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    as_postgres initdb -D "$PGDATA" -U postgres --auth-local=trust --auth-host="$auth" \
        --data-checksums
    echo "host all all all $auth" >> "$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    for f in /docker-entrypoint-initdb.d/*.sql; do
        [ -e "$f" ] && as_postgres psql -v ON_ERROR_STOP=1 -U postgres -f "$f"
    done
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups \
    postgres -D "$PGDATA" -c listen_addresses='*' "$@"
