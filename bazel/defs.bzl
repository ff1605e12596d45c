"""Bazel rules for Loom GPU kernel programs: loom_library, loom_kernels, loom_command, loom_package, loom_test.

Every rule runs `loom` with declared inputs only, `LOOM_CACHE=0 LOOM_JOBS=1`
(no private cache, one worker: the bytes depend on the inputs alone), and
every output declared, so the actions are cacheable and can run remotely.
Compile, link and frontier actions go through `_run_loom`: `loom worker
@PARAMS`, which a persistent worker serves where Bazel runs one. The tool comes from the
`@loom_rules//:toolchain` flag: by default the host's loom that
loom_register_toolchains() found, named by its path (not hermetic: a remote
worker needs the same loom there; see repositories.bzl and docs/bazel.md).
"""

LoomToolchainInfo = provider(
    doc = "The loom executable the rules run.",
    fields = {
        "loom": "FilesToRunProvider of the loom executable (built for the exec configuration)",
        "executable": "File: the loom executable",
        "runfiles": "runfiles the executable needs when a test runs it (none for a plain file)",
    },
)

LoomLibraryInfo = provider(
    doc = "A merged library module, passed to dependents as `--library`.",
    fields = {
        "bytecode": "File: the merged `<name>.loombc`",
        "key": "string: the library's key (its file stem, the target's name), as `module.import` names it",
    },
)

LoomArtifactsInfo = provider(
    doc = "What loom_kernels built, per target.",
    fields = {
        "targets": "list of target strings (`family:selector`), in attribute order",
        "artifacts": "dict: target -> struct(binary, launch_config, manifest), each a File",
    },
)

LoomCommandInfo = provider(
    doc = "What loom_command built: the frontier outputs, one folder per target.",
    fields = {
        "targets": "list of target strings; empty for a target-independent product",
        "products": "dict: target (or \"\") -> directory File holding `<stem>.commands.json` (stem: the " +
                    "source's, or the rule's name when sources are merged), `program-N.loomcmd`, `kernel-N.loombc` " +
                    "(and with a target `kernel-N.<ext>`, `.launch.loombc`, `.manifest.json`)",
    },
)

LoomPackageInfo = provider(
    doc = "A release package built by loom_package.",
    fields = {"package": "File: `<name>-<version>.loompkg.tar.gz`"},
)

_EXTENSIONS = {"amdgpu": "hsaco", "nvptx": "ptx", "spirv": "spv"}

# Every action but the package runs `loom worker @PARAMS`: a persistent worker may serve it
# (`loom worker --persistent_worker`, one worker key for all three mnemonics: the same warm workers
# serve them all), else Bazel runs that command line as a process of its own. Either way `loom
# worker` runs it with no private cache and one job (LOOM_CACHE=0 LOOM_JOBS=1), after making the
# folders its outputs go in (`--mkdir`: a remote executor need not make them).
# Bazel speaks the JSON protocol by default from 5.1; the rules offer workers by default where
# Bazel has an API of 6.0 (`config_common.toolchain_type`: Debian's builds report no version),
# and on request before (--@loom_rules//:persistent_workers=on, with Bazel 4.2's
# --experimental_worker_allow_json_protocol).
_JSON_WORKERS_BY_DEFAULT = hasattr(config_common, "toolchain_type")  # as _NO_TOOLCHAIN's gate
_WORKER_REQUIREMENTS = {
    "supports-workers": "1",
    "requires-worker-protocol": "json",
    "worker-key-mnemonic": "Loom",
}

# Multiplex where it is safe: each request runs in a child of its own (a fork of the warm
# worker), so one worker serves several actions at once, and in the request's sandbox folder
# under --experimental_worker_multiplex_sandboxing. Only from Bazel 6 (the rules' gate, tested on
# 7.7.1); before, plain workers (tested on 4.2.3, whose JSON multiplexing is not).
_MULTIPLEX_REQUIREMENTS = {
    "supports-workers": "1",  # with --noworker_multiplex
    "supports-multiplex-workers": "1",
    "supports-worker-cancellation": "1",  # with --experimental_worker_cancellation: a cancel ends its child
    "supports-multiplex-sandboxing": "1",
    "requires-worker-protocol": "json",
    "worker-key-mnemonic": "Loom",
}

LoomWorkersInfo = provider(
    doc = "Whether the rules' actions offer themselves to persistent workers.",
    fields = {"mode": "string: auto (by default where Bazel speaks JSON to workers), on or off"},
)

