"""jax.export of functions that call jaxmg: with the checks jaxmg.export_setup
returns, the exported function gives the jitted function's results, and,
serialized, runs in a fresh process once jaxmg.export_setup() is called
there; without them JAX refuses jaxmg's FFI calls, as it refuses any call
without a compatibility guarantee."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import helpers
import jaxmg

N = 16

FUNCTIONS = {
    "solve-pos": lambda a, b: jaxmg.solve(a, b, assume_a="pos"),
    "solve-gen": lambda a, b: jaxmg.solve(a, b),
    "cho_solve": lambda a, b: jaxmg.cho_solve(jaxmg.cho_factor(a), b),
    "inv": lambda a, b: jaxmg.inv(a),
    "eigh": lambda a, b: jaxmg.eigh(a),
    "slogdet": lambda a, b: jaxmg.slogdet(a),
    "gradient": jax.grad(lambda a, b: jaxmg.cho_logdet(jaxmg.cho_factor(a))),
    # jaxmg's own solvers on one device too (auto picks JAX's there)
    "solve-pos-jaxmg": lambda a, b: jaxmg.solve(a, b, assume_a="pos", backend="jaxmg"),
    "eigh-jaxmg": lambda a, b: jaxmg.eigh(a, backend="jaxmg"),
    "solve-mixed": lambda a, b: jaxmg.solve(a, b, assume_a="pos", precision="mixed"),
}


def operands(rng, devices):
    mesh = helpers.mesh(devices)
    a = helpers.spd(rng, N, np.float64, 10.0)
    b = helpers.random_matrix(rng, N, np.float64, 2)
    return (jax.device_put(a, NamedSharding(mesh, P("x", None))),
            jax.device_put(b, NamedSharding(mesh, P()))), mesh


@pytest.mark.parametrize("devices", [1, 4])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_an_exported_function_gives_the_jitted_results(rng, name, devices):
    (a, b), mesh = operands(rng, devices)
    f = jax.jit(FUNCTIONS[name])
    with jax.set_mesh(mesh):  # jaxmg's GPU solvers under jit need the mesh's devices
        exported = jax.export.export(f, disabled_checks=jaxmg.export_setup())(a, b)
        got, want = exported.call(a, b), f(a, b)
    # jaxmg's own solvers, not JAX's (the mixed solve's are XLA's GEMMs and, on
    # GPUs, jaxmg's cuSOLVER calls)
    if (devices > 1 and name != "solve-mixed") or name.endswith("-jaxmg"):
        assert "jaxmg_" in exported.mlir_module()
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12, atol=1e-12)


def test_without_the_checks_jax_refuses_jaxmgs_calls(rng):
    (a, b), _ = operands(rng, 4)
    with pytest.raises(ValueError, match="(?s)custom calls whose targets have no compatibility "
                                         "guarantees.*jaxmg_"):
        jax.export.export(jax.jit(FUNCTIONS["solve-pos"]))(a, b)


LOAD = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)
    import jaxmg
    from jax.sharding import NamedSharding, PartitionSpec as P
    blob, a, b, want = sys.argv[1:]
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])
    a = jax.device_put(np.load(a), NamedSharding(mesh, P("x", None)))
    b = jax.device_put(np.load(b), NamedSharding(mesh, P()))
    jaxmg.export_setup()
    exported = jax.export.deserialize(bytearray(open(blob, "rb").read()))
    np.testing.assert_allclose(np.asarray(exported.call(a, b)), np.load(want), rtol=1e-12)
    print("same results")
""")


def test_a_serialized_function_runs_in_a_fresh_process(rng, tmp_path):
    if importlib.util.find_spec("flatbuffers") is None:
        pytest.skip("jax.export's serialization needs the flatbuffers package, not installed")
    (a, b), _ = operands(rng, 4)
    f = jax.jit(FUNCTIONS["solve-pos"])
    exported = jax.export.export(f, disabled_checks=jaxmg.export_setup())(a, b)
    (tmp_path / "f.bin").write_bytes(exported.serialize())
    for name, x in (("a", a), ("b", b), ("want", f(a, b))):
        np.save(tmp_path / f"{name}.npy", np.asarray(x))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    run = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / "f.bin"),
         *(str(tmp_path / f"{n}.npy") for n in ("a", "b", "want"))],
        env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "same results" in run.stdout


