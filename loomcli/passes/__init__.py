"""Passes over Loom IR: the registry, pipelines, the rewrite driver, the generic passes.

    from loomcli.passes import parse_pipeline, PassContext
    parse_pipeline("canonicalize{max-iterations=4},cse,dce").run(module, PassContext())

Importing this package is cheap: pass modules load when a pipeline names them.
"""

from loomcli.passes.pipeline import DEFAULT_PIPELINE, Pipeline, describe_passes, parse_pipeline, run_pipeline
from loomcli.passes.registry import ModulePass, PassContext, get_pass, option, pass_names, register_pass

__all__ = [
    "DEFAULT_PIPELINE",
    "ModulePass",
    "PassContext",
    "Pipeline",
    "describe_passes",
    "get_pass",
    "option",
    "parse_pipeline",
    "pass_names",
    "register_pass",
    "run_pipeline",
]
