#!/bin/sh
# Patroni's bootstrap.post_init: run once on the first member, with a superuser connection
# URL. Makes the node's database (the standby gets it by replication).
set -eu
psql "$1" -v ON_ERROR_STOP=1 -c "CREATE DATABASE ${XNODE_DATABASE_NAME:-xnode_100}"
