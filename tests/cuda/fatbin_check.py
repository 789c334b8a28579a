"""Reads the CUDA fat binary that nvcc embedded in a shared library (its
.nv_fatbin section) and checks that it holds device code for the given
architecture: a cubin (an ELF for EM_CUDA) built for sm_ARCH and PTX for
compute_ARCH, which newer GPUs compile at load time. No GPU and no cuobjdump
needed: the standard library reads the ELF and the fat binary's headers.

    fatbin_check.py LIBRARY ARCH     e.g. build/lib/libeldr.so 90
"""

from __future__ import annotations

import struct
import sys
from typing import Dict, List, Tuple

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_CUBIN = 1, 2
EM_CUDA = 190


def section(path: str, wanted: str) -> bytes:
    """The contents of section `wanted` of a 64-bit little-endian ELF file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"fatbin_check: {path} is not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", names + name)
        if data[names + name : end].decode() == wanted:
            return data[offset : offset + size]
    sys.exit(f"fatbin_check: {path} has no {wanted} section: no CUDA device code")


def entries(fatbin: bytes) -> List[Tuple[int, int, bytes]]:
    """(kind, arch, payload) of every entry of every fat binary in the section.

    A fat binary: magic, version, header size, size of its entries; each
    entry: kind (1 PTX, 2 cubin), header size, payload size, ..., the
    architecture (90 for sm_90) at byte 28 of its header."""
    found = []
    offset = 0
    while offset + 16 <= len(fatbin):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", fatbin, offset)
        if magic != FATBIN_MAGIC:
            sys.exit(f"fatbin_check: no fat binary magic at offset {offset} of .nv_fatbin")
        at, end = offset + header_size, offset + header_size + size
        while at < end:
            kind, _, entry_header, payload_size = struct.unpack_from("<HHIQ", fatbin, at)
            (arch,) = struct.unpack_from("<I", fatbin, at + 28)
            payload = fatbin[at + entry_header : at + entry_header + payload_size]
            found.append((kind, arch, payload))
            at += entry_header + payload_size
        offset = (end + 7) & ~7  # fat binaries in one section are 8-byte aligned
    return found


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    library, arch = sys.argv[1], int(sys.argv[2])
    found = entries(section(library, ".nv_fatbin"))
    by_kind: Dict[int, List[int]] = {KIND_PTX: [], KIND_CUBIN: []}
    for kind, entry_arch, payload in found:
        by_kind.setdefault(kind, []).append(entry_arch)
        if kind == KIND_CUBIN:
            (machine,) = struct.unpack_from("<H", payload, 18)
            if payload[:4] != b"\x7fELF" or machine != EM_CUDA:
                sys.exit(f"fatbin_check: a cubin entry of sm_{entry_arch} is not a CUDA ELF")
    print(f"fatbin_check: {library}: cubin for sm_{by_kind[KIND_CUBIN]}, PTX for compute_{by_kind[KIND_PTX]}")
    if arch not in by_kind[KIND_CUBIN]:
        sys.exit(f"fatbin_check: no sm_{arch} cubin in {library}")
    if arch not in by_kind[KIND_PTX]:
        sys.exit(f"fatbin_check: no compute_{arch} PTX in {library}")


if __name__ == "__main__":
    main()
