# Patroni with PostgreSQL 15 and etcd from Debian's packages, for docker-compose.ha.yml (the
# node's database as a primary and a synchronous standby, docs/ha.md). The same image runs
# etcd (its entry point overridden) and each Patroni member; `make image` builds it on the
# same base as the others.
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}
# No default cluster (Patroni makes its own) and no service starts in the build.
RUN mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        postgresql-15 patroni python3-etcd etcd-server \
    && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d \
    && install -d -o postgres -g postgres -m 700 /var/lib/postgresql/patroni /var/lib/etcd-data
ENV PATH=/usr/lib/postgresql/15/bin:$PATH
COPY docker/patroni.yml /etc/patroni/patroni.yml
COPY docker/patroni-post-init.sh /usr/local/bin/patroni-post-init
USER postgres
EXPOSE 5432 8008
HEALTHCHECK --interval=2s --timeout=3s --retries=60 \
    CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8008/health', timeout=2)"]
ENTRYPOINT ["patroni", "/etc/patroni/patroni.yml"]
