#!/usr/bin/env python3
"""Generates libgpuqos.so's hook code from hooks.def and the installed cudaTypedefs.h.

hooks.def names each hooked symbol once; cudaTypedefs.h gives its full parameter list (through the
version rule in cuda_symbols.py). Outputs, in <out>/:
  gpuqos/intercept/hook_pfn.inc   GPUQOS_PFN(<symbol>, <PFN typedef>): the typed real-function slots
  gpuqos/intercept/proc_table.inc {api, version, variant, symbol} for every ABI of every API that has
                                  a hooked symbol: what cuGetProcAddress answers, as data
  hooks.cpp                       the exported extern "C" hook definitions

A hook body describes the call as an Operation from its parameters (by name, the names NVIDIA's
headers use) and hands it to gpuqos::intercept::intercept<HookId>, which gates and forwards it (1-D
copies: intercept_copy<HookId>, and 2-D and 3-D copies intercept_copy_pitched<HookId>, which may also
split the copy into chunks).
"""
import argparse
import os
import re
import sys

import cuda_symbols

# Copy direction from the symbol name, most specific first.
DIRECTIONS = [("Peer", "peer"), ("HtoD", "host_to_device"), ("HtoA", "host_to_device"),
              ("DtoH", "device_to_host"), ("AtoH", "device_to_host"), ("DtoD", "device_to_device"),
              ("DtoA", "device_to_device"), ("AtoD", "device_to_device"), ("AtoA", "device_to_device")]

# Operation's fields in declaration order (C++20 designated initializers must follow it).
FIELD_ORDER = ["stream", "per_thread", "function", "kernel", "grid", "block", "shared_mem_bytes",
               "kernel_params", "graph_exec", "bytes", "direction", "event", "context", "device", "device_ptr",
               "src_ptr", "dst_ptr", "host_ptr", "out_handle", "name", "module"]


def split_params(params):
    """"CUfunction f, unsigned int gridDimX" -> [("CUfunction", "f"), ("unsigned int", "gridDimX")]."""
    if params.strip() in ("", "void"):
        return []
    result = []
    for p in params.split(","):
        m = re.fullmatch(r"\s*(.*?[\s*])(\w+)\s*", p)
        if not m:
            raise ValueError(f"cannot parse parameter '{p}'")
        result.append((m[1].strip(), m[2]))
    return result


def element_bytes(symbol):
    m = re.search(r"D2?D?(8|16|32)", symbol.replace("cuMemset", ""))
    return int(m[1]) // 8 if m else 1


def describe(category, symbol, params):
    """The designated initializers of the Operation a hook builds, e.g. {".stream": "hStream"}."""
    names = {name: type_ for type_, name in params}
    f = {}
    if "hStream" in names:
        f["stream"] = "hStream"
    if symbol.endswith(("_ptsz", "_ptds")):
        f["per_thread"] = "true"
    if category == "launch":
        if "f" in names:
            f["function"] = "f"
        if "gridDimX" in names:
            f["grid"] = "{gridDimX, gridDimY, gridDimZ}"
        if "grid_width" in names:
            f["grid"] = "{static_cast<unsigned>(grid_width), static_cast<unsigned>(grid_height), 1}"
        if "blockDimX" in names:
            f["block"] = "{blockDimX, blockDimY, blockDimZ}"
        if "sharedMemBytes" in names:
            f["shared_mem_bytes"] = "sharedMemBytes"
        if "kernelParams" in names:
            f["kernel_params"] = "kernelParams"
        if "config" in names:  # cuLaunchKernelEx: the shape and the stream are in the config
            f.update(stream="launch_stream(config)", grid="launch_grid(config)", block="launch_block(config)",
                     shared_mem_bytes="launch_shared_mem_bytes(config)")
    elif category == "graph_launch":
        f["graph_exec"] = next(n for n, t in names.items() if t == "CUgraphExec")
    elif category == "copy":
        f["direction"] = next((f"CopyDirection::{d}" for key, d in DIRECTIONS if key in symbol), "CopyDirection::unknown")
        if "ByteCount" in names:
            f["bytes"] = "ByteCount"
        host = next((n for n in ("srcHost", "dstHost") if n in names), None)
        if host:
            f["host_ptr"] = host
        elif "pCopy" in names:
            f.update(bytes="copy_bytes(pCopy)", direction="copy_direction(pCopy)", host_ptr="copy_host_ptr(pCopy)",
                     src_ptr="copy_unified_src(pCopy)", dst_ptr="copy_unified_dst(pCopy)")
        elif "sizes" in names:
            f.update(bytes="batch_bytes(sizes, count)", src_ptr="first_ptr(srcs, count)", dst_ptr="first_ptr(dsts, count)")
        if "src" in names and "dst" in names:  # cuMemcpy, cuMemcpyAsync: unified addresses
            f.update(src_ptr="src", dst_ptr="dst")
        elif "opList" in names:
            f["bytes"] = "batch_bytes(opList, numParams)"
    elif category == "memset":
        size = element_bytes(symbol)
        extent = "Width) * Height" if "Height" in names else "N)"
        f["bytes"] = f"static_cast<std::uint64_t>({extent} * {size}"
        f["device_ptr"] = "dstDevice"
    elif category == "context":  # cuDevicePrimaryCtxRetain: the handle it writes, of which device
        f.update(out_handle="pctx", device="dev")
    elif category in ("sync", "lifetime"):
        for name, field in (("hEvent", "event"), ("ctx", "context"), ("dev", "device")):
            if name in names:
                f[field] = name
    elif category == "naming":  # a getter writes a handle; an unload has none
        out = next((n for n, t in names.items() if t.endswith("*") and n != "name"), None)
        if out:
            f["out_handle"] = out
        for name, field in (("name", "name"), ("kernel", "kernel"), ("hmod", "module"), ("library", "module"),
                            ("hGraphExec", "graph_exec")):
            if name in names:
                f[field] = name
    elif category == "alloc":
        if "bytesize" in names:
            f["bytes"] = "bytesize"
        if "WidthInBytes" in names:
            f["bytes"] = "static_cast<std::uint64_t>(WidthInBytes) * Height"
        if "dptr" in names:
            f["out_handle" if names["dptr"].endswith("*") else "device_ptr"] = "dptr"
    unknown = set(f) - set(FIELD_ORDER)
    assert not unknown, unknown
    return [(field, f[field]) for field in FIELD_ORDER if field in f]


