"""Mixed-precision dense solvers in plain JAX: factorisations whose trailing
updates run at a lower precision (BF16 or TF32 tensor cores on GPUs), refined
to float64 accuracy against the original matrix, with a float64 fallback.

- precision.py: the update GEMMs at a named precision (XLA's dot-algorithm
  presets on GPUs, their rounding emulated on CPUs).
- cholesky.py, lu.py: blocked factorisations (static loops over nb-wide
  panels; panels by JAX's own Cholesky/LU and triangular solves at the panel
  precision) and their block triangular sweeps.
- normal.py: the general solve's factor without pivots, the Cholesky of
  A^H A formed by FP16 products (well-conditioned A; one device or rows
  sharded).
- refine.py: classic refinement and GMRES-IR, the stopping test.
- solvers.py: factor + refine + fallback: spd_solve, general_solve.
- placement.py: one device, or rows sharded over a mesh axis.

Memory, in copies of the float64 matrix A (8 N^2 bytes), one device: A itself
(kept for the residuals) 1; the float32 Cholesky factor, stored as its lower
trapezoid by block columns, 0.25 (LU: all block columns, 0.5); the largest
transient of a left-looking step, the factor to its left in the update's
input format, up to 0.125 (float32) or 0.06 (BF16). The float64 fallback
adds what JAX's own factorisation needs, only when it runs.

Import the modules themselves (the functions share their names).
"""
