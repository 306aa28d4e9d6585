# inferline — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.inferline-installed
MODEL_REPOSITORY ?= build/model_repository
# Built-in models `make model` builds (efficientnet_lite0, efficientnet_lite2); the stack serves
# every classifier in the repository, these and any `python -m inferline_models add` imported.
MODELS ?= efficientnet_lite0
MODEL ?= classifier
DURATION ?= 60
CONCURRENCY ?= 8
WEB_PORT ?= 8088
PYTEST_ARGS ?=
BENCH_DURATION ?= 10
BENCH_BATCHER_ARGS ?=
FUZZ_SECONDS ?= 60

export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup certs token model publish-models mlflow up down status scale demo demo-web grafana images deploy undeploy verify-cluster checkov test test-fast screenshots test-containers fuzz lint check-packages format docs dashboards k8s-files bench bench-pipeline bench-gpu bench-e2e bench-preprocess bench-gpu-preprocess bench-eds bench-batcher bench-overload bench-faults soak clean

help: ## list the targets
	@echo "inferline — scale-out inference pipeline (see README.md)"
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-21s %s\n", $$1, $$2}'

DISTRIBUTIONS := common services/middleman services/preprocess services/batcher control/eds envoy \
	demo-client models stack testing preflight

$(STAMP): constraints.txt requirements-dev.txt $(addsuffix /pyproject.toml,$(DISTRIBUTIONS))
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip uninstall -q -y inferline 2>/dev/null || true  # the single distribution of old
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt
	@touch $@

setup: $(STAMP) ## create .venv with the pinned versions (idempotent, fast when nothing changed)
	@$(PY) -m demo_client.samples .run/samples >/dev/null
	@command -v prometheus >/dev/null || echo "optional: 'sudo apt-get install prometheus' (Debian's package) \
	and the stack scrapes every process; the dashboards' tests need it too"

model: setup ## export the built-in MODELS to ONNX into the Triton model repository (cached): MODELS="efficientnet_lite0 efficientnet_lite2"
	@$(PY) -m inferline_models build --repository $(MODEL_REPOSITORY) $(MODELS)

publish-models: model ## upload the model repository to a model store for k8s/components/model-store: STORE=s3://bucket/prefix (or gs://…, s3://http://host:port/bucket/prefix)
	@test -n "$(STORE)" || { echo "make publish-models needs STORE=s3://bucket/prefix (or gs://bucket/prefix, s3://http://host:port/bucket/prefix)" >&2; exit 2; }
	@$(PY) -m inferline.store publish $(MODEL_REPOSITORY) $(STORE)

certs: setup ## a local CA and TLS certificates under .run/certs (idempotent); INFERLINE_STACK_TLS=true make up serves with them
	@$(PY) -m inferline_stack.certs .run/certs

token: setup ## a local signing key, the key set Envoy checks and a token under .run/auth (idempotent); INFERLINE_STACK_AUTH=true make up requires it
	@$(PY) -m inferline_stack.auth .run/auth

# With INFERLINE_STACK_TLS=true the demo client trusts the local CA (`make certs`); with
# INFERLINE_STACK_AUTH=true it sends the stack's token (`make token`, which `up` runs).
DEMO_ENDPOINT := $(if $(filter true 1 yes on,$(INFERLINE_STACK_TLS)),--ca .run/certs/ca.crt)
DEMO_ENDPOINT += $(if $(filter true 1 yes on,$(INFERLINE_STACK_AUTH)),--token "$$(cat .run/auth/token)")

# INFERLINE_STACK_TRACING=true with no OTLP endpoint of the user's: the stack runs MLflow's trace
# view, installed once into a venv of its own (`make mlflow`).
MLFLOW_STAMP := .venv-mlflow/.installed
TRACE_VIEW := $(if $(filter true 1 yes on,$(INFERLINE_STACK_TRACING)),$(if $(OTEL_EXPORTER_OTLP_ENDPOINT)$(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),,$(MLFLOW_STAMP)))

up: model $(TRACE_VIEW) ## start the local stack (every hop through Envoy, public :8080; INFERLINE_STACK_TRACING=true: traced, MLflow's trace view); returns when ready
	@$(PY) -m inferline_stack up --model-repository $(MODEL_REPOSITORY)

