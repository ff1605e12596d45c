"""The product frontier (TOOLCHAIN.md section 7, LANGUAGE.md section 12, seed 000).

A command program becomes portable command bytes (`program-N.loomcmd`) and a
set of independent kernel requests, one per live semantic kernel class,
published while the product is being built so that compilation can overlap
it. Stages: `prepare` (fold, unroll, dead branches, launch contracts),
`classify` (semantic classes and request modules), `loomcmd` (the command
format), `product` (the API: `build_command_product`), `compiling` (requests
through the cache and a task sink, bindings committed after the parent).
"""

from loomcli.frontier.product import (
    COMPILED_MODULE_ROUTE,
    CommandProduct,
    CommandProgram,
    FrontierOptions,
    Request,
    RequestBinding,
    RequestSink,
    Requirement,
    build_command_product,
    request_key,
)

__all__ = ["COMPILED_MODULE_ROUTE", "CommandProduct", "CommandProgram", "FrontierOptions", "Request",
           "RequestBinding", "RequestSink", "Requirement", "build_command_product", "request_key"]
