"""Driver symbols as data: shared by gen_hooks.py (the build) and check_hooks.py (the hook check).

cudaTypedefs.h declares one PFN_<api>_v<version>[_ptds|_ptsz] typedef per ABI of every driver entry
point. The exported symbol of each follows simgpu/driver/gen_driver_tables.py's rule: the first
version of <api> is the symbol <api>, the n-th is <api>_v<n>, and a per-thread variant appends
_ptds/_ptsz to the symbol current at its version. The legacy ABIs cuda.h keeps behind
__CUDA_API_VERSION_INTERNAL (32-bit CUdeviceptr, CUDA < 3.2) are included: a program can still
ask cuGetProcAddress for them by version.
"""
import re
from collections import defaultdict
from dataclasses import dataclass

CATEGORIES = ("launch", "graph_launch", "copy", "memset", "sync", "naming", "alloc", "resolver", "lifetime", "context")
VARIANT_KIND = {"": 0, "_ptds": 1, "_ptsz": 2}


@dataclass(frozen=True)
class Version:
    api: str        # the name programs ask cuGetProcAddress for, e.g. cuMemcpyHtoD
    version: int    # the CUDA version that introduced this ABI, e.g. 3020
    variant: str    # "", "_ptds" or "_ptsz"
    symbol: str     # the exported symbol, e.g. cuMemcpyHtoD_v2
    typedef: str    # PFN_cuMemcpyHtoD_v3020
    params: str     # the parameter list as declared, e.g. "CUdeviceptr_v2 dstDevice, ..."


def read_versions(typedefs_path):
    """Every versioned ABI declared in cudaTypedefs.h, with its exported symbol."""
    text = open(typedefs_path, encoding="utf-8").read()
    pattern = re.compile(r"typedef\s+CUresult\s*\(CUDAAPI\s*\*(PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?)\)\s*\(([^)]*)\)\s*;")
    found = [(m[1], m[2], int(m[3]), m[4] or "", " ".join(m[5].split())) for m in pattern.finditer(text)]
    base_versions = defaultdict(set)
    for _, api, version, variant, _ in found:
        if not variant:
            base_versions[api].add(version)
    rows = []
    for typedef, api, version, variant, params in found:
        base = sorted(v for v in base_versions.get(api, ()) if v <= version)
        if variant:
            n = len(base)
        else:
            n = base.index(version) + 1
        symbol = (api if n <= 1 else f"{api}_v{n}") + variant
        rows.append(Version(api, version, variant, symbol, typedef, params))
    return sorted(rows, key=lambda r: (r.api, r.version, r.variant))


def read_hooks(def_path):
    """hooks.def as a list of (category, symbol), in file order; raises on a malformed line."""
    hooks = []
    line_pattern = re.compile(r"GPUQOS_HOOK\(\s*(\w+)\s*,\s*(\w+)\s*\)")
    for number, line in enumerate(open(def_path, encoding="utf-8"), 1):
        code = line.split("//")[0].strip()
        if not code:
            continue
        m = line_pattern.fullmatch(code)
        if not m or m[1] not in CATEGORIES:
            raise ValueError(f"{def_path}:{number}: expected GPUQOS_HOOK(<category>, <symbol>) "
                             f"with a category in {', '.join(CATEGORIES)}: {line.strip()}")
        hooks.append((m[1], m[2]))
    return hooks


def read_exclusions(path):
    """hook_exclusions.txt as {symbol: reason}; each line is `<symbol> <reason...>`."""
    exclusions = {}
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        text = line.split("#")[0].strip()
        if not text:
            continue
        symbol, _, reason = text.partition(" ")
        if not reason.strip():
            raise ValueError(f"{path}:{number}: an exclusion needs a reason: {line.strip()}")
        exclusions[symbol] = reason.strip()
    return exclusions
