# The two commands: `make run` (set up and start the app) and `make test` (set up and run every test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8501
# `make serve`: app processes behind nginx, one per CPU unless WORKERS says otherwise
WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: run dev serve test setup setup-dev chromium nginx data gpu-data bench clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The browser tests drive Debian's Chromium (never `playwright install`: it downloads). Installed when
# missing and we may (root); otherwise those tests skip with a message saying how to install it.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "note: chromium not installed; browser tests will be skipped (apt-get install -y chromium)"; }

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

test: setup-dev chromium nginx
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

data: setup
	$(PY) -m corpora prepare ding

# The next GPU lease's data (docs/training.md, "The next lease"): the mixture and its 16,000-piece BPE in the
# git-ignored data/gpu, which the lent machine is sent (carry ["data/gpu"]); needs the corpora prepared first.
GPU_MIX ?= tatoeba=1,multi30k=2,bcontrast=1,ding=2,wmt-news-extra=2,wmt19-20-extra-refs=1,wmt-general-2023-24=2,ud-pud=3,mlqe-pe=3,mucow-wmt19=1,debian-www-news=1,ddtp-bookworm=1,debian-handbook=1,gnome-help=1
gpu-data: setup
	$(PY) -m corpora prepare mixture --repeat $(GPU_MIX) --to data/gpu
	$(PY) -m training.vocab --mix $(GPU_MIX) --sizes 16000 --save data/gpu

bench: setup
	$(PY) -m benchmarks.decode

clean:
	rm -rf $(VENV) .pytest_cache
