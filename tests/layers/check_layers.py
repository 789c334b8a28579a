#!/usr/bin/env python3
"""The layer rules of CONTRIBUTING.md, checked over the CMake targets' link
edges (<build>/layers/link_graph.txt, written at configure time by
cmake/EldrLayers.cmake) and over every folder's #include lines. Exits 1
naming each broken rule. --inject-link / --inject-include add a fake edge
or include first; --self-test injects one of each and passes only if both
are reported (so the check cannot pass silently). Standard library only."""
import argparse
import re
import subprocess
import sys
from pathlib import Path

# Lowest first: a layer may use the layers before it, never one after it.
LAYERS = ["core", "shm", "pool", "lab", "cuda", "capi", "sidecar", "consumers", "tests"]
FOLDER_LAYER = {"core": "core", "shm": "shm", "pool": "pool", "lab": "lab", "cuda": "cuda",
                "capi": "capi", "sidecar": "sidecar", "tools": "consumers",
                "bindings": "consumers", "examples": "consumers", "epp": "consumers",
                "tests": "tests"}
RANK = {name: i for i, name in enumerate(LAYERS)}
# Only the daemon and the tests may link the daemon's library; the daemon
# never links the simulator.
SIDECAR_LIBRARY = "eldr_sidecar"
SIMULATOR = "eldr_lab"
SOURCE_SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".h", ".hpp"}
SKIP_DIRS = {"build", "target", "vendor", "__pycache__", ".deps", "node_modules", "corpus"}
INCLUDE = re.compile(r'^\s*(?://\s*)?#\s*include\s*[<"]([^>"]+)[>"]')
# Prefixes of headers that are private to their layer (internal/ folders).
INTERNAL_PREFIXES = {"eldr/internal/": "core", "eldr/shm/": "shm"}
PUBLIC_PREFIXES = {"eldr/shm.hpp": "shm", "eldr/pool/": "pool", "eldr/lab/": "lab",
                   "eldr/cuda/": "cuda", "eldr/eldr.h": "capi"}


def layer_of_folder(rel):
    return FOLDER_LAYER.get(Path(rel).parts[0] if rel else "", None)


def read_link_graph(path):
    edges = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            edges.append(tuple(parts))
    return edges


def check_links(edges):
    errors = []
    for src, src_dir, dst, dst_dir in edges:
        a, b = layer_of_folder(src_dir), layer_of_folder(dst_dir)
        if a is None or b is None:
            continue
        where = f"target {src} ({src_dir}) links {dst} ({dst_dir})"
        if RANK[b] > RANK[a]:
            errors.append(f"back edge: {where}: {a} may not link {b}, a layer above it")
        if dst.endswith("_internal") and a == "consumers":
            errors.append(f"private API: {where}: {a} may link other layers' public targets only")
        if dst == SIDECAR_LIBRARY and a not in ("sidecar", "tests"):
            errors.append(f"daemon dependency: {where}: no layer but sidecar and tests links "
                          f"{SIDECAR_LIBRARY}")
        if dst == SIMULATOR and a == "sidecar":
            errors.append(f"simulator in the daemon: {where}: eldrd may not link the simulator")
    return errors


def header_owner(root, includer, name, schemas, basenames):
    """(layer, public?) of an included header, or None when it is the
    includer's own folder's, a system header or generated elsewhere."""
    for prefix, layer in INTERNAL_PREFIXES.items():
        if name.startswith(prefix):
            return layer, False
    for prefix, layer in PUBLIC_PREFIXES.items():
        if name.startswith(prefix):
            return layer, True
    m = re.fullmatch(r"eldr/(\w+)_generated\.h", name)
    if m:
        layer = schemas.get(m.group(1))
        return (layer, False) if layer else None
    if name.startswith("eldr/") and (root / "core/include" / name).exists():
        return "core", True
    if "/" in name or (includer.parent / name).exists():
        return None
    own = Path(includer.relative_to(root)).parts[0]
    folders = basenames.get(name, set())
    if own in folders or not folders:
        return None
    other = sorted(folders)[0]
    return FOLDER_LAYER[other], False


def source_files(root):
    for folder in FOLDER_LAYER:
        base = root / folder
        if not base.is_dir():
            continue
        for path in base.rglob("*"):
            rel = path.relative_to(root).parts
            if any(p in SKIP_DIRS or p.startswith(".") for p in rel):
                continue
            if path.suffix in SOURCE_SUFFIXES and path.is_file():
                yield path


def check_includes(root, injected):
    files = list(source_files(root))
    schemas = {p.stem: FOLDER_LAYER[p.relative_to(root).parts[0]]
               for p in root.glob("*/schema/*.fbs")}
    basenames = {}
    for f in files:
        folder = f.relative_to(root).parts[0]
        if folder != "tests" and f.suffix in {".h", ".hpp"}:
            basenames.setdefault(f.name, set()).add(folder)
    errors = []
    for f in files:
        rel = f.relative_to(root)
        names = [m.group(1) for line in f.read_text(errors="replace").splitlines()
                 if (m := INCLUDE.match(line))]
        names += [h for (path, h) in injected if path == str(rel)]
        me = FOLDER_LAYER[rel.parts[0]]
        for name in names:
            owner = header_owner(root, f, name, schemas, basenames)
            if owner is None:
                continue
            layer, public = owner
            if layer == me:
                continue
            where = f"{rel} includes \"{name}\" ({layer})"
            if RANK[layer] > RANK[me]:
                errors.append(f"back edge: {where}: {me} may not include {layer}, a layer above it")
            elif not public and me == "consumers":
                errors.append(f"private API: {where}: {me} may include other layers' public "
                              f"headers only")
            elif layer == "sidecar" and me != "tests":
                errors.append(f"daemon dependency: {where}: only the tests include sidecar/")
    return errors


def run(args):
    root = Path(args.source_dir).resolve()
    edges = read_link_graph(args.link_graph)
    folder_of = {e[0]: e[1] for e in edges} | {e[2]: e[3] for e in edges}
    for spec in args.inject_link:
        src, dst = spec.split(":")
        edges.append((src, folder_of.get(src, "?"), dst, folder_of.get(dst, "?")))
    injected = [tuple(spec.split(":", 1)) for spec in args.inject_include]
    if not edges:
        return ["the link graph is empty: reconfigure the build"]
    return check_links(edges) + check_includes(root, injected)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--link-graph", required=True)
    ap.add_argument("--inject-link", action="append", default=[], metavar="TARGET:TARGET")
    ap.add_argument("--inject-include", action="append", default=[], metavar="FILE:HEADER")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        cmd = [sys.executable, __file__, "--source-dir", args.source_dir, "--link-graph",
               args.link_graph, "--inject-link", "eldr:eldr_sidecar",
               "--inject-include", "core/route/router.cpp:service.hpp"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        wanted = ["target eldr (core) links eldr_sidecar (sidecar)",
                  'core/route/router.cpp includes "service.hpp" (sidecar)']
        missing = [w for w in wanted if w not in out.stdout]
        if out.returncode != 1 or missing:
            print(out.stdout + out.stderr)
            print(f"layers self-test: FAILED: rc {out.returncode}, not reported: {missing}")
            return 1
        print("layers self-test: an injected back edge and include are both reported")
        return 0
    errors = run(args)
    for e in errors:
        print(f"layers: {e}")
    if errors:
        print(f"layers: {len(errors)} broken rule(s); see CONTRIBUTING.md")
        return 1
    print("layers: every link edge and #include follows CONTRIBUTING.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
