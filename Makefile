# dyncc developer / CI entry points.  CI runs `bash .ci/run` -> `make test`.
#
#   make venv        .venv with the project and its dev extras (re-installed when pyproject.toml changes)
#   make stack-up    ClickHouse 18.16 on 127.0.0.1:19000 + Kafka 3.9 on 127.0.0.1:19092 (deploy/stack.sh)
#   make stack-down
#   make cluster-up  ClickHouse cluster `dyncc` (2 shards x 2 replicas, tcp 127.0.0.1:19101-19104)
#                    + ZooKeeper on 127.0.0.1:19181 (deploy/cluster.sh)
#   make cluster-down | cluster-status
#   make test        venv + servers (stack and cluster, started in parallel), pytest against the real
#                    servers, servers stopped again (a stack or cluster that was already running before
#                    `make test` is left running; DYNCC_KEEP_STACK=1 keeps what `make test` started)
#   make lint        ruff check, ruff format --check, mypy, import contracts (CI runs it before the tests)
#   make bpf         compile the agent's BPF programs (collector/agent/bpf/cc_switch.c, the sock_ops program,
#                    and cc_iter.c, the TCP iterator that switches open connections; Debian's clang)
#                    into build/bpf/ for `dyncc agent --enforce bpf --bpf-object` (part of `make deps`)
#   make deb         the Debian packages dyncc-edge and dyncc-central into build/deb (deploy/deb/build.sh,
#                    dpkg-buildpackage; lintian with no error; reaches PyPI for the packages' own venvs)
#   make test-deb    the package install test, its own CI part (make test skips it; ~8 min)
#   make demo | bench | proto | clean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
# Prefer the distribution's python3.11: on the development machine it ran pure-Python code
# 1.8x faster and started in 11 ms instead of 36 ms, against a pyenv build without PGO/LTO
# that pyenv's shims put first on PATH (the collector and ingest are partly Python-bound).
PYTHON      ?= $(shell test -x /usr/bin/python3.11 && echo /usr/bin/python3.11 || command -v python3.11 || command -v python3)
PYTEST_ARGS ?=
STACK       := bash deploy/stack.sh
CLUSTER     := bash deploy/cluster.sh

export DYNCC_TEST_CLICKHOUSE ?= clickhouse://default:@127.0.0.1:$(or $(DYNCC_CH_TCP_PORT),19000)/default
export DYNCC_TEST_KAFKA      ?= 127.0.0.1:$(or $(DYNCC_KAFKA_PORT),19092)
export DYNCC_TEST_CLUSTER    ?= clickhouse://default:@127.0.0.1:$(or $(DYNCC_CLUSTER_TCP_PORT),19101)/default?cluster=dyncc

.PHONY: venv deps bpf deb test-deb stack-up stack-down stack-status cluster-up cluster-down cluster-status test lint demo bench proto clean

venv: $(STAMP)

$(PY):
	@echo "== creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# editable_mode=compat: a plain .pth path entry instead of setuptools' import-hook
# finder, which cost every `dyncc` start ~20 ms (a large part of `collect --once`).
$(STAMP): pyproject.toml | $(PY)
	@echo "== pip install -e '.[dev]'"
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]' --config-settings editable_mode=compat
	@touch $@

# Everything `test` needs, fetched in parallel: Python deps (PyPI),
# clickhouse-server/client then the lab's packages (apt, one after the other: one dpkg lock),
# Kafka jars (Maven Central).
deps:
	@$(MAKE) --no-print-directory -j3 --output-sync=target venv _ch-install _kafka-fetch
	@$(MAKE) --no-print-directory bpf

# Needs clang and libbpf-dev (deploy/lab/lab.sh install, run by _ch-install); no prebuilt object is fetched.
bpf: venv
	$(PY) -m collector.agent.bpf.build build/bpf

.PHONY: _ch-install _kafka-fetch
_ch-install:
	bash deploy/clickhouse/clickhouse.sh install
	bash deploy/lab/lab.sh install
	bash deploy/prometheus/prometheus.sh install
	bash deploy/deb/build.sh deps
_kafka-fetch:
	bash deploy/kafka/kafka.sh fetch

# dyncc-edge and dyncc-central (debian/), checked by lintian (no error allowed).
deb: venv
	PY=$(PY) DYNCC_DEB_LINTIAN=1 bash deploy/deb/build.sh

# The package install test (tests/deploy/test_deb_install.py), its own CI part: builds both
# packages with lintian and installs, upgrades and purges them in a throwaway root (~8 min).
test-deb: deps
	DYNCC_TEST_DEB=1 $(PY) -m pytest -q -p no:cacheprovider tests/deploy/test_deb_install.py

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

stack-status:
	$(STACK) status

cluster-up:
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

cluster-status:
	$(CLUSTER) status

# tests/run_suite.sh: side by side, the tests of no group on TEST_WORKERS pytest-xdist workers, the
# cluster's tests and the private servers' tests (each one after another); then the `serial` ones
# (the lab, the namespace tests; tests/conftest.py) one at a time.  A failing run's exit status is
# kept; no test collected by any run (exit 5) counts as a failure.
TEST_WORKERS ?= 2
test: deps
	@if $(STACK) status >/dev/null 2>&1; then started=0; echo "== stack already running; leaving it up afterwards"; \
	 else started=1; fi; \
	 if $(CLUSTER) status >/dev/null 2>&1; then cstarted=0; echo "== cluster already running; leaving it up afterwards"; \
	 else cstarted=1; fi; \
	 if [[ -n "$${DYNCC_KEEP_STACK:-}" ]]; then started=0; cstarted=0; fi; \
	 cpid=; \
	 stop_servers() { if [[ -n $$cpid ]]; then wait $$cpid || true; fi; \
	   if [[ $$started == 1 ]]; then { $(STACK) down || true; } & fi; \
	   if [[ $$cstarted == 1 ]]; then $(CLUSTER) down || true; fi; \
	   wait || true; }; \
	 trap stop_servers EXIT; \
	 trap 'exit 130' INT TERM; \
	 $(CLUSTER) up & cpid=$$!; \
	 $(STACK) up; \
	 wait $$cpid; cpid=; \
	 echo "== pytest (DYNCC_TEST_CLICKHOUSE=$$DYNCC_TEST_CLICKHOUSE DYNCC_TEST_KAFKA=$$DYNCC_TEST_KAFKA DYNCC_TEST_CLUSTER=$$DYNCC_TEST_CLUSTER)"; \
	 PY=$(PY) TEST_WORKERS=$(TEST_WORKERS) bash tests/run_suite.sh $(PYTEST_ARGS)

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# As root the demo runs the live namespace lab, which needs nginx and clang (installed here when
# missing; if that fails the demo says so and replays the recorded lab).
demo: venv
	@if [[ $$(id -u) == 0 ]]; then bash deploy/lab/lab.sh install || true; fi
	$(VENV)/bin/dyncc demo

bench: venv
	@shopt -s nullglob; files=(bench/*.py); \
	 if [[ $${#files[@]} == 0 ]]; then echo "no bench/*.py"; exit 0; fi; \
	 for f in "$${files[@]}"; do echo "== $$f"; $(PY) "$$f"; done

proto: venv
	$(PY) -m grpc_tools.protoc -Ischemas --python_out=schemas --pyi_out=schemas \
	    schemas/tcpinfo.proto schemas/congestion.proto

clean:
	-$(STACK) down
	-$(CLUSTER) down
	rm -rf .stack .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