down: ## stop everything the local stack started
	@test -x $(PY) && $(PY) -m inferline_stack down || true

status: ## show what runs, where, and whether it is healthy; each cluster as Envoy sees it
	@$(PY) -m inferline_stack status

scale: model ## start or drain replicas: SERVICE=triton REPLICAS=2 (EDS pushes them to Envoy)
	@test -n "$(REPLICAS)" || { echo "usage: make scale SERVICE=triton REPLICAS=2" >&2; exit 2; }
	@$(PY) -m inferline_stack scale --service $(or $(SERVICE),triton) --replicas $(REPLICAS) \
		--model-repository $(MODEL_REPOSITORY)

demo: up ## the whole pipeline (Envoy, batcher, GPU pods: Triton + the preprocess beside it) plus the live demo client (DURATION=s, CONCURRENCY=n, MODEL=name)
	@$(PY) -m demo_client load --duration $(DURATION) --concurrency $(CONCURRENCY) --model $(MODEL) $(DEMO_ENDPOINT)
	@echo "the stack keeps running: 'make status' shows it, 'make scale SERVICE=triton REPLICAS=2' adds a backend, 'make down' stops it"

# The web view links its slowest recent requests to their traces: in the stack's trace view
# (INFERLINE_STACK_TRACING=true; `up` writes .run/trace-view), or in yours: TRACE_URL=…{trace_id}…
TRACE_URL ?=

demo-web: up ## `make demo` plus a live web page on http://127.0.0.1:8088/ (WEB_PORT=n): images/s per Triton replica, latency, errors, labelled images, where the time went (traced: links to the traces)
	@view='$(TRACE_URL)'; [ -n "$$view" ] || view=$$(cat .run/trace-view 2>/dev/null); \
	$(PY) -m demo_client load --web --web-port $(WEB_PORT) --duration $(DURATION) --concurrency $(CONCURRENCY) --model $(MODEL) $(DEMO_ENDPOINT) $${view:+--trace-view "$$view"}
	@echo "the stack keeps running: 'make scale SERVICE=triton REPLICAS=2' during a run adds a line to the page, 'make down' stops it"

REGISTRY ?=
TAG ?=
PUSH ?=
IMAGES ?=
OVERLAY ?= gpu
NAMESPACE ?= inferline

images: model ## build every image with docker or podman: REGISTRY=… TAG=… [PUSH=1] [IMAGES="eds batcher"]
	@test -n "$(REGISTRY)" && test -n "$(TAG)" || { echo "usage: make images REGISTRY=registry.example.com/team TAG=v1 [PUSH=1] [IMAGES=\"eds batcher\"]" >&2; exit 2; }
	$(PY) -m tools.images --registry $(REGISTRY) --tag $(TAG) $(if $(filter 1 true yes,$(PUSH)),--push) $(IMAGES)

deploy: setup ## apply k8s/overlays/$(OVERLAY) (gpu|cpu) with the images of REGISTRY=… TAG=… (kubectl's context) in NAMESPACE=… (inferline)
	$(PY) -m tools.cluster deploy --overlay $(OVERLAY) --registry "$(REGISTRY)" --tag "$(TAG)" --namespace "$(NAMESPACE)"

undeploy: setup ## delete what `make deploy` applied (OVERLAY=gpu|cpu)
	$(PY) -m tools.cluster undeploy --overlay $(OVERLAY) --namespace "$(NAMESPACE)"

verify-cluster: setup ## prove a deployment: rollouts, Envoy holds every Triton pod, demo client, Triton 1 -> 2
	$(PY) -m tools.cluster verify --namespace "$(NAMESPACE)"

$(MLFLOW_STAMP): stack/mlflow.lock
	@test -x .venv-mlflow/bin/python || $(PYTHON) -m venv .venv-mlflow
	.venv-mlflow/bin/pip install -q --no-deps -r stack/mlflow.lock
	@touch $@

mlflow: $(MLFLOW_STAMP) ## MLflow (the local stack's trace view) in a venv of its own (it does not resolve with constraints.txt)

CHECKOV_STAMP := .venv-checkov/.installed

