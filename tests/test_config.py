"""jaxmg never changes JAX's global configuration: with x64 off (JAX's
default) it stays off through import and calls. Checked in a fresh process,
since this suite's conftest turns x64 on for float64 references."""

import json
import textwrap

import helpers

SCRIPT = textwrap.dedent("""
    import json
    import jax
    report = {"x64_at_start": bool(jax.config.jax_enable_x64)}
    import numpy as np
    import jaxmg
    report["x64_after_import"] = bool(jax.config.jax_enable_x64)
    import helpers
    mesh = helpers.mesh(2)
    rng = np.random.default_rng(0)
    a = helpers.spd(rng, 12, np.float32, 10.0)
    b = helpers.random_matrix(rng, 12, np.float32, 2)
    x, info = jaxmg.potrs(helpers.rows(a, mesh), helpers.replicated(b, mesh), tile_size=2, return_info=True)
    inv = jaxmg.potri(helpers.rows(a, mesh), tile_size=2)
    w, v = jaxmg.syevd(helpers.rows(a, mesh), tile_size=2)
    report.update(
        x64_after_calls=bool(jax.config.jax_enable_x64),
        x_dtype=str(x.dtype), inv_dtype=str(inv.dtype), w_dtype=str(w.dtype), info_dtype=str(info.dtype),
        info=int(info),
        residual=helpers.residual(a, x, b) / helpers.tolerance(np.float32, 12, 10.0),
        inverse_error=helpers.inverse_error(a, inv) / helpers.tolerance(np.float32, 12, 10.0),
        eigenvalue_error=float(np.abs(np.asarray(w) - np.linalg.eigvalsh(a.astype(np.float64))).max()
                               / (helpers.tolerance(np.float32, 12) * 10.0)),
    )
    print("REPORT " + json.dumps(report))
    """)


def test_x64_stays_off():
    proc = helpers.run_python(SCRIPT, devices=2, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    report = json.loads(lines[-1][len("REPORT ") :])
    assert report["x64_at_start"] is False, report
    assert report["x64_after_import"] is False, report
    assert report["x64_after_calls"] is False, report
    assert report["x_dtype"] == report["inv_dtype"] == report["w_dtype"] == "float32", report
    assert report["info_dtype"] == "int32" and report["info"] == 0, report
    assert report["residual"] <= 1.0, report
    assert report["inverse_error"] <= 1.0, report
    assert report["eigenvalue_error"] <= 1.0, report
