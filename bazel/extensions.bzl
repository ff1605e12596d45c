"""The bzlmod extension behind MODULE.bazel: the same host repository as loom_register_toolchains()."""

load("//:repositories.bzl", "loom_host_repository")

def _loom_impl(module_ctx):
    loom_host_repository(name = "loom_host")

loom = module_extension(implementation = _loom_impl)
