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

# Every declared dependency is named in the crate's sources: a normal or
# build dependency in src/ (or build.rs), a dev-dependency in src/, tests/,
# benches/ or examples/. A crate named nowhere is dead weight, and the
# README's crates table drifts with it.
import os  # noqa: E402
import re  # noqa: E402


def sources(root, dirs):
    text = []
    for d in dirs:
        p = os.path.join(root, d)
        if os.path.isfile(p):
            text.append(open(p, encoding="utf-8", errors="replace").read())
            continue
        for dirpath, _, files in os.walk(p):
            for f in files:
                if f.endswith(".rs"):
                    text.append(open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read())
    return "\n".join(text)


for member in meta["workspace_members"]:
    pkg = pkgs[member]
    root = os.path.dirname(pkg["manifest_path"])
    normal = sources(root, ["src", "build.rs"])
    dev = normal + sources(root, ["tests", "benches", "examples"])
    for d in pkg["dependencies"]:
        lib = (d.get("rename") or d["name"]).replace("-", "_")
        text = dev if d["kind"] == "dev" else normal
        if not re.search(r"\b" + re.escape(lib) + r"\b", text):
            where = "dev-dependencies" if d["kind"] == "dev" else "dependencies"
            print(f"{pkg['name']}: {where}.{d['name']} is declared but its sources never name `{lib}`")
            bad += 1

# The README's crates table: each crate it names in a place is a direct
# dependency of that place (cargo metadata), and every place it lists exists.
PLACES = {
    "kernel": ["winx-release-kernel"],
    "runtime": ["winx-release-runtime"],
    "engine": ["winx-release-engine"],
    "protocol": ["winx-release-protocol"],
    "guardian": ["winx-release-guardian"],
    "mcp-tools": ["winx-release-mcp-tools"],
    "host": ["winx-release-host"],
    "stress": ["winx-release-stress"],
    "tools": ["winx-release-tools"],
    "binary": ["winx-release"],
    "tests": ["winx-release"],
    "benches": ["winx-release"],
}
by_name = {pkgs[m]["name"]: pkgs[m] for m in meta["workspace_members"]}
readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8").read()
table = re.search(r"\| crate \| where \| for \|\n\|[-| ]+\|\n((?:\|.*\|\n)+)", readme)
if not table:
    print("README.md: no crates table (| crate | where | for |)")
    bad += 1
else:
    fuzz_manifest = os.path.join(os.path.dirname(__file__), "..", "fuzz", "Cargo.toml")
    fuzz_deps = set(tomllib.load(open(fuzz_manifest, "rb")).get("dependencies", {})) if os.path.exists(fuzz_manifest) else set()
    for row in table.group(1).splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        crates = re.findall(r"`([A-Za-z0-9_-]+)`", cells[0])
        places = [p.strip() for p in cells[1].split(",") if p.strip()]
        for place in places:
            for crate in crates:
                if place == "fuzz":
                    ok = crate in fuzz_deps
                elif place not in PLACES:
                    print(f"README.md crates table: unknown place {place!r} for `{crate}` (known: {', '.join(PLACES)}, fuzz)")
                    bad += 1
                    continue
                else:
                    ok = False
                    for pname in PLACES[place]:
                        p = by_name.get(pname)
                        if p is None:
                            continue
                        kinds = {"tests": ("dev",), "benches": ("dev",)}.get(place, (None, "build"))
                        ok |= any(d["name"] == crate and d["kind"] in kinds for d in p["dependencies"])
                    if place in ("tests", "benches"):
                        # A dev-dependency of any member (its tests or benches).
                        ok |= any(d["name"] == crate and d["kind"] == "dev" for m in by_name.values() for d in m["dependencies"])
                if not ok:
                    print(f"README.md crates table: `{crate}` listed for {place}, which does not depend on it")
                    bad += 1
sys.exit(1 if bad else 0)
