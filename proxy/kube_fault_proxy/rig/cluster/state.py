"""What a local control plane records of itself in `<state-dir>/cluster.json`, as a typed record.

`cluster up` fills it as components start, `down` reads it to find every process group, and `cluster status`
shows it. The file keeps its camelCase keys (`apiserverArgv`, `realNode.kubeletPort`), so a `jq` over the file
or over `cluster status` reads as before; a key a newer version wrote is ignored rather than refused, so `down`
can always stop what an older or newer `up` started."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


class _Record(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              validate_assignment=True)


class ProcessRecord(_Record):
    """One process group a component runs in (its leader's pid) and its log."""

    pid: int
    log: str


class ProxyRecord(_Record):
    """The proxy `up --proxy` put in front of the apiserver."""

    url: str
    control: str
    ca_file: str


class RealNodeRecord(_Record):
    """The real node (`up --real-node`): where its configuration and data live, and what `down` must restore."""

    dir: str
    data: str
    node: str
    socket: str
    sysctls: dict[str, str] = Field(default_factory=dict)  # the host's values before, restored by `down`
    chains: list[str] = Field(default_factory=list)  # iptables chains that were there before
    made_dirs: list[str] = Field(default_factory=list)  # fixed directories the node made (removed by `down`)
    images: dict[str, str] = Field(default_factory=dict)  # sandbox, workload -> image name
    kubelet_port: int | None = None
    stopped_at: float | None = None
    leftovers: list[str] = Field(default_factory=list)


class ClusterState(_Record):
    """Everything `up` recorded. Absent (None) means "not set up": no proxy, no real node, no explicit list of
    clients through the proxy (then the scheduler alone goes through it), no workload controllers."""

    started_at: float | None = None
    stopped_at: float | None = None
    scheduler: str = "none"
    nodes: int = 0
    builds: dict[str, str] = Field(default_factory=dict)  # component -> version
    scheduler_build: str | None = None  # the scheduler's exact build plus its gates
    scheduler_variant: str | None = None  # a patched (or source-built YuniKorn) scheduler: what it was built from
    scheduler_binary: str | None = None
    feature_gates: dict[str, dict[str, bool]] = Field(default_factory=dict)  # component -> gate -> on
    through_proxy: list[str] | None = None
    controllers: list[str] | None = None
    targets: dict[str, str] = Field(default_factory=dict)  # component -> build plus gates
    apiserver_max_streams: int | None = None
    proxy_max_streams: int | None = None
    tokens: dict[str, str] = Field(default_factory=dict)  # user -> bearer token
    apiserver: str | None = None
    apiserver_argv: list[str] | None = None
    kubeconfigs: dict[str, str] = Field(default_factory=dict)  # name -> path
    processes: dict[str, ProcessRecord] = Field(default_factory=dict)  # component -> process group
    proxy: ProxyRecord | None = None
    yunikorn: str | None = None  # YuniKorn's REST API
    real_node: RealNodeRecord | None = None

    def to_json(self) -> str:
        """The file's text: camelCase keys, what is not set left out."""
        return json.dumps(self.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2)


class StateFileError(ValueError):
    """A cluster.json that is not a cluster's record (names the file and the field)."""


def load(file: Path) -> ClusterState:
    """The record in `file`, or an empty one when there is none yet."""
    if not file.exists():
        return ClusterState()
    try:
        return ClusterState.model_validate_json(file.read_bytes())
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise StateFileError(f"{file}: {where}: {first['msg']}") from None
