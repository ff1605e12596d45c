"""`command.program.decl`: its `where` after `launch(...)` sees the specialization arguments."""

from __future__ import annotations

import pytest

from loomcli.bytecode import read_module, write_module
from loomcli.diagnostics import CompileError
from loomcli.frontend import parse_text
from loomcli.text.printer import print_module

DECL = "command.program.decl @p(%n: index) launch(%b: buffer) where [range(%n, 1, 8), ge(%n, 2)]\n"


def test_decl_where_names_specialization_arguments() -> None:
    module = parse_text(DECL, "decl.loom")
    op = module.ops[0]
    sig, launch = op.attr("sig"), op.attr("launch")
    assert [p.args[0] for p in launch.where] == [sig.args[0], sig.args[0]]
    assert print_module(module) == DECL
    assert print_module(read_module(write_module(module), "decl.loombc")) == DECL


@pytest.mark.parametrize("text, code", [
    ("command.program.decl @p(%n: index) launch(%b: buffer) where [range(%m, 1, 8)]\n", "PARSE/001"),
    ("command.program.decl @p(%n: index) launch(%n: buffer)\n", "PARSE/002"),
])
def test_decl_where_still_rejects_unknown_names(text: str, code: str) -> None:
    with pytest.raises(CompileError) as e:
        parse_text(text, "decl.loom")
    assert e.value.diagnostics[0].code == code


def test_kernel_decl_lists_keep_separate_scopes() -> None:
    text = "kernel.decl @k(%n: index) launch(%n: index, %out: buffer) where [range(%n, 1, 8)]\n"
    assert print_module(parse_text(text, "k.loom")) == text
