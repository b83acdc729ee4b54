"""docker-compose.yaml and the Dockerfile, checked without a Docker engine (none runs here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from kube_fault_proxy.cli.main import parser

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yaml").read_text()))


def serve_defaults() -> dict[str, Any]:
    args = parser().parse_args(["serve"])
    return {"listen": args.listen, "control": args.control}


def test_the_proxy_command_is_a_valid_serve_invocation_on_the_cli_defaults() -> None:
    command = compose()["services"]["proxy"]["command"]
    args = parser().parse_args(command)
    assert args.command == "serve"
    assert (args.listen, args.control) == (serve_defaults()["listen"], serve_defaults()["control"])
    assert str(args.kubeconfig).startswith("/kubeconfigs/") and str(args.profiles) == "/fault_profiles"
    assert str(args.confdir).startswith("/state/") and str(args.journal).startswith("/state/")


def test_the_images_default_command_matches_compose() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["kube-fault-proxy"]' in text
    cmd = re.search(r"^CMD (\[.*?\])$", text.replace("\\\n", ""), re.M | re.S)
    assert cmd is not None
    assert yaml.safe_load(cmd.group(1)) == compose()["services"]["proxy"]["command"]


def test_every_copied_and_mounted_path_exists() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            *sources, _ = shlex.split(line)[1:]
            for source in sources:
                assert (ROOT / source).exists(), source
    services = compose()["services"]
    assert (ROOT / services["proxy"]["build"]["context"] / services["proxy"]["build"]["dockerfile"]).is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":")[0]
            if host.startswith("./"):
                assert (ROOT / host).is_dir(), host
            else:
                assert host in compose()["volumes"], f"named volume {host} is not declared"


def test_the_ca_lives_in_a_volume_and_yunikorn_goes_through_the_proxy() -> None:
    doc = compose()
    proxy = doc["services"]["proxy"]
    assert "kfp-state:/state" in proxy["volumes"]
    yunikorn = doc["services"]["yunikorn"]
    assert yunikorn["profiles"] == ["yunikorn"]
    assert yunikorn["environment"]["KUBECONFIG"].startswith("/kubeconfigs/")
    assert yunikorn["depends_on"]["proxy"]["condition"] == "service_healthy"
    assert "7080/healthz" in " ".join(proxy["healthcheck"]["test"])