def is_linear_copy(category, params):
    """A 1-D copy, (dst, src, ByteCount[, hStream]): one the shim may split into chunks (intercept_copy)."""
    names = [n for _, n in params]
    return (category == "copy" and len(names) in (3, 4) and names[0] in ("dstDevice", "dstHost", "dst")
            and names[1] in ("srcDevice", "srcHost", "src") and names[2] == "ByteCount"
            and names[3:] in ([], ["hStream"]))


def is_pitched_copy(category, params):
    """A 2-D or 3-D copy, (pCopy[, hStream]) of a CUDA_MEMCPY2D or CUDA_MEMCPY3D (not a peer's, whose
    sides are in two contexts): one the shim may split into bands of rows or slices."""
    if category != "copy" or len(params) not in (1, 2):
        return False
    struct = params[0][0]
    return "CUDA_MEMCPY2D" in struct or ("CUDA_MEMCPY3D" in struct and "PEER" not in struct)


def hook_definition(category, version):
    params = split_params(version.params)
    signature = ", ".join(f"{t} {n}" for t, n in params)
    args = ", ".join(n for _, n in params)
    lines = [f'extern "C" GPUQOS_HOOK_EXPORT CUresult CUDAAPI {version.symbol}({signature}) {{']
    if category == "resolver":
        lines.append(f"  return answer_proc_address(real_function<HookId::hook_{version.symbol}>(), {args});")
    else:
        init = ", ".join(f".{field} = {value}" for field, value in describe(category, version.symbol, params))
        body = ("intercept_copy" if is_linear_copy(category, params)
                else "intercept_copy_pitched" if is_pitched_copy(category, params) else "intercept")
        call_args = f"{', ' if args else ''}{args}"
        lines.append(f"  return {body}<HookId::hook_{version.symbol}>(Operation{{{init}}}{call_args});")
    lines.append("}")
    return "\n".join(lines)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Leave an unchanged file alone so that a re-run does not rebuild what includes it.
    if os.path.exists(path) and open(path, encoding="utf-8").read() == text:
        return
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--typedefs", required=True)
    parser.add_argument("--hooks", required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()

    versions = cuda_symbols.read_versions(options.typedefs)
    by_symbol = {v.symbol: v for v in versions}
    hooks = cuda_symbols.read_hooks(options.hooks)
    missing = [s for _, s in hooks if s not in by_symbol]
    duplicates = sorted({s for _, s in hooks if [h for _, h in hooks].count(s) > 1})
    if missing or duplicates:
        for s in missing:
            print(f"{options.hooks}: {s}: no such driver entry point in {options.typedefs}", file=sys.stderr)
        for s in duplicates:
            print(f"{options.hooks}: {s} is listed more than once", file=sys.stderr)
        sys.exit(1)

    header = "// Generated by intercept/gen_hooks.py from hooks.def and cudaTypedefs.h. Do not edit.\n"
    pfn = "".join(f"GPUQOS_PFN({s}, {by_symbol[s].typedef})\n" for _, s in hooks)
    write(f"{options.out}/gpuqos/intercept/hook_pfn.inc", header + pfn)

    hooked_apis = {by_symbol[s].api for _, s in hooks}
    proc_rows = [v for v in versions if v.api in hooked_apis]
    proc = "".join(f'{{"{v.api}", {v.version}, {cuda_symbols.VARIANT_KIND[v.variant]}, "{v.symbol}"}},\n'
                   for v in proc_rows)
    write(f"{options.out}/gpuqos/intercept/proc_table.inc", header + proc)

    body = [header.rstrip(), "// One exported definition per line of hooks.def; see shim/intercept.h.",
            '#include "intercept.h"', "", "using namespace gpuqos::intercept;", ""]
    body += [hook_definition(c, by_symbol[s]) for c, s in hooks]
    body += ["", "namespace gpuqos::intercept {", "",
             "// Our definition of each hook, in HookId order.",
             "void* hook_address(HookId id) noexcept {",
             "  static void* const kAddresses[] = {"]
    body += [f"      reinterpret_cast<void*>(&::{s})," for _, s in hooks]
    body += ["  };", "  return kAddresses[static_cast<std::size_t>(id)];", "}", "",
             "}  // namespace gpuqos::intercept", ""]
    write(f"{options.out}/hooks.cpp", "\n".join(body))
    print(f"gen_hooks: {len(hooks)} hooks, {len(proc_rows)} cuGetProcAddress rows")


if __name__ == "__main__":
    main()
