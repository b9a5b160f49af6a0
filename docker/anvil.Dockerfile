# anvil (Foundry's dev chain) for docker-compose.yml: the same npm-pinned binary the tests use
# (package-lock.json), on any base with python3 (fetches and checks it, serves the health check).
# `make image` builds it; `docker compose up --build` too.
ARG BASE=docker.io/library/python:3.11-slim
FROM ${BASE}
COPY package-lock.json docker/npm_fetch.py /tmp/anvil/
# Secret `ca`: see docker/Dockerfile.
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi; \
    python3 /tmp/anvil/npm_fetch.py /tmp/anvil/package-lock.json \
        @foundry-rs/anvil-linux-amd64 bin/anvil /usr/local/bin \
    && rm -rf /tmp/anvil && anvil --version
COPY docker/anvil_ready.py /usr/local/bin/anvil-ready
EXPOSE 8545
HEALTHCHECK --interval=2s --timeout=3s --retries=30 CMD ["python3", "/usr/local/bin/anvil-ready"]
ENTRYPOINT ["anvil", "--host", "0.0.0.0", "--port", "8545"]