$(CHECKOV_STAMP): k8s/checkov.lock
	@test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install -q --no-deps -r k8s/checkov.lock
	@touch $@

checkov: $(CHECKOV_STAMP) ## checkov in a venv of its own (it does not resolve with constraints.txt), for k8s/tests

GRAFANA_IMAGE ?= grafana/grafana:11.6.0
GRAFANA_PORT ?= 3000
PROMETHEUS_URL ?= http://127.0.0.1:9090

grafana: ## Grafana (official container) on :3000 with inferline's dashboards, reading the stack's Prometheus
	@engine=$$(command -v docker || command -v podman) || { echo "make grafana needs docker or podman; \
	install one, or import grafana/dashboards/*.json into your own Grafana (datasource: $(PROMETHEUS_URL))" >&2; exit 2; }; \
	$$engine info >/dev/null 2>&1 || { echo "$$engine is installed but its engine does not answer \
	($$engine info fails): start it, or import grafana/dashboards/*.json into your own Grafana" >&2; exit 2; }; \
	echo "Grafana: http://127.0.0.1:$(GRAFANA_PORT) (admin/admin); dashboards in folder inferline"; \
	exec $$engine run --rm --network host --name inferline-grafana \
		-e GF_SERVER_HTTP_PORT=$(GRAFANA_PORT) -e PROMETHEUS_URL=$(PROMETHEUS_URL) \
		-v $(CURDIR)/grafana/provisioning:/etc/grafana/provisioning:ro \
		-v $(CURDIR)/grafana/dashboards:/etc/grafana/dashboards/inferline:ro \
		$(GRAFANA_IMAGE)

# make test spreads its tests over TEST_WORKERS processes (pytest-xdist): each worker starts a
# stack of its own where its tests need one, a module's tests stay on one worker (conftest.py),
# and the network-fault tests, which change the machine's routing rules, on one at a time.
# Three beat two on two cores, since much of the suite waits (loads, a network cut, stops):
# docs/testing.md has the figures.
TEST_WORKERS ?= 3
test: MODELS = efficientnet_lite0 efficientnet_lite2  # the session's stack serves both
test: model ## run every test (unit, service and end-to-end through the real Triton server) over TEST_WORKERS=3 processes; make test-containers runs the images
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/containers $(PYTEST_ARGS)

test-fast: setup ## the unit and service tests, no stack and no end-to-end test, spread over the cores: the check before a commit (make test runs everything)
	$(PY) -m pytest -n auto -m "not e2e and not stack" $(TEST_DIRS) tests/bench $(PYTEST_ARGS)

screenshots: model mlflow ## refresh docs/images from the browser tests on the real pages: the web view under load (a second Triton), a video, a trace in MLflow's view
	INFERLINE_SCREENSHOTS=docs/images $(PY) -m pytest -p no:randomly tests/e2e/test_web_view.py \
		tests/e2e/test_trace_view.py -k "second_replica or video or from_every_process"

test-containers: model ## build every image (stand-in bases where none can be pulled) and run the rendered cpu overlay's pods under podman: probes, security, a cat over gRPC and REST, scale-up, a GPU pod killed under load, clean stop (7 min from nothing, 3-4 with the layer cache; root, podman)
	$(PY) -m pytest -p no:randomly --timeout=1200 tests/containers $(PYTEST_ARGS)

fuzz: setup ## fuzz every target (image decoding, KServe tensors, REST, video open) for FUZZ_SECONDS each; fails on a crash, hang or memory overrun -> build/fuzz/
	$(PY) -m fuzz all --seconds $(FUZZ_SECONDS)

TEST_DIRS := $(wildcard $(addsuffix /tests,$(DISTRIBUTIONS) grafana k8s tools))
DOCKERFILES := $(wildcard docker/*.Dockerfile services/*/Dockerfile control/*/Dockerfile */Dockerfile) tools/containers/triton/Dockerfile

