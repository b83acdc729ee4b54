# kube-fault-proxy in a container. Built by docker-compose.yaml (`docker compose build`), or:
#   docker build -t kube-fault-proxy:local .
#   podman build --build-arg BASE=localhost/kube-fault-proxy-base:trixie-1 -t kube-fault-proxy:local .
# BASE is any image with a Python >= 3.12 that has `venv` (python3 -m venv): the public Python image by
# default, or the Debian 13 base scripts/container-setup makes with debootstrap where no registry is reachable.
ARG BASE=python:3.12-slim
FROM ${BASE}
# A virtualenv of its own: works the same on the Python image and on Debian's python3 (which refuses
# `pip install` into the system interpreter).
ENV VIRTUAL_ENV=/opt/kube-fault-proxy PATH=/opt/kube-fault-proxy/bin:$PATH PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/kube-fault-proxy
WORKDIR /app
# The dependencies first, from pyproject.toml alone: this layer is reused until pyproject.toml changes.
COPY pyproject.toml README.md LICENSE ./
RUN python3 -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
print("\n".join(d["project"]["dependencies"] + d["build-system"]["requires"]))' > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY proxy ./proxy
RUN pip install --no-cache-dir --no-deps --no-build-isolation . && rm -rf build proxy/*.egg-info
# The shipped library, also where deploy/ and docker-compose.yaml mount a library of their own.
COPY proxy/kube_fault_proxy/fault_profiles /fault_profiles
# The proxy's CA and the journal live here (a named volume in docker-compose.yaml).
ENV KFP_STATE_DIR=/state
VOLUME ["/state"]
ENTRYPOINT ["kube-fault-proxy"]
CMD ["serve", "--kubeconfig", "/kubeconfigs/upstream.kubeconfig", "--profiles", "/fault_profiles", \
     "--listen", "127.0.0.1:7443", "--control", "127.0.0.1:7080", \
     "--journal", "/state/journal.jsonl", "--confdir", "/state/ca"]
