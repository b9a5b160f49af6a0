# Two commands: `make run` starts a local network, `make test` runs the whole suite.
# Both set everything up first on a fresh machine (venv, Python and npm packages).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The suite on two workers, whole groups at a time in collection order (tests/conftest.py
# names the groups); `make test PARALLEL=` runs it in one process.
PARALLEL ?= -n 2 --dist loadgroup --no-loadscope-reorder
STAMP := $(VENV)/.setup-$(shell cat pyproject.toml package-lock.json 2>/dev/null | sha1sum | cut -c1-12)
NODES ?= 3

.PHONY: setup ha-packages run test test-fast lint proto proto-check contracts bench image spark-dist clean

setup: $(STAMP) ha-packages

# Patroni and etcd for `xnode devnet --ha` and its tests (docs/ha.md); quick when present.
ha-packages:
	@bash scripts/install_ha.sh

$(STAMP):
	@command -v $(PYTHON) >/dev/null || { echo "python3 is required"; exit 1; }
	@command -v initdb >/dev/null || command -v /usr/lib/postgresql/15/bin/initdb >/dev/null \
		|| { echo "PostgreSQL server (initdb, pg_ctl) is required: apt-get install postgresql"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# grpc-stubs was replaced by types-grpcio, which writes the same files: gone first.
	$(PY) -m pip uninstall --quiet --yes grpc-stubs
	$(PY) -m pip install --quiet -e ".[dev,spark]"
	npm ci --no-audit --no-fund --loglevel=error
	rm -f $(VENV)/.setup-* && touch $@

run: setup
	$(VENV)/bin/xnode devnet --nodes $(NODES)

test: setup lint
	$(PY) -m pytest -q $(PARALLEL)

test-fast: setup
	$(PY) -m pytest -q $(PARALLEL) tests/unit

lint: setup
	$(VENV)/bin/ruff check src tests bench spark_jobs migrations examples
	$(VENV)/bin/ruff format --check src tests bench spark_jobs migrations examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

proto: setup
	bash scripts/gen_proto.sh

# Fails when src/xmtp or src/xnode_api differ from what proto/ generates (run `make proto`).
proto-check: setup
	$(PY) -m pytest -q tests/unit/test_proto_fresh.py

contracts: setup
	node scripts/compile_contracts.js

bench: setup
	$(PY) bench/bench_node.py

# Container images for docker-compose.yml (podman or docker; no registry needed: docs/operations.md).
image:
	bash scripts/build_image.sh

# What spark-submit ships to a cluster (docs/data-pipeline.md): dist/spark/xnode_spark.zip,
# launcher.py, requirements.txt, environment.pex. SPARK_PYTHON: the executors' interpreter.
spark-dist: setup
	$(PY) -m spark_jobs.packaging --out dist/spark $(if $(SPARK_PYTHON),--python $(SPARK_PYTHON))

clean:
	rm -rf $(VENV) node_modules .xnode dist/spark
