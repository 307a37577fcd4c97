# The kuberl operator: Kopf handlers and the Kubernetes client only (no torch, no Ray).
# Build from the repository root:  docker build -f images/operator.Dockerfile -t kuberl-operator .
# The install step is the Makefile's (`pip install -c constraints.txt .[EXTRA]`), so the versions the
# tests ran with are the versions in the image.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kuberl
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN /opt/kuberl/bin/python -m pip install -c constraints.txt ".[operator,sweep]"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="kuberl-operator" \
      org.opencontainers.image.description="Kubernetes operator for RLExperiment resources" \
      org.opencontainers.image.licenses="Apache-2.0"
# The chart mounts the root filesystem read-only with a writable /tmp.
ENV PATH=/opt/kuberl/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
RUN groupadd --gid 10001 kuberl && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin kuberl
COPY --from=build /opt/kuberl /opt/kuberl
USER 10001:10001
WORKDIR /home/kuberl
EXPOSE 8081 9090
ENTRYPOINT ["kuberl"]
CMD ["operator", "--all-namespaces"]