lint: setup ## ruff (lint, format), mypy (code and every tests/ folder), import-linter (boundaries)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	@for dir in $(TEST_DIRS); do echo "mypy $$dir"; $(PY) -m mypy $$dir || exit 1; done
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint $(DOCKERFILES)
	@if command -v promtool >/dev/null; then promtool check config --syntax-only grafana/prometheus/prometheus.yml \
		&& promtool check rules grafana/rules/*.yml; else echo "promtool not installed: rules not checked"; fi

check-packages: setup ## install each deployable alone into a fresh venv and start it (a few minutes)
	$(PY) -m tools.check_packages

format: setup ## apply ruff's formatting and safe fixes
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

docs: setup ## regenerate docs/configuration.md's tables from the services' Config classes (a test checks they are current)
	$(PY) -m tools.configref

dashboards: setup ## write grafana/dashboards/*.json from their Python (grafana/dashboards_src) and refresh the Kubernetes copies (tests check both are current)
	$(PY) -m grafana.dashboards_src
	$(PY) -m tools.monitoring_files

k8s-files: setup ## copy grafana/'s rules, dashboards and provisioning into k8s/components/monitoring/files (the dashboards into monitoring-operator/files too; kustomize reads nothing outside k8s/) and generate the Operator's PrometheusRules from the rule files (tests check both are current)
	$(PY) -m tools.monitoring_files
	$(PY) -m tools.operator_rules

bench: bench-pipeline bench-e2e bench-preprocess bench-eds bench-batcher bench-overload bench-faults ## every benchmark

PIPELINE_ARGS ?=

bench-pipeline: model ## CPU ms per image by process and pipeline overhead for each placement (in-pod, remote, in-process; simulated GPU at 1 and 8 images/request), the real model, scale-out efficiency -> bench/results/pipeline.json
	$(PY) -m bench.pipeline --duration $(BENCH_DURATION) $(PIPELINE_ARGS)

bench-gpu: model ## on a GPU machine (8 min): DALI decode, the model with CUDA/TensorRT, the pipeline's CPU per image -> bench/results/gpu.json
	$(PY) -m bench.gpu $(GPU_ARGS)

bench-e2e: model ## model-only (ONNX Runtime) vs end-to-end images/s -> bench/results/e2e.json
	$(PY) -m bench.e2e

bench-preprocess: setup ## preprocess backends vs a plain OpenCV loop; in process vs gRPC -> bench/results/preprocess.json
	$(PY) -m bench.preprocessing --duration $(BENCH_DURATION)

bench-gpu-preprocess: setup ## on a GPU machine: DALI mixed decode at batch 64 (1080p) and agreement; skips elsewhere
	$(PY) -m bench.gpu_preprocess

bench-eds: setup ## control plane + Envoy: convergence, Envoy-hop latency, ADS fan-out -> bench/results/eds.json
	$(PY) -m bench.bench_eds

bench-batcher: setup ## batcher vs no batching vs Triton's own, on a SIMULATED GPU -> bench/results/batcher.json
	$(PY) -m bench.batcher $(BENCH_BATCHER_ARGS)

OVERLOAD_ARGS ?=

bench-overload: model ## capacity, then 10x it (closed and open loop), on the simulated GPU and the real model: goodput, refusals, memory, recovery -> bench/results/overload-*.json, docs/reliability.md
	$(PY) -m bench.overload --model simulated $(OVERLOAD_ARGS)
	$(PY) -m bench.overload --model real $(OVERLOAD_ARGS)
	$(PY) -m bench.reliability_report

FAULT_REPETITIONS ?= 20

bench-faults: model ## kill -9 and SIGSTOP one of two replicas of each tier under load, FAULT_REPETITIONS=20 times each: failed requests, time to detection -> bench/results/faults.json, docs/reliability.md
	$(PY) -m bench.faults --repetitions $(FAULT_REPETITIONS)
	$(PY) -m bench.reliability_report

# `make soak DURATION=180`: DURATION only when given (its default is the demo's, too short here).
SOAK_DURATION := $(if $(filter command line environment,$(origin DURATION)),$(DURATION),600)

SOAK_ARGS ?=

soak: model ## 70% of capacity, Triton scaled every minute, DURATION=600 s: failures and RSS/fd slopes -> bench/results/soak.json
	$(PY) -m bench.soak --duration $(SOAK_DURATION) $(SOAK_ARGS)

clean: down ## remove generated files (the venv stays)
	rm -rf .run build
