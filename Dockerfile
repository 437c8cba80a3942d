# The operator image the Helm chart runs (ENTRYPOINT `railyard`, args `operator`). Not built in CI here:
# this workplace reaches no container registry.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY topology/ topology/
COPY operator/ operator/
COPY worker/ worker/
RUN pip install --no-cache-dir . && rm -rf /src
USER 65532:65532
ENTRYPOINT ["railyard"]
CMD ["operator"]
