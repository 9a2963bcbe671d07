"""Finds, loads and registers the jaxmg FFI library (xla_ext/libjaxmg_ffi.so).

Loading is lazy (first call, not import) so `import jaxmg` works everywhere
and never touches JAX's global state.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib

import jax

LIBRARY_NAME = "libjaxmg_ffi.so"
_LAPACK_ROUTINES = {
    "s": ("spotrf", "spotrs", "spotri", "sgetrf", "sgetrs", "ssyevd"),
    "d": ("dpotrf", "dpotrs", "dpotri", "dgetrf", "dgetrs", "dsyevd"),
    "c": ("cpotrf", "cpotrs", "cpotri", "cgetrf", "cgetrs", "cheevd"),
    "z": ("zpotrf", "zpotrs", "zpotri", "zgetrf", "zgetrs", "zheevd"),
}


class _Target(ctypes.Structure):
    # xla_ext/ffi/registry.h's FfiTarget.
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("platform", ctypes.c_char_p),
        ("handler", ctypes.c_void_p),
        ("engine", ctypes.c_char_p),
        ("routine", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
    ]


@functools.cache
def targets() -> dict[tuple[str, str, str], tuple[str, str, int]]:
    """The library's FFI targets: (engine, routine, dtype) -> (name, XLA
    platform, handler address), as its registry lists them."""
    lib = _open()
    lib.jaxmg_targets.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.jaxmg_targets.restype = ctypes.POINTER(_Target)
    count = ctypes.c_int64(0)
    table = lib.jaxmg_targets(ctypes.byref(count))
    found = {}
    for t in table[: count.value]:
        key = (t.engine.decode(), t.routine.decode(), t.dtype.decode())
        found[key] = (t.name.decode(), t.platform.decode(), t.handler)
    return found


def export_setup() -> list:
    """Registers jaxmg's FFI targets with XLA in this process (LAPACK's, and
    cuSOLVER's where JAX has GPUs) and returns what
    `jax.export.export(f, disabled_checks=...)` needs for an f that calls
    jaxmg. Call it where the function is exported and where it is
    deserialized and called: jaxmg's FFI calls carry no compatibility
    guarantee across versions (jax.export refuses any such call unless
    told), so an exported function is for this jaxmg version, in one
    process, on devices like those it was exported for."""
    library()
    if any(d.platform == "gpu" for d in jax.devices()):
        cuda_library()
    return [jax.export.DisabledSafetyCheck.custom_call(name)
            for name, _, _ in targets().values()]


def target_name(engine: str, routine: str, dtype) -> str:
    """The target running `routine` on `engine` ("lapack", "mg", "mp", "dn") for `dtype`."""
    return targets()[(engine, routine, jax.numpy.dtype(dtype).name)][0]


def register(engine: str) -> None:
    """Registers every target of `engine` with XLA (once per process)."""
    if engine not in _registered:
        for (owner, _, _), (name, platform, handler) in targets().items():
            if owner == engine:
                jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform=platform)
        _registered.add(engine)


_registered: set[str] = set()


def _candidates() -> list[pathlib.Path]:
    """Where the library is looked for: JAXMG_LIBRARY alone when it is set;
    otherwise beside the package (an installed wheel), then the Bazel runfiles
    of a target depending on //jaxmg, whose data puts the library in
    <repository>/xla_ext/."""
    if os.environ.get("JAXMG_LIBRARY"):
        return [pathlib.Path(os.environ["JAXMG_LIBRARY"])]
    # Not resolved: in runfiles the files are symlinks into the source tree, and
    # the runfiles path, not the symlink's target, leads to the library.
    package = pathlib.Path(__file__).absolute().parent.parent
    found = [package / LIBRARY_NAME]
    in_runfiles = pathlib.Path(package.parent.name, "xla_ext", LIBRARY_NAME)
    found.append(package.parent.parent / in_runfiles)
    if os.environ.get("RUNFILES_DIR"):
        found.append(pathlib.Path(os.environ["RUNFILES_DIR"]) / in_runfiles)
    return list(dict.fromkeys(found))


@functools.cache
def _open() -> ctypes.CDLL:
    candidates = _candidates()
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        tried = "\n  ".join(str(p) for p in candidates)
        raise RuntimeError(
            f"jaxmg: cannot find {LIBRARY_NAME}. Tried:\n  {tried}\n"
            "Install the wheel (`bazel build //:wheel`, then pip install it), depend on "
            "//jaxmg in Bazel (its data carries the library), or set JAXMG_LIBRARY to a "
            "libjaxmg_ffi.so (`bazel build //xla_ext:libjaxmg_ffi.so`)."
        )
    lib = ctypes.CDLL(str(path))
    lib.jaxmg_register_lapack.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.jaxmg_register_lapack.restype = ctypes.c_int
    lib.jaxmg_live_meetings.restype = ctypes.c_int64
    lib.jaxmg_cuda_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jaxmg_cuda_init.restype = ctypes.c_int
    lib.jaxmg_processes_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_size_t]
    lib.jaxmg_processes_open.restype = ctypes.c_int
    lib.jaxmg_register_call.argtypes = [ctypes.c_int64, ctypes.c_int32,
                                        ctypes.POINTER(ctypes.c_int32)]
    lib.jaxmg_register_call.restype = None
    lib.jaxmg_processes_stats.argtypes = [ctypes.c_void_p]
    lib.jaxmg_processes_stats.restype = None
    return lib


@functools.cache
def library() -> ctypes.CDLL:
    """Loads the FFI library once and registers its CPU targets with XLA."""
    lib = _open()
    _register_lapack(lib)
    register("lapack")
    return lib


@functools.cache
def cuda_library() -> ctypes.CDLL:
    """Loads the CUDA libraries into the FFI library and registers the CUDA
    targets (first GPU call only)."""
    lib = library()
    error = ctypes.create_string_buffer(4096)
    if lib.jaxmg_cuda_init(":".join(cuda_search_path()).encode(), error, len(error)):
        raise RuntimeError(error.value.decode())
    register("mg")
    register("dn")
    return lib


def cuda_search_path() -> list[str]:
    """Where the CUDA libraries (cudart, cuBLAS, cuSOLVERMg, NCCL,
    cuSOLVERMp) are looked for: JAXMG_CUDA_LIBRARY_PATH (':'-separated), the
    NVIDIA pip wheels (CUDA 13 and 12 layouts), then a CUDA toolkit."""
    dirs = [pathlib.Path(d) for d in os.environ.get("JAXMG_CUDA_LIBRARY_PATH", "").split(":") if d]
    try:
        import nvidia

        for root in map(pathlib.Path, nvidia.__path__):
            dirs += [root / "cu13" / "lib", root / "cu12" / "lib"]
            dirs += [root / name / "lib" for name in ("cusolver", "cublas", "cuda_runtime", "nvjitlink", "cusparse", "nccl")]
    except ImportError:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs.append(pathlib.Path(home) / "lib64")
    return [str(d) for d in dirs if d.is_dir()]


def _register_lapack(lib: ctypes.CDLL) -> None:
    # SciPy exports its LAPACK as PyCapsules; jaxlib's CPU kernels use the same.
    from scipy.linalg import cython_lapack

    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.argtypes = [ctypes.py_object]
    get_name.restype = ctypes.c_char_p
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer.restype = ctypes.c_void_p
    capsules = cython_lapack.__pyx_capi__
    for names in _LAPACK_ROUTINES.values():
        for name in names:
            capsule = capsules[name]
            pointer = get_pointer(capsule, get_name(capsule))
            if not lib.jaxmg_register_lapack(name.encode(), pointer):
                raise RuntimeError(f"jaxmg: the library rejected LAPACK routine {name}")


def live_meetings() -> int:
    """Rendezvous meetings currently registered in the library (0 when idle)."""
    return int(library().jaxmg_live_meetings())
