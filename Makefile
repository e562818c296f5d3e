# The two commands: `make run` (set up and start the app) and `make test` (set up and run every test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8501
# `make serve`: app processes behind nginx, one per CPU unless WORKERS says otherwise
WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: run dev serve test lint setup setup-dev chromium nginx data lease-ready lease-restore bench clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The browser tests drive Debian's Chromium (never `playwright install`: it downloads), headless through its
# chromium-headless-shell build when that is there (a quarter less CPU a page; tests/conftest.py). Installed when
# missing and we may (root); otherwise those tests skip with a message saying how to install it.
chromium:
	@{ command -v chromium >/dev/null 2>&1 && [ -x /usr/bin/chromium-headless-shell ]; } || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && apt-get update -qq && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-headless-shell >/dev/null || \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; } || true
	@command -v chromium >/dev/null 2>&1 || \
	  echo "note: chromium not installed; browser tests will be skipped (apt-get install -y chromium)"

# deploy.serve's front and its tests. Installed as chromium is; a policy-rc.d (when the machine has none) keeps
# Debian's package from starting its own nginx service on port 80 (deploy.serve runs nginx from a private prefix).
nginx:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (rc=/usr/sbin/policy-rc.d; made=; [ -e $$rc ] || { printf '#!/bin/sh\nexit 101\n' > $$rc && chmod +x $$rc && made=1; }; \
	   apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; ok=$$?; \
	   [ -z "$$made" ] || rm -f $$rc; exit $$ok) || \
	  echo "note: nginx not installed; the deployment tests will be skipped (apt-get install -y nginx)"; }

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

run: setup
	$(PY) -m streamlit run app.py --server.port $(PORT) --browser.gatherUsageStats false

# For developers: reload the app when a source file is saved (polling watcher; see .streamlit/config.toml).
dev: setup
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.fileWatcherType poll --server.runOnSave true

serve: setup nginx
	$(PY) -m deploy.serve --workers $(WORKERS) --port $(PORT)

# Lint and types first (seconds, and a minute for mypy's first look at the tree), then every test: three workers on two
# cores, because the browser tests wait on their app and Chromium (with two, a tenth of the cores stood idle)
test: setup-dev chromium nginx lint
	$(PY) -m pytest -q -n 3 --dist loadgroup tests

lint: setup-dev
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

data: setup
	$(PY) -m corpora prepare ding

# The next GPU lease (docs/training.md, "The next lease (prepared)"): the corpora, the run to
# continue in int8, and a working tree the lent machine can be sent (at most 64 MiB with what the call carries): the
# shipped weights are moved aside for the call and put back by lease-restore. Needs ../shared/data (and Debian's
# trans-de-en for the Ding sentences, installed when missing and we may).
LEASE_MIX ?= tatoeba=3,multi30k=2,bcontrast=1,ding=2,wmt-news-extra=2,wmt19-20-extra-refs=1,wmt-general-2023-24=2,ud-pud=3,mlqe-pe=3,mucow-wmt19=1,debian-www-news=1,ddtp-bookworm=1,debian-handbook=1,gnome-help=1
LEASE_EXPORT ?= ../shared/data/gpu-runs/2026-11-28-h100-news
LEASE_ASIDE := checkpoints/en-de/model.safetensors checkpoints/brown-lm/model.safetensors
lease-ready: setup
	@[ -d /usr/share/trans/de-en ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq trans-de-en >/dev/null; }
	$(PY) -m corpora prepare ding
	$(PY) -m corpora prepare all
	$(PY) -m corpora prepare mixture --repeat $(LEASE_MIX) --to data/gpu
	rm -f data/prepared/mixture.train.tsv.gz data/prepared/mixture.valid.tsv.gz
	[ -d runs/gpu-news ] || $(PY) -m tools.timed_leg --join $(LEASE_EXPORT) --into runs/gpu-news
	[ -d runs/gpu-news-int8 ] || $(PY) -m tools.average --int8 runs/gpu-news-int8 runs/gpu-news/last
	mkdir -p runs/aside/en-de runs/aside/brown-lm
	for f in $(LEASE_ASIDE); do [ ! -f $$f ] || mv $$f runs/aside/$$(basename $$(dirname $$f))/; done
	$(PY) -m tools.lease_size --carry data/prepared data/gpu/mixture.valid.tsv.gz runs/gpu-news-int8

lease-restore:
	git checkout -- $(LEASE_ASIDE)

bench: setup
	$(PY) -m benchmarks.decode

clean:
	rm -rf $(VENV) .pytest_cache
