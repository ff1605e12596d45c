"""`.loombc`: the versioned binary form of a Loom module (docs/bytecode.md)."""

from loomcli.bytecode.reader import SymbolEntry, read_module, read_symbol_table
from loomcli.bytecode.writer import write_module

__all__ = ["SymbolEntry", "read_module", "read_symbol_table", "write_module"]
