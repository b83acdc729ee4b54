# kube-fault-proxy in a container. Built by docker-compose.yaml (`docker compose build`).
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip install --no-cache-dir .
COPY fault_profiles /fault_profiles
# The proxy's CA and the journal live here (a named volume in docker-compose.yaml).
ENV KFP_STATE_DIR=/state
VOLUME ["/state"]
ENTRYPOINT ["kube-fault-proxy"]
CMD ["serve", "--kubeconfig", "/kubeconfigs/upstream.kubeconfig", "--profiles", "/fault_profiles", \
     "--listen", "127.0.0.1:7443", "--control", "127.0.0.1:7080", \
     "--journal", "/state/journal.jsonl", "--confdir", "/state/ca"]