# A symbolic matrix order, as jax.export's shape polymorphism gives it: on one
# device JAX's solver runs, which takes it, so the exported function gives
# JAX's results for every order it is called with.
SYMBOLIC = {
    "solve": (lambda m: m.numpy.linalg.solve, lambda f, a: f(a, a[..., :1])),
    "inv": (lambda m: m.numpy.linalg.inv, lambda f, a: f(a)),
    "det": (lambda m: m.numpy.linalg.det, lambda f, a: f(a)),
    "slogdet": (lambda m: m.numpy.linalg.slogdet, lambda f, a: f(a)[1]),
    "cholesky": (lambda m: m.numpy.linalg.cholesky, lambda f, a: f(a)),
    "eigh": (lambda m: m.numpy.linalg.eigh, lambda f, a: f(a)[0]),
    "eigvalsh": (lambda m: m.numpy.linalg.eigvalsh, lambda f, a: f(a)),
    "pinv": (lambda m: m.numpy.linalg.pinv, lambda f, a: f(a)),
    "matrix_power": (lambda m: m.numpy.linalg.matrix_power, lambda f, a: f(a, 3)),
    "cho_solve": (lambda m: m.scipy.linalg, lambda s, a: s.cho_solve(s.cho_factor(a), a)),
    "lu_solve": (lambda m: m.scipy.linalg, lambda s, a: s.lu_solve(s.lu_factor(a), a)),
    "expm": (lambda m: m.scipy.linalg.expm, lambda f, a: f(a)),
    "solve_triangular": (lambda m: m.scipy.linalg.solve_triangular, lambda f, a: f(a, a)),
    "qr": (lambda m: m.numpy.linalg.qr, lambda f, a: f(a)[1]),
    "grad-slogdet": (lambda m: m.numpy.linalg.slogdet,
                     lambda f, a: jax.grad(lambda x: f(x)[1].sum())(a)),
}


@pytest.mark.parametrize("shape", ["n, n", "b, n, n"])
@pytest.mark.parametrize("name", list(SYMBOLIC))
def test_a_symbolic_matrix_order_exports_and_gives_jaxs_results(rng, name, shape):
    import jax.numpy  # noqa: F401  (jax.numpy.linalg and jax.scipy.linalg as the reference)
    import jax.scipy.linalg  # noqa: F401
    import jaxmg.numpy  # noqa: F401
    import jaxmg.scipy.linalg  # noqa: F401
    pick, call = SYMBOLIC[name]
    ours, theirs = pick(jaxmg), pick(jax)
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(shape), np.float64)
    exported = jax.export.export(jax.jit(lambda a: call(ours, a)),
                                 disabled_checks=jaxmg.export_setup())(spec)
    for n in (3, 6):
        a = helpers.spd(rng, n, np.float64, 10.0)
        if shape.startswith("b"):
            a = np.stack([a, a + np.eye(n)])
        np.testing.assert_allclose(np.asarray(exported.call(a)), np.asarray(call(theirs, a)),
                                   rtol=1e-10, atol=1e-12)


def test_a_symbolic_order_spread_over_devices_is_refused_naming_the_fix():
    mesh = helpers.mesh(4)
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("4*k, 4*k"), np.float64,
                                sharding=NamedSharding(mesh, P("x", None)))
    for f in (jaxmg.inv, lambda a: jaxmg.solve(a, a), lambda a: jaxmg.qr(a)[1]):
        with jax.set_mesh(mesh), pytest.raises(
                ValueError, match=r"symbolic dimension 4\*k.*export with a concrete matrix shape"):
            jax.export.export(jax.jit(f), disabled_checks=jaxmg.export_setup())(spec)


def test_mixed_precision_refuses_a_symbolic_order_naming_the_fix():
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("n, n"), np.float64)
    with pytest.raises(ValueError, match="precision='mixed' needs a concrete matrix order.*"
                                         "precision='highest'"):
        jax.export.export(jax.jit(lambda a: jaxmg.solve(a, a, precision="mixed")),
                          disabled_checks=jaxmg.export_setup())(spec)
