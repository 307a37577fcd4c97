# The kuberl trainer with CUDA torch: for learners and workers with `gpus: N`.
# Build from the repository root:  docker build -f images/trainer-cuda.Dockerfile -t kuberl-trainer:cuda .
# The NVIDIA container toolkit mounts the driver; torch's wheel from PyPI brings the CUDA runtime
# libraries. Otherwise the same steps as trainer.Dockerfile and the Makefile.
FROM python:3.11-slim AS build
ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kuberl \
 && /opt/kuberl/bin/python -m pip install --index-url "${TORCH_INDEX}" "${TORCH}"
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN /opt/kuberl/bin/python -m pip install -c constraints.txt ".[trainer,atari,mujoco,video,mlflow,multiagent,wandb]"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="kuberl-trainer-cuda" \
      org.opencontainers.image.description="Ray head/worker and RL trainer for kuberl experiments (CUDA)" \
      org.opencontainers.image.licenses="Apache-2.0"
# The operator runs these pods with a read-only root filesystem and a writable /tmp: caches go there.
ENV PATH=/opt/kuberl/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=/opt/kuberl/envs \
    HOME=/tmp XDG_CACHE_HOME=/tmp/.cache MPLCONFIGDIR=/tmp/matplotlib PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN groupadd --gid 1000 kuberl && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash kuberl \
 && mkdir -p /opt/kuberl/envs
COPY --from=build /opt/kuberl /opt/kuberl
# The uid the operator's pods run as (runAsUser in kuberl.operator.builders.pod).
USER 1000:1000
WORKDIR /home/kuberl
EXPOSE 6379 10001 8265 8080
CMD ["kuberl", "--help"]
