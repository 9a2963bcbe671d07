"""Test macro: a pytest file run under Bazel on forced host CPU devices."""

def jaxmg_py_test(name, devices = 8, size = "medium", deps = [], srcs = [], data = [], **kwargs):
    """py_test running tests/<name>.py (with helper modules `srcs`) with pytest on `devices` CPU devices."""
    native.py_test(
        name = name,
        size = size,
        srcs = [name + ".py", "pytest_main.py", "conftest.py", "helpers.py"] + srcs,
        main = "pytest_main.py",
        args = ["--devices={}".format(devices), "$(location {}.py)".format(name)],
        data = [name + ".py"] + data,
        python_version = "PY3",
        deps = ["//jaxmg"] + deps,
        **kwargs
    )
