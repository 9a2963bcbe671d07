"""Repository rule: a repository whose top-level entries are symlinks to a directory's.

`local_repository` resolves a relative path against the main workspace, so it
cannot point into jaxmg's own tree when jaxmg is itself an external
repository; this rule finds the directory through a label instead.
"""

def _linked_repository_impl(rctx):
    if rctx.attr.marker:
        source = rctx.path(rctx.attr.marker).dirname
    else:
        source = rctx.path(rctx.attr.path)
        if not source.exists:
            fail("jaxmg: {} does not exist. {}".format(rctx.attr.path, rctx.attr.fix))
    for entry in source.readdir():
        rctx.symlink(entry, entry.basename)

linked_repository = repository_rule(
    implementation = _linked_repository_impl,
    attrs = {
        "marker": attr.label(doc = "A file in the directory to link (for directories in jaxmg's tree)."),
        "path": attr.string(doc = "The absolute path of the directory to link (when no marker)."),
        "fix": attr.string(doc = "What to do when `path` is missing."),
    },
    local = True,
)
