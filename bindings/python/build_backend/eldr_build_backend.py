"""The PEP 517 build backend of the eldr Python package (standard library only).

``pip install ./bindings/python`` (from a checkout of the eldr repository) runs
it with the interpreter it installs into, which needs nothing from a package
index: ``[build-system] requires = []``. ``build_wheel``:

1. finds ``libeldr.so``: ``ELDR_LIBRARY`` (the file), else ``ELDR_BUILD_DIR``
   (a CMake build of the repository: its ``lib/libeldr.so``), else it builds
   the C API alone (target ``eldr_capi``, CUDA off unless ``ELDR_CMAKE_ARGS``
   says otherwise) from the checkout in a temporary folder;
2. configures ``bindings/python`` as a CMake project of its own
   (``ELDR_PYTHON_WHEEL``) for ``sys.executable``: that interpreter's headers
   (its sysconfig, through FindPython3) and the system's pybind11 CMake config
   (``find_package(pybind11 CONFIG)``, Debian's python3-pybind11), and builds
   the extension ``_eldr`` with the RUNPATH ``$ORIGIN``;
3. packs ``eldr/`` (``src/eldr/*``, the extension and ``libeldr.so.<abi>``
   under its soname) into a wheel tagged for this interpreter
   (``cp312-cp312-linux_x86_64``), with METADATA, WHEEL and a sha256 RECORD.

Settings are environment variables or ``pip --config-settings NAME=VALUE``
with the same names: ``ELDR_SOURCE_DIR`` (the checkout, when this folder is
not ``<checkout>/bindings/python``), ``ELDR_LIBRARY``, ``ELDR_BUILD_DIR``,
``ELDR_BUILD_TYPE`` (the extension's CMake build type, default Release),
``ELDR_CMAKE_ARGS`` (extra arguments for the C API build),
``ELDR_PYTHON_BUILD_DIR`` (keep the extension's CMake build there, one per
interpreter, instead of a temporary folder: rebuilds are incremental),
``ELDR_STRIP`` (``0``: keep the debug info of the shipped libeldr.so),
``ELDR_JOBS``, ``CMAKE`` (the cmake executable). Relative paths are taken
from the checkout's root (pip runs the backend in bindings/python).

Also a command (what ``make wheel`` runs)::

    python bindings/python/build_backend/eldr_build_backend.py --out build/wheels --build-dir build
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

NAME = "eldr"
SUMMARY = "Expert-locality-aware routing for Mixture-of-Experts LLM serving (binding of libeldr.so)"
REQUIRES_PYTHON = ">=3.8"
# bindings/python: the folder holding pyproject.toml.
PROJECT_DIR = Path(__file__).resolve().parent.parent
# A fixed timestamp for every archive member: the same inputs give the same wheel.
ZIP_DATE = (2020, 1, 1, 0, 0, 0)

Settings = Optional[Mapping[str, object]]


class BackendError(RuntimeError):
    """A build step that cannot go on; the message says what to do."""


# ---- settings and sources ----------------------------------------------------


def _setting(config_settings: Settings, name: str) -> Optional[str]:
    """``--config-settings NAME=VALUE`` first, then the environment."""
    if config_settings and config_settings.get(name):
        return str(config_settings[name])
    return os.environ.get(name) or None


def _source_dir(config_settings: Settings) -> Path:
    """The eldr checkout: ELDR_SOURCE_DIR, else the folder two levels up."""
    given = _setting(config_settings, "ELDR_SOURCE_DIR")
    root = Path(given).resolve() if given else PROJECT_DIR.parent.parent
    if not (root / "capi" / "include" / "eldr" / "eldr.h").is_file():
        raise BackendError(
            f"eldr: no eldr checkout at {root} (capi/include/eldr/eldr.h missing). "
            "Run `pip install ./bindings/python` from a checkout of the repository "
            "(pip >= 21.3 builds a local folder in place), or set ELDR_SOURCE_DIR to one."
        )
    return root


def _version(root: Path) -> str:
    """MAJOR.MINOR.PATCH from eldr.h (the library's version)."""
    header = (root / "capi" / "include" / "eldr" / "eldr.h").read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        found = re.search(rf"^#define ELDR_VERSION_{part} (\d+)", header, re.MULTILINE)
        if not found:
            raise BackendError(f"eldr: ELDR_VERSION_{part} not found in eldr.h")
        parts.append(found.group(1))
    return ".".join(parts)


def _tag() -> str:
    """The wheel tag of this interpreter: cp312-cp312-linux_x86_64."""
    if sys.implementation.name != "cpython":
        raise BackendError(f"eldr: the extension is built for CPython, not {sys.implementation.name}")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return f"{python}-{python}{getattr(sys, 'abiflags', '')}-{platform}"


def _run(command: List[str], cwd: Optional[Path] = None) -> None:
    # pip shows a failed build's output; progress goes to stderr like a compiler's.
    print("eldr build:", " ".join(shlex.quote(c) for c in command), file=sys.stderr, flush=True)
    result = subprocess.run(command, cwd=cwd, stdout=sys.stderr)
    if result.returncode != 0:
        raise BackendError(f"eldr: `{command[0]} {command[1]}` failed with exit status {result.returncode}")


def _cmake(config_settings: Settings) -> str:
    cmake = _setting(config_settings, "CMAKE") or shutil.which("cmake")
    if not cmake:
        raise BackendError("eldr: cmake not found (Debian: apt-get install cmake; or set CMAKE)")
    return cmake


# ---- ELF: the soname and the extension's RUNPATH, read without binutils -------

DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29


def elf_dynamic_strings(path: Path) -> Dict[int, List[str]]:
    """The string entries (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) of a
    64-bit little-endian ELF shared object's dynamic section."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BackendError(f"eldr: {path} is not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, ...)
    sections = [struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)]
    found: Dict[int, List[str]] = {}
    for section in sections:
        if section[1] != 6:  # SHT_DYNAMIC
            continue
        strings = sections[section[6]][4]  # sh_link: the .dynstr section's offset
        for offset in range(section[4], section[4] + section[5], 16):
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag == 0:  # DT_NULL
                break
            if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
                start = strings + value
                found.setdefault(tag, []).append(data[start : data.index(b"\0", start)].decode())
    return found


# ---- the build ----------------------------------------------------------------


def _library(config_settings: Settings, root: Path, work: Path) -> Path:
    """libeldr.so: given, from a build folder, or built here (C API only)."""
    given = _setting(config_settings, "ELDR_LIBRARY")
    build_dir = _setting(config_settings, "ELDR_BUILD_DIR")
    # Relative paths are the checkout's: pip runs this in bindings/python.
    if given:
        library = root / given
    elif build_dir:
        library = root / build_dir / "lib" / "libeldr.so"
    else:
        capi = work / "capi"
        extra = shlex.split(_setting(config_settings, "ELDR_CMAKE_ARGS") or "")
        cmake = _cmake(config_settings)
        _run([cmake, "-S", str(root), "-B", str(capi), "-DCMAKE_BUILD_TYPE=Release",
              "-DELDR_BUILD_TESTS=OFF", "-DELDR_BUILD_BENCH=OFF", "-DELDR_BUILD_TOOLS=OFF",
              "-DELDR_BUILD_BINDINGS=OFF", "-DELDR_BUILD_EXAMPLES=OFF",
              "-DELDR_ENABLE_CUDA=OFF", *extra])
        _run([cmake, "--build", str(capi), "--target", "eldr_capi", "-j", _jobs(config_settings)])
        library = capi / "lib" / "libeldr.so"
    if not library.is_file():
        raise BackendError(f"eldr: {library} does not exist (ELDR_LIBRARY / ELDR_BUILD_DIR: "
                           "build it first, e.g. cmake --build build --target eldr_capi)")
    return library.resolve()


def _jobs(config_settings: Settings) -> str:
    return _setting(config_settings, "ELDR_JOBS") or str(os.cpu_count() or 1)


def _build_package(config_settings: Settings, work: Path) -> Path:
    """Builds the extension and assembles the package folder eldr/ under work."""
    root = _source_dir(config_settings)
    library = _library(config_settings, root, work)
    soname = elf_dynamic_strings(library).get(DT_SONAME, [library.name])[0]
    cmake = _cmake(config_settings)
    # A build folder of its own for the extension makes a rebuild incremental.
    ext_build = Path(_setting(config_settings, "ELDR_PYTHON_BUILD_DIR") or work / "python")
    _run([cmake, "-S", str(PROJECT_DIR), "-B", str(ext_build),
          f"-DCMAKE_BUILD_TYPE={_setting(config_settings, 'ELDR_BUILD_TYPE') or 'Release'}",
          f"-DPython3_EXECUTABLE={sys.executable}",
          f"-DELDR_LIBRARY={library}",
          f"-DELDR_INCLUDE_DIR={root / 'capi' / 'include'}"])
    _run([cmake, "--build", str(ext_build), "--target", "eldr_python_module",
          "-j", _jobs(config_settings)])

    package = work / "wheel" / NAME
    package.mkdir(parents=True)
    for source in sorted((PROJECT_DIR / "src" / NAME).iterdir()):
        if source.is_file() and (source.suffix in (".py", ".pyi") or source.name == "py.typed"):
            shutil.copyfile(source, package / source.name)
    extension_name = "_eldr" + str(sysconfig.get_config_var("EXT_SUFFIX"))
    extension = ext_build / "python" / NAME / extension_name
    if not extension.is_file():
        raise BackendError(f"eldr: the build made no {extension} (the wrong interpreter's headers?)")
    shutil.copyfile(extension, package / extension_name)
    shutil.copyfile(library, package / soname)
    # The wheel ships no DWARF (a RelWithDebInfo libeldr.so is ~16 MB, ~1 MB
    # without): ELDR_STRIP=0 keeps it. The dynamic symbols stay.
    strip = shutil.which("strip")
    if strip and _setting(config_settings, "ELDR_STRIP") != "0":
        _run([strip, "--strip-debug", str(package / soname)])
    # The extension finds the library next to itself: RUNPATH $ORIGIN, NEEDED the soname.
    dynamic = elf_dynamic_strings(package / extension_name)
    if soname not in dynamic.get(DT_NEEDED, []):
        raise BackendError(f"eldr: {extension_name} does not link {soname}: {dynamic}")
    if "$ORIGIN" not in ":".join(dynamic.get(DT_RUNPATH, []) + dynamic.get(DT_RPATH, [])).split(":"):
        raise BackendError(f"eldr: {extension_name} has no RUNPATH $ORIGIN: {dynamic}")
    return package


def _metadata(version: str) -> str:
    readme = PROJECT_DIR / "README.md"
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        f"Requires-Python: {REQUIRES_PYTHON}",
        "Provides-Extra: numpy",
        'Requires-Dist: numpy; extra == "numpy"',
        "Description-Content-Type: text/markdown",
    ]
    text = "\n".join(lines) + "\n"
    if readme.is_file():
        text += "\n" + readme.read_text(encoding="utf-8")
    return text


def _wheel_file(tag: str) -> str:
    return "\n".join([
        "Wheel-Version: 1.0",
        "Generator: eldr_build_backend",
        "Root-Is-Purelib: false",
        f"Tag: {tag}",
    ]) + "\n"


def _dist_info(version: str) -> str:
    return f"{NAME}-{version}.dist-info"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(path: Path, files: List[Tuple[str, bytes]], dist_info: str) -> None:
    """Writes the wheel: the files, then RECORD (each file's sha256 and size)."""
    record = io.StringIO()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            executable = name.endswith(".so") or ".so." in name
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
            record.write(f"{name},{_record_hash(data)},{len(data)}\n")
        record_name = f"{dist_info}/RECORD"
        record.write(f"{record_name},,\n")
        info = zipfile.ZipInfo(record_name, ZIP_DATE)
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        wheel.writestr(info, record.getvalue())


# ---- PEP 517 hooks --------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Settings = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Settings = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Settings = None) -> str:
    version = _version(_source_dir(config_settings))
    dist_info = Path(metadata_directory) / _dist_info(version)
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata(version), encoding="utf-8")
    (dist_info / "WHEEL").write_text(_wheel_file(_tag()), encoding="utf-8")
    return dist_info.name


def build_wheel(wheel_directory: str, config_settings: Settings = None,
                metadata_directory: Optional[str] = None) -> str:
    version = _version(_source_dir(config_settings))
    tag = _tag()
    dist_info = _dist_info(version)
    with tempfile.TemporaryDirectory(prefix="eldr-wheel-") as work:
        package = _build_package(config_settings, Path(work))
        files = [(f"{NAME}/{p.name}", p.read_bytes()) for p in sorted(package.iterdir())]
    files.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    files.append((f"{dist_info}/WHEEL", _wheel_file(tag).encode()))
    name = f"{NAME}-{version}-{tag}.whl"
    out = Path(wheel_directory)
    out.mkdir(parents=True, exist_ok=True)
    _write_wheel(out / name, files, dist_info)
    print(f"eldr build: wrote {out / name}", file=sys.stderr, flush=True)
    return name


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    """bindings/python as a source archive. Building a wheel from it still
    needs a checkout of the repository (ELDR_SOURCE_DIR): the C API lives there."""
    version = _version(_source_dir(config_settings))
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    pkg_info = _metadata(version).encode()
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        for path in sorted(PROJECT_DIR.rglob("*")):
            relative = path.relative_to(PROJECT_DIR)
            if path.is_file() and "__pycache__" not in relative.parts and path.suffix != ".pyc":
                sdist.add(path, f"{base}/{relative}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        sdist.addfile(info, io.BytesIO(pkg_info))
    return name


# ---- command line (make wheel) ----------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Build the eldr wheel for this interpreter.")
    parser.add_argument("--out", required=True, help="folder for the .whl")
    parser.add_argument("--build-dir", help="reuse this CMake build's lib/libeldr.so (ELDR_BUILD_DIR)")
    parser.add_argument("--library", help="reuse this libeldr.so (ELDR_LIBRARY)")
    args = parser.parse_args(argv)
    settings: Dict[str, object] = {}
    if args.build_dir:
        settings["ELDR_BUILD_DIR"] = str(Path(args.build_dir).resolve())
    if args.library:
        settings["ELDR_LIBRARY"] = str(Path(args.library).resolve())
    try:
        name = build_wheel(args.out, settings)
    except BackendError as error:
        print(error, file=sys.stderr)
        return 1
    print(Path(args.out) / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
