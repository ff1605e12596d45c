"""loom_register_toolchains(): the host's `loom` becomes the tool of every Loom rule.

The tool is a plain executable file (`@loom_host//:loom`, a two-line wrapper
that execs the host's loom), not a `toolchain_type` and not an `sh_binary`:
both of those make Bazel fetch rules_java / rules_cc, which an offline Bazel
cannot do. The rules reach it through the `@loom_rules//:toolchain` flag, so a
user can point them at another loom (see docs/bazel.md).
"""

_WRAPPER = """#!/bin/sh
# The host's loom for Bazel, written by loom_register_toolchains().
# {version}
exec '{loom}' "$@"
"""

def _loom_host_impl(rctx):
    loom = rctx.os.environ.get("LOOM_BIN", "")
    if not loom:
        found = rctx.which("loom")
        if found == None:
            fail("loom_register_toolchains: no `loom` on PATH and LOOM_BIN is not set " +
                 "(pip install loom-compiler, or set LOOM_BIN=/path/to/loom)")
        loom = str(found)
    if "'" in loom:
        fail("loom_register_toolchains: LOOM_BIN must not contain a single quote: " + loom)
    result = rctx.execute([loom, "--version"])
    if result.return_code != 0:
        fail("loom_register_toolchains: `{} --version` failed ({}):\n{}".format(loom, result.return_code, result.stderr))

    # The version is part of the wrapper, so a new loom (after `bazel sync --configure`) changes every action key.
    rctx.file("loom", _WRAPPER.format(version = result.stdout.strip(), loom = loom), executable = True)
    rctx.file("BUILD.bazel", 'exports_files(["loom"], visibility = ["//visibility:public"])\n')

loom_host_repository = repository_rule(
    implementation = _loom_host_impl,
    environ = ["LOOM_BIN", "PATH"],
    configure = True,
    local = True,
    doc = "A repository whose `:loom` file runs the host's loom (LOOM_BIN, else `loom` on PATH).",
)

def loom_register_toolchains():
    """Makes the host's loom (LOOM_BIN, else `loom` on PATH) the tool of every Loom rule.

    Call it from WORKSPACE after loading @loom_rules. It defines the repository
    @loom_host, which @loom_rules//:toolchain uses by default.
    """
    if not native.existing_rule("loom_host"):
        loom_host_repository(name = "loom_host")
