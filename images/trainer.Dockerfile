# The kuberl trainer (CPU): Ray, torch, Gymnasium and the `kuberl train` driver.
# Build from the repository root:  docker build -f images/trainer.Dockerfile -t kuberl-trainer .
# Same steps as the Makefile: torch pinned first (from the CPU wheel index, so no CUDA libraries
# come along), then `pip install -c constraints.txt .[trainer,atari,mujoco,video,mlflow,multiagent,wandb]`.
FROM python:3.11-slim AS build
ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kuberl \
 && /opt/kuberl/bin/python -m pip install --index-url "${TORCH_INDEX}" "${TORCH}"
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN /opt/kuberl/bin/python -m pip install -c constraints.txt ".[trainer,atari,mujoco,video,mlflow,multiagent,wandb]"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="kuberl-trainer" \
      org.opencontainers.image.description="Ray head/worker and RL trainer for kuberl experiments (CPU)" \
      org.opencontainers.image.licenses="Apache-2.0"
# User env modules ("package.module:Class") go under /opt/kuberl/envs (see examples/custom_env/).
# The operator runs these pods with a read-only root filesystem and a writable /tmp: caches go there.
ENV PATH=/opt/kuberl/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=/opt/kuberl/envs \
    HOME=/tmp XDG_CACHE_HOME=/tmp/.cache MPLCONFIGDIR=/tmp/matplotlib PYTHONDONTWRITEBYTECODE=1
RUN groupadd --gid 1000 kuberl && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash kuberl \
 && mkdir -p /opt/kuberl/envs
COPY --from=build /opt/kuberl /opt/kuberl
# The uid the operator's pods run as (runAsUser in kuberl.operator.builders.pod).
USER 1000:1000
WORKDIR /home/kuberl
# Ray GCS, Ray client, dashboard, trainer status/metrics.
EXPOSE 6379 10001 8265 8080
# The operator sets each pod's command (`ray start --head ...` then `kuberl train --in-cluster ...`,
# or `ray start --address=... --block`), so the image only puts `ray` and `kuberl` on PATH.
CMD ["kuberl", "--help"]
