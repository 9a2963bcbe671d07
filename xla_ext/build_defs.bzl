"""C++ options of every jaxmg target, carried by the BUILD files (not .bazelrc), so a
WORKSPACE that uses jaxmg as an external repository compiles it exactly as jaxmg does."""

def jaxmg_copts():
    """-std=c++17 (the XLA FFI headers need it; Bazel's gcc toolchain defaults to
    -std=c++0x) and -O2 except under `-c dbg`."""
    return ["-std=c++17"] + select({
        str(Label("//:debug_build")): [],
        "//conditions:default": ["-O2"],
    })

def jaxmg_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = jaxmg_copts() + copts, **kwargs)

def jaxmg_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = jaxmg_copts() + copts, **kwargs)

def jaxmg_cc_test(name, copts = [], **kwargs):
    native.cc_test(name = name, copts = jaxmg_copts() + copts, **kwargs)
