"""The engines a call can run on, each a module with the same function set
(engines/base.py lists it): native (JAX's own solvers), mg (jaxmg's 1-D
block-cyclic layout: LAPACK on CPU devices, cuSOLVERMg on GPUs) and mp
(cuSOLVERMp's 2-D block-cyclic layout). dispatch.py chooses one per call."""
