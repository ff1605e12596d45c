"""The front end as one call: read a `.loom` or `.loombc` input, parse, verify.

`load_module` is what every command starts from; it raises `CompileError`
with every diagnostic a file has (phase rules of LANGUAGE.md 17.9).
"""

from __future__ import annotations

from loomcli.diagnostics import CompileError, Diagnostic, has_errors
from loomcli.files import display_path as display_path  # re-exported: the commands name it here
from loomcli.ir.core import Module

BYTECODE_MAGIC = b"LOOMBC"


def is_bytecode(data: bytes) -> bool:
    return data.startswith(BYTECODE_MAGIC)


def parse_text(text: str, path: str = "<memory>", verify: bool = True) -> Module:
    """Parse and verify Loom text; raises CompileError with all diagnostics."""
    from loomcli.ir.verifier import verify as run_verifier
    from loomcli.text.parser import parse

    module, findings = parse(text, path)
    if verify:
        diags = run_verifier(module, findings)
    else:
        diags = findings
    if has_errors(diags):
        raise CompileError(diags)
    return module


def load_bytes(data: bytes, path: str, verify: bool = True) -> Module:
    """A module from file contents: bytecode if it carries the magic, else UTF-8 text."""
    if is_bytecode(data):
        from loomcli.bytecode import read_module
        from loomcli.ir.verifier import verify as run_verifier

        module = read_module(data, path)
        if verify:
            diags = run_verifier(module)
            if has_errors(diags):
                raise CompileError(diags)
        return module
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CompileError([Diagnostic("PARSE/004", f"invalid token `\\x{data[e.start]:02x}` (not UTF-8)",
                                       path, line, col)]) from None
    return parse_text(text, path, verify)


def load_module(path: str, verify: bool = True) -> Module:
    """Read and check one input file (`-`: standard input). I/O errors
    propagate as OSError; an input above the size limit is a LoomError."""
    from loomcli.files import read_input

    return load_bytes(read_input(path), "<stdin>" if path == "-" else display_path(path), verify)
