#!/usr/bin/env python3
"""Checks that each workspace crate takes every dependency from
[workspace.dependencies], and that each workspace crate's declared rust-version is at least the
highest rust-version among its normal and build dependencies (the floor the
dependency tree sets), using `cargo metadata`. Prints the floors; exits 1 when
a crate claims less than its floor."""
import json
import subprocess
import sys


def ver(s):
    return tuple(int(x) for x in s.split(".")) + (0,) * (3 - len(s.split("."))) if s else (0, 0, 0)


meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--locked"]))
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
bad = 0
for member in meta["workspace_members"]:
    seen, stack = set(), [member]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        for d in nodes[i]["deps"]:
            if any(k["kind"] in (None, "build") for k in d["dep_kinds"]):
                stack.append(d["pkg"])
    seen.discard(member)
    floor = max(seen, key=lambda i: ver(pkgs[i].get("rust_version")))
    need = ver(pkgs[floor].get("rust_version"))
    have = ver(pkgs[member].get("rust_version"))
    name = pkgs[member]["name"]
    ok = have >= need
    bad += not ok
    print(f"{name}: declares {pkgs[member].get('rust_version')}, floor {pkgs[floor].get('rust_version')} "
          f"({pkgs[floor]['name']} {pkgs[floor]['version']}) {'ok' if ok else 'TOO LOW'}")

# Every dependency of every member is declared once, in [workspace.dependencies].
import tomllib  # noqa: E402
for member in meta["workspace_members"]:
    manifest = pkgs[member]["manifest_path"]
    with open(manifest, "rb") as f:
        toml = tomllib.load(f)
    for table in ("dependencies", "dev-dependencies", "build-dependencies"):
        for dep, spec in toml.get(table, {}).items():
            if not (isinstance(spec, dict) and spec.get("workspace") is True):
                print(f"{pkgs[member]['name']}: {table}.{dep} is not taken from [workspace.dependencies]")
                bad += 1
sys.exit(1 if bad else 0)
