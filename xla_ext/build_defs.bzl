"""C++ options of every jaxmg target, in the BUILD files rather than .bazelrc,
so a project that uses jaxmg as an external repository builds it the same way."""

# The XLA FFI headers need C++17 (Bazel's autodetected gcc defaults to C++0x);
# -O2 because consumers' builds default to -O0 (fastbuild).
JAXMG_COPTS = [
    "-std=c++17",
    "-O2",
]

def jaxmg_cc_library(name, copts = [], **kwargs):
    """cc_library with jaxmg's C++ options."""
    native.cc_library(name = name, copts = JAXMG_COPTS + copts, **kwargs)

def jaxmg_cc_binary(name, copts = [], **kwargs):
    """cc_binary with jaxmg's C++ options."""
    native.cc_binary(name = name, copts = JAXMG_COPTS + copts, **kwargs)

def jaxmg_cc_test(name, copts = [], **kwargs):
    """cc_test with jaxmg's C++ options."""
    native.cc_test(name = name, copts = JAXMG_COPTS + copts, **kwargs)
