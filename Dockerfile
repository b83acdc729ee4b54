# kube-fault-proxy in a container. Built by docker-compose.yaml (`docker compose build`).
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY proxy ./proxy
RUN pip install --no-cache-dir .
# The shipped library, also where deploy/ and docker-compose.yaml mount a library of their own.
COPY proxy/kube_fault_proxy/fault_profiles /fault_profiles
# The proxy's CA and the journal live here (a named volume in docker-compose.yaml).
ENV KFP_STATE_DIR=/state
VOLUME ["/state"]
ENTRYPOINT ["kube-fault-proxy"]
CMD ["serve", "--kubeconfig", "/kubeconfigs/upstream.kubeconfig", "--profiles", "/fault_profiles", \
     "--listen", "127.0.0.1:7443", "--control", "127.0.0.1:7080", \
     "--journal", "/state/journal.jsonl", "--confdir", "/state/ca"]