def _persistent_workers_impl(ctx):
    if ctx.build_setting_value not in ("auto", "on", "off"):
        fail("--@loom_rules//:persistent_workers={}: write auto, on or off".format(ctx.build_setting_value))
    return [LoomWorkersInfo(mode = ctx.build_setting_value)]

loom_persistent_workers = rule(
    implementation = _persistent_workers_impl,
    build_setting = config.string(flag = True),
    doc = "The --@loom_rules//:persistent_workers flag: auto, on or off.",
)

# The package action first makes the folder its output goes in: its arguments start with that folder,
# then `--` (the others do it in `loom worker --mkdir`, see _action_args). Bazel makes them for local actions, but a remote worker need not: REAPI 2.0 clients
# (Bazel before 6) send output_files, and buildbox makes parent folders only for REAPI 2.1's
# output_paths, so loom's `-o bazel-out/.../x.spv` would find no folder there.
_MAKE_FOLDERS = 'while [ "$1" != -- ]; do mkdir -p "$1"; shift; done; shift\n'

# Bazel 6 and newer take an action's `toolchain` (None: its tool is no toolchain's), which
# --incompatible_auto_exec_groups requires; Bazel 4.2 rejects the parameter. Debian's Bazel builds
# report no version (native.bazel_version is empty), so the gate is an API of the same release.
_NO_TOOLCHAIN = {"toolchain": None} if hasattr(config_common, "toolchain_type") else {}

def _loom_toolchain_impl(ctx):
    info = ctx.attr.loom[DefaultInfo]
    return [LoomToolchainInfo(loom = info.files_to_run, executable = ctx.executable.loom, runfiles = info.default_runfiles)]

loom_toolchain = rule(
    implementation = _loom_toolchain_impl,
    attrs = {
        "loom": attr.label(
            mandatory = True,
            executable = True,
            cfg = "exec",
            allow_files = True,
            doc = "The loom executable: a file (e.g. a wrapper script) or an executable target.",
        ),
    },
    doc = "A loom tool for the rules; select one with --@loom_rules//:toolchain=//your:toolchain.",
)

_TOOLCHAIN_ATTR = {
    "_toolchain": attr.label(default = Label("//:toolchain"), providers = [LoomToolchainInfo]),
    "_workers": attr.label(default = Label("//:persistent_workers"), providers = [LoomWorkersInfo]),
}

def _action_args(ctx, outputs):
    """A loom action's arguments, to which the caller adds its command line: first the folders its
    `outputs` go in (see _WORKER_REQUIREMENTS); _run_loom puts them all in one params file."""
    args = ctx.actions.args()
    args.add_all(sorted({(out.path if out.is_directory else out.dirname): None for out in outputs}.keys()),
                 before_each = "--mkdir")
    return args

def _run_loom(ctx, mnemonic, message, args, inputs, outputs):
    """Run `loom worker @PARAMS` (`args`, from _action_args) as a worker action where workers are on."""
    toolchain = ctx.attr._toolchain[LoomToolchainInfo]
    mode = ctx.attr._workers[LoomWorkersInfo].mode
    requirements = {}
    if mode == "on" or (mode == "auto" and _JSON_WORKERS_BY_DEFAULT):
        requirements = _MULTIPLEX_REQUIREMENTS if _JSON_WORKERS_BY_DEFAULT else _WORKER_REQUIREMENTS
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    ctx.actions.run(
        executable = toolchain.loom,
        arguments = ["worker", args],
        inputs = inputs,
        outputs = outputs,
        mnemonic = mnemonic,
        progress_message = message,
        execution_requirements = requirements,
        # PATH and every --action_env reach loom (e.g. a virtualenv); the rest of the client env does not.
        use_default_shell_env = True,
        **_NO_TOOLCHAIN
    )

def _target_tag(target):
    """`amdgpu:gfx1100` -> (`amdgpu-gfx1100`, `hsaco`)."""
    family, sep, selector = target.partition(":")
    if not sep or not selector:
        fail("target `{}`: write family:selector, e.g. amdgpu:gfx1100 or spirv:vulkan1.3".format(target))
    if family not in _EXTENSIONS:
        fail("target `{}`: unknown family `{}` (known: {})".format(target, family, ", ".join(sorted(_EXTENSIONS))))
    return family + "-" + selector, _EXTENSIONS[family]

def _libraries(ctx):
    return [dep[LoomLibraryInfo].bytecode for dep in ctx.attr.deps]

