# mwinv: `make demo` and `make test` are the two set-up commands (README).
VENV   := .venv
PY     := $(VENV)/bin/python
SCALE  ?= 0.1
OUT    ?= out/demo
PYTEST_ARGS ?= --durations=20
BENCH  ?=

.PHONY: deps demo demo-cluster test test-quick extension installcheck bench clean

deps:
	bash scripts/deps.sh

# The PostgreSQL extension (C, PGXS) is built and installed into the server's directories.
extension: deps
	@if [ -f dbplugins/postgresql/Makefile ]; then $(MAKE) -C dbplugins/postgresql install; fi

demo: deps extension
	$(VENV)/bin/mwinv demo --scale $(SCALE) --out $(OUT)

# the same on a cluster: a coordinator and 3 data nodes on this host (root: namespaces, cgroups)
demo-cluster: deps extension
	$(VENV)/bin/mwinv demo --nodes 3 --scale 0.01 --out out/demo-cluster

# Two at a time (pytest-xdist, a test file per worker), then the tests marked `serial` alone: most tests
# wait on servers, disks and sleeps (the whole suite kept 2 cores 25-50 % busy, one at a time): 731-788 s
# of pytest so, against 1,145-1,232 s one at a time. Exit 5 of a phase is "no test selected" (PYTEST_ARGS).
TEST_WORKERS ?= 2
test: deps extension
	@if [ -f dbplugins/postgresql/Makefile ]; then bash scripts/installcheck.sh; fi
	@rc=0; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" $(PYTEST_ARGS) || [ $$? = 5 ] || rc=1; \
	$(PY) -m pytest -m serial $(PYTEST_ARGS) || [ $$? = 5 ] || rc=1; \
	exit $$rc

# the tests that need no root (those that do carry the marker `root`, given in tests/conftest.py):
# any user, under 2 minutes, once `make deps extension` has run (docs/contributing.md)
test-quick:
	$(PY) -m pytest -m "not root" $(PYTEST_ARGS)

# `make bench` lists the benchmarks; `make bench BENCH=correlate` (or BENCH=all) runs them.
bench: deps extension
	$(PY) -m bench $(BENCH)

clean:
	rm -rf $(VENV) out build *.egg-info
	@if [ -f dbplugins/postgresql/Makefile ]; then $(MAKE) -C dbplugins/postgresql clean; fi
