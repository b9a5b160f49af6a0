# PostgreSQL 15 from Debian's packages, for docker-compose.yml where the official
# `postgres:15` image cannot be pulled (`make image` builds it on its debootstrap base).
# Speaks the official image's interface as far as the compose file uses it (docker/
# postgres-entrypoint.sh): PGDATA, POSTGRES_HOST_AUTH_METHOD, /docker-entrypoint-initdb.d/*.sql.
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}
# No default cluster (the entry point makes one in PGDATA) and no service starts in the build.
RUN mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
COPY docker/postgres-entrypoint.sh /usr/local/bin/
EXPOSE 5432
HEALTHCHECK --interval=2s --timeout=3s --retries=30 CMD ["pg_isready", "-U", "postgres"]
STOPSIGNAL SIGINT
ENTRYPOINT ["postgres-entrypoint.sh"]