def _add_common(args, ctx, libraries):
    # `--root=@run`, not `--root @run`: Bazel 4.2's worker runner reads every argument of a params
    # file that starts with `@` as another params file (a root or spec is written `@name`).
    args.add_all(libraries, before_each = "--library")
    args.add_all(ctx.attr.roots, format_each = "--root=%s")
    args.add_all(["{}={}".format(k, v) for k, v in sorted(ctx.attr.config.items())], format_each = "--config=%s")

def _module(ctx, libraries):
    """The module a kernel set or command compiles: its only source, or its sources merged.

    Returns (file, libraries still to pass): merging already resolves against the libraries.
    """
    if len(ctx.files.srcs) == 1:
        return ctx.files.srcs[0], libraries
    merged = ctx.actions.declare_file("_loom/{}/{}.loombc".format(ctx.label.name, ctx.label.name))
    args = _action_args(ctx, [merged])
    args.add("link")
    args.add_all(ctx.files.srcs)
    args.add_all(libraries, before_each = "--library")
    args.add_all(["--mode", "merge", "-o", merged])
    _run_loom(ctx, "LoomLink", "Linking Loom sources of {}".format(ctx.label), args, ctx.files.srcs + libraries, [merged])
    return merged, []

def _loom_library_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".loombc")
    libraries = _libraries(ctx)
    args = _action_args(ctx, [out])
    args.add("link")
    args.add_all(ctx.files.srcs)
    args.add_all(libraries, before_each = "--library")
    args.add_all(["--mode", "merge", "-o", out])
    _run_loom(ctx, "LoomLink", "Linking Loom library {}".format(ctx.label), args, ctx.files.srcs + libraries, [out])
    return [DefaultInfo(files = depset([out])), LoomLibraryInfo(bytecode = out, key = ctx.label.name)]

_SRCS = attr.label_list(allow_files = [".loom", ".loombc"], mandatory = True, doc = "Loom text or bytecode sources.")
_DEPS = attr.label_list(providers = [LoomLibraryInfo], doc = "loom_library targets linked as `--library`.")

loom_library = rule(
    implementation = _loom_library_impl,
    attrs = dict(_TOOLCHAIN_ATTR, srcs = _SRCS, deps = _DEPS),
    doc = "Merges srcs (resolved against deps) into `<name>.loombc`; its key for module.import is `<name>`.",
)

def _loom_kernels_impl(ctx):
    if not ctx.attr.targets:
        fail("loom_kernels needs at least one target")
    module, libraries = _module(ctx, _libraries(ctx))
    artifacts = {}
    for target in ctx.attr.targets:
        tag, ext = _target_tag(target)
        stem = "{}.{}".format(ctx.label.name, tag)
        binary = ctx.actions.declare_file("{}.{}".format(stem, ext))
        launch = ctx.actions.declare_file(stem + ".launch.loombc")
        manifest = ctx.actions.declare_file(stem + ".manifest.json")
        args = _action_args(ctx, [binary, launch, manifest])
        args.add_all(["compile", module, "--target", target, "-o", binary])
        args.add_all(["--emit-launch-config", launch, "--manifest", manifest])
        _add_common(args, ctx, libraries)
        if ctx.attr.pipeline:
            args.add(ctx.attr.pipeline, format = "--pipeline=%s")
        _run_loom(ctx, "LoomCompile", "Compiling {} for {}".format(ctx.label, target), args, [module] + libraries,
                  [binary, launch, manifest])
        artifacts[target] = struct(binary = binary, launch_config = launch, manifest = manifest)
    files = [f for a in artifacts.values() for f in (a.binary, a.launch_config, a.manifest)]
    return [
        DefaultInfo(files = depset(files)),
        LoomArtifactsInfo(targets = list(ctx.attr.targets), artifacts = artifacts),
    ]

loom_kernels = rule(
    implementation = _loom_kernels_impl,
    attrs = dict(
        _TOOLCHAIN_ATTR,
        srcs = _SRCS,
        deps = _DEPS,
        targets = attr.string_list(mandatory = True, doc = "Targets, `family:selector`."),
        roots = attr.string_list(doc = "Roots (`@kernel`); default: every exported kernel."),
        config = attr.string_dict(doc = "Config bindings, key -> value text (`--config key=value`)."),
        pipeline = attr.string(doc = "Pass pipeline text; default: loom's default pipeline."),
    ),
    doc = "Compiles a kernel set: `<name>.<family>-<selector>.<ext>` + `.launch.loombc` + `.manifest.json` per target.",
)

