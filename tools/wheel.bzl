"""jaxmg_wheel: the pip-installable wheel of the jaxmg package and its FFI library."""

def _release_impl(settings, attr):
    return {"//command_line_option:compilation_mode": "opt"}

# The library in a wheel is always a release build, whatever the command line says.
_release = transition(
    implementation = _release_impl,
    inputs = [],
    outputs = ["//command_line_option:compilation_mode"],
)

def _in_repository(f):
    """A file's path inside its own repository (jaxmg/_src/linalg.py)."""
    root = f.owner.workspace_root
    return f.short_path if not root else f.path[len(root) + 1:]

def _jaxmg_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    library = ctx.file.library
    sources = [f for f in ctx.attr.package[PyInfo].transitive_sources.to_list()
               if _in_repository(f).startswith("jaxmg/")]
    args = ctx.actions.args()
    args.add("--pyproject", ctx.file.pyproject)
    args.add("--readme", ctx.file.readme)
    args.add("--library", library)
    args.add("--out", out.path)
    args.add_all(["{}={}".format(_in_repository(f), f.path) for f in sources])
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = sources + [library, ctx.file.pyproject, ctx.file.readme],
        outputs = [out],
        mnemonic = "Wheel",
        progress_message = "Building the jaxmg wheel",
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

def _wheel_rule(release):
    allowlist = {"_allowlist_function_transition": attr.label(
        default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
    )} if release else {}
    return rule(
        implementation = _jaxmg_wheel_impl,
        doc = "A directory holding the one .whl (name, version and platform tag from its inputs).",
        attrs = dict(allowlist, **{
            "package": attr.label(providers = [PyInfo], doc = "The jaxmg py_library."),
            "library": attr.label(
                allow_single_file = [".so"],
                cfg = _release if release else "target",
                doc = "libjaxmg_ffi.so.",
            ),
            "pyproject": attr.label(allow_single_file = True),
            "readme": attr.label(allow_single_file = True),
            "_builder": attr.label(default = "//tools:build_wheel", executable = True, cfg = "exec"),
        }),
    )

# The release wheel: its library is built with -c opt.
jaxmg_wheel = _wheel_rule(release = True)

# The same wheel around the library of the current configuration (the one the
# tests load), so testing the wheel compiles nothing twice.
jaxmg_test_wheel = _wheel_rule(release = False)
