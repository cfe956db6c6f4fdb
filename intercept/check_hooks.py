#!/usr/bin/env python3
"""The hook check: every launch, copy, memset, graph-launch and lifetime entry point of the installed
cuda.h must be hooked (hooks.def) or deliberately excluded (hook_exclusions.txt, with a reason).

The entry points are the cu(Launch|Memcpy|Memset|GraphLaunch)* functions cuda.h declares, the calls
that destroy a stream or a context (LIFETIME: the completion tracker must record its events first), and
every exported symbol of each (legacy, _v2, _ptds, _ptsz), derived from cudaTypedefs.h by the
version rule in cuda_symbols.py.

It also refuses a hooked API that cuda.h renames to another API (`#define cuGraphInstantiate
cuGraphInstantiateWithFlags`): cuGetProcAddress answers such a name with the other API's ABI, which
the version map derived from cudaTypedefs.h does not know, so the shim would hand the old ABI's hook
to callers of the new one. Exit status 0 when all are covered; 1 naming each offender.
"""
import argparse
import re
import sys

import cuda_symbols

FAMILIES = re.compile(r"cu(Launch|Memcpy|Memset|GraphLaunch)\w*|cu(StreamDestroy|CtxDestroy|GreenCtxDestroy|DevicePrimaryCtxRelease|DevicePrimaryCtxReset)")


def renamed_apis(cuda_h_text, versions):
    """{api: other api} for each `#define api other` of cuda.h whose target is not one of api's own
    symbols (its _v<n> ABIs, or the _ptds/_ptsz wrapper of one)."""
    own = {}
    for v in versions:
        own.setdefault(v.api, set()).add(v.symbol)
    renamed = {}
    for api, target in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(cu\w+)[ \t]+(.+?)[ \t]*$", cuda_h_text, re.M):
        wrapped = re.fullmatch(r"__CUDA_API_PT(?:DS|SZ)\(\s*(cu\w+)\s*\)", target)
        target = wrapped[1] if wrapped else target
        if re.fullmatch(r"cu\w+", target) and target not in (api, api + "_ptds", api + "_ptsz") \
                and target not in own.get(api, ()):
            renamed[api] = target
    return renamed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option in ("--cuda-h", "--typedefs", "--hooks", "--exclusions"):
        parser.add_argument(option, required=True)
    options = parser.parse_args()

    cuda_h_text = open(options.cuda_h, encoding="utf-8").read()
    declared = set(re.findall(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(", cuda_h_text))
    versions = cuda_symbols.read_versions(options.typedefs)
    apis = {name for name in declared if FAMILIES.fullmatch(name)}
    if not apis:
        print(f"hook check: no launch/copy/memset/lifetime entry points found in {options.cuda_h}", file=sys.stderr)
        return 1
    apis |= {v.api for v in versions if FAMILIES.fullmatch(v.api)}
    origin = {name: f"declared in {options.cuda_h}" for name in apis}
    for v in versions:
        if v.api in apis:
            origin[v.symbol] = f"{v.api} for CUDA {v.version // 1000}.{v.version % 1000 // 10}{v.variant}"
    symbols = set(origin)

    hooked = {symbol for _, symbol in cuda_symbols.read_hooks(options.hooks)}
    exclusions = cuda_symbols.read_exclusions(options.exclusions)
    offenders = sorted(symbols - hooked - set(exclusions))
    both = sorted(hooked & set(exclusions))
    for symbol in offenders:
        print(f"NOT HOOKED: {symbol} ({origin[symbol]}): add it to intercept/hooks.def, or to "
              f"intercept/hook_exclusions.txt with the reason it needs no hook")
    for symbol in both:
        print(f"BOTH HOOKED AND EXCLUDED: {symbol}")
    api_of = {v.symbol: v.api for v in versions}
    renamed = renamed_apis(cuda_h_text, versions)
    misread = sorted(symbol for symbol in hooked if api_of.get(symbol) in renamed)
    for symbol in misread:
        api = api_of[symbol]
        print(f"RENAMED API HOOKED: {symbol}: cuda.h defines {api} as {renamed[api]}, so cuGetProcAddress(\"{api}\") "
              f"may answer {renamed[api]}'s ABI, which the version map does not know: hook {renamed[api]} instead")
    print(f"hook check: {len(symbols)} launch/copy/memset/graph-launch/lifetime entry points, "
          f"{len(symbols & hooked)} hooked, {len(symbols & set(exclusions))} excluded, {len(offenders)} not covered")
    return 1 if offenders or both or misread else 0


if __name__ == "__main__":
    sys.exit(main())