def _loom_command_impl(ctx):
    module, libraries = _module(ctx, _libraries(ctx))
    products = {}
    for target in ctx.attr.targets or [""]:
        if target:
            tag, _ = _target_tag(target)
            folder = ctx.actions.declare_directory("{}.{}".format(ctx.label.name, tag))
        else:
            folder = ctx.actions.declare_directory(ctx.label.name + ".frontier")
        args = _action_args(ctx, [folder])
        # -q: the per-program summary line is for people; an action says nothing unless it fails or warns.
        args.add_all(["frontier", module, "--out-dir", folder.path, "-q"])
        _add_common(args, ctx, libraries)
        args.add_all(["{}={}".format(k, v) for k, v in sorted(ctx.attr.specs.items())], format_each = "--spec=%s")
        if target:
            args.add_all(["--target", target, "--compile", "-j", "1"])
        message = "Building command product {}{}".format(ctx.label, " for " + target if target else "")
        _run_loom(ctx, "LoomFrontier", message, args, [module] + libraries, [folder])
        products[target] = folder
    return [
        DefaultInfo(files = depset(products.values())),
        LoomCommandInfo(targets = list(ctx.attr.targets), products = products),
    ]

loom_command = rule(
    implementation = _loom_command_impl,
    attrs = dict(
        _TOOLCHAIN_ATTR,
        srcs = _SRCS,
        deps = _DEPS,
        targets = attr.string_list(doc = "Targets; each gets a folder with the compiled kernels. " +
                                         "None: one target-independent product (requests only)."),
        roots = attr.string_list(doc = "Command program roots (`@program`); default: every public program."),
        config = attr.string_dict(doc = "Config bindings, key -> value text."),
        specs = attr.string_dict(doc = "Specialization arguments, `@program.arg` -> value (`--spec`)."),
    ),
    doc = "Builds a command-program product (`loom frontier`): one folder `<name>.<family>-<selector>` per target.",
)

# loom build --package needs a project folder that holds its sources (it rejects paths that resolve
# outside it, and Bazel's inputs are symlinks), so the action copies them into a private one.
# $1 loom, $2 the output, $3 the version, then pairs: input path, path in the project.
_PACKAGE_COMMAND = """set -eu
loom=$1 out=$2 version=$3
shift 3
project=$(mktemp -d "${TMPDIR:-/tmp}/loom-package.XXXXXX")
trap 'rm -rf "$project"' EXIT
while [ $# -gt 0 ]; do
  mkdir -p "$project/$(dirname "$2")"
  cp "$1" "$project/$2"
  shift 2
done
LOOM_CACHE=0 LOOM_JOBS=1 "$loom" build "$project" --package --no-cache -j 1 --progress none -q
set -- "$project"/dist/*-"$version".loompkg.tar.gz
if [ ! -f "$1" ]; then
  echo "loom_package: loom.toml's [project] version is not $version (the rule's version)" >&2
  exit 1
fi
cp "$1" "$out"
"""

def _relative(path, folder):
    if not folder:
        return path
    if not path.startswith(folder + "/"):
        return None
    return path[len(folder) + 1:]

def _loom_package_impl(ctx):
    tomls = [f for f in ctx.files.srcs if f.basename == "loom.toml"]
    if len(tomls) != 1:
        fail("loom_package: srcs must hold exactly one loom.toml, found {}".format(len(tomls)))
    folder = tomls[0].short_path.rpartition("/")[0]
    out = ctx.actions.declare_file("{}-{}.loompkg.tar.gz".format(ctx.label.name, ctx.attr.version))
    args = ctx.actions.args()
    args.add(out)
    args.add(ctx.attr.version)
    for f in ctx.files.srcs:
        rel = _relative(f.short_path, folder)
        if rel == None:
            fail("loom_package: {} is not under {}, the folder of loom.toml".format(f.short_path, folder))
        args.add(f)
        args.add(rel)
    # A shell script of its own (it copies the project into a scratch folder first), so never a worker's.
    toolchain = ctx.attr._toolchain[LoomToolchainInfo]
    prefix = ctx.actions.args()
    prefix.add(out.dirname)
    prefix.add("--")
    prefix.add(toolchain.executable)
    ctx.actions.run_shell(
        command = _MAKE_FOLDERS + _PACKAGE_COMMAND,
        arguments = [prefix, args],
        inputs = ctx.files.srcs,
        outputs = [out],
        tools = [toolchain.loom],
        mnemonic = "LoomPackage",
        progress_message = "Packaging {}".format(ctx.label),
        use_default_shell_env = True,
        **_NO_TOOLCHAIN
    )
    return [DefaultInfo(files = depset([out])), LoomPackageInfo(package = out)]

