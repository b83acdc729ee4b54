"""`profiles validate|list|manifests`."""

from __future__ import annotations

import argparse
import sys

from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_file


def run(args: argparse.Namespace) -> int:
    """Validate files, list a directory, or print files as FaultProfile objects."""
    if args.profiles_command == "manifests":
        return manifests(args)
    if args.profiles_command == "validate":
        status = OK
        for path in args.files:
            try:
                profile = load_file(path)
            except ProfileError as e:
                print(e, file=sys.stderr)
                status = USAGE
                continue
            print(f"{path}: ok ({profile.name}, {len(profile.spec.rules)} rules)")
        return status
    try:
        entries = load_dir(args.dir)
    except ProfileError as e:
        print(e, file=sys.stderr)
        return USAGE
    width = max((len(n) for n in entries), default=4)
    for name, entry in sorted(entries.items()):
        first = (entry.profile.metadata.description.strip().splitlines() or [""])[0]
        print(f"{name:<{width}}  {len(entry.profile.spec.rules):>2} rules  {first}")
    return OK


def manifests(args: argparse.Namespace) -> int:
    """Every file as a FaultProfile object, one YAML document each; nothing is printed if one is bad."""
    import yaml

    from kube_fault_proxy.proxy.crd.objects import profile_to_object

    objects, status = [], OK
    for path in args.files:
        try:
            objects.append(profile_to_object(load_file(path), args.namespace))
        except ProfileError as e:
            print(e, file=sys.stderr)
            status = USAGE
    if status == OK:
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, width=100))
    return status