loom_package = rule(
    implementation = _loom_package_impl,
    attrs = dict(
        _TOOLCHAIN_ATTR,
        srcs = attr.label_list(allow_files = True, mandatory = True,
                               doc = "A loom.toml project: the loom.toml and every file it names, in their folders."),
        version = attr.string(mandatory = True, doc = "The project's version, as loom.toml's [project] says."),
    ),
    doc = "A release package (`loom build --package`): `<name>-<version>.loompkg.tar.gz`.",
)

def _shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"

# The test runs from its runfiles (the workspace's folder in them), where every path below is the
# file's short path. No private cache and no resident server: a test's result depends on its inputs.
_TEST_SCRIPT = """#!/bin/sh
LOOM_CACHE=0 LOOM_SERVER=off exec {command} "$@"
"""

def _loom_test_impl(ctx):
    toolchain = ctx.attr._toolchain[LoomToolchainInfo]
    libraries = [dep[LoomLibraryInfo] for dep in ctx.attr.deps]
    argv = [toolchain.executable.short_path, "test"]
    argv += [src.short_path for src in ctx.files.srcs]
    for library in libraries:
        argv += ["--library", "{}={}".format(library.key, library.bytecode.short_path)]
    for key, value in sorted(ctx.attr.config.items()):
        argv += ["--config", "{}={}".format(key, value)]
    for config_file in ctx.files.config_files:
        argv += ["--config-file", config_file.short_path]
    for case in ctx.attr.cases:
        argv += ["--case", case]
    argv += ["--device", ctx.attr.device]
    if ctx.attr.target:
        argv += ["--target", ctx.attr.target]
    script = ctx.actions.declare_file(ctx.label.name + ".loom_test.sh")
    ctx.actions.write(script, _TEST_SCRIPT.format(command = " ".join([_shell_quote(a) for a in argv])),
                      is_executable = True)
    files = ctx.files.srcs + ctx.files.config_files + [lib.bytecode for lib in libraries] + [toolchain.executable]
    runfiles = ctx.runfiles(files = files)
    if toolchain.runfiles:
        runfiles = runfiles.merge(toolchain.runfiles)
    return [DefaultInfo(executable = script, runfiles = runfiles)]

loom_test = rule(
    implementation = _loom_test_impl,
    test = True,
    attrs = dict(
        _TOOLCHAIN_ATTR,
        srcs = attr.label_list(allow_files = [".loom", ".loombc"], mandatory = True,
                               doc = "Files whose check cases run (`loom test FILE...`), each on its own."),
        deps = _DEPS,
        config = attr.string_dict(doc = "Config bindings, key -> value text (`--config key=value`)."),
        config_files = attr.label_list(allow_files = [".json", ".toml", ".loom"],
                                       doc = "Config files (`--config-file`), later ones win."),
        cases = attr.string_list(doc = "Only these cases (`--case @name`); default: every one."),
        device = attr.string(default = "auto", values = ["auto", "vulkan", "interpreter"],
                             doc = "Where kernels run: auto (a Vulkan device, else the interpreter), vulkan, interpreter."),
        target = attr.string(doc = "Target profile (`--target`); default: loom test's for the device."),
    ),
    doc = "`bazel test` of a kernel file's check cases: `loom test` with the libraries and config of a loom_kernels.",
)

# Offline Bazel (no network: Debian's bazel-bootstrap) cannot fetch @remote_coverage_tools, which every
# test rule names through --coverage_report_generator and --coverage_output_generator. Pointing both at
# //:no_coverage (docs/bazel.md) lets `bazel test` run a loom_test there; `bazel coverage` then fails.
_NO_COVERAGE = """#!/bin/sh
echo "loom_rules: no coverage tools here (--coverage_report_generator=@loom_rules//:no_coverage)" >&2
exit 1
"""

def _no_coverage_impl(ctx):
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, _NO_COVERAGE, is_executable = True)
    return [DefaultInfo(executable = script, files = depset([script]))]

loom_no_coverage = rule(
    implementation = _no_coverage_impl,
    executable = True,
    doc = "A stand-in for Bazel's coverage tools where they cannot be fetched (see docs/bazel.md).",
)
