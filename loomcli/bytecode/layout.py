"""Constants of the `.loombc` layout shared by the writer and the reader.

The layout itself is documented in `docs/bytecode.md`; every number here is
part of format version `VERSION` and may only change together with it.
"""

from __future__ import annotations

from loomcli.ir.core import MAX_DEPTH as IR_MAX_DEPTH

MAGIC = b"LOOMBC\x00"
VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})

# Header flags.
FLAG_DEBUG = 1  # comments, locations and the module path are present
HEADER_FLAGS = FLAG_DEBUG

# Per-op flags (the uvarint after the op name).
OP_COMMENTS = 1       # debug only: comment list follows the location
OP_OPERAND_LOCS = 2   # debug only: operand locations follow the operands
OP_ATTR_LOCS = 4      # debug only: attribute locations follow the attributes
OP_WRITTEN_TYPES = 8  # written operand types that disagree with the operands
OP_FLAGS = OP_COMMENTS | OP_OPERAND_LOCS | OP_ATTR_LOCS | OP_WRITTEN_TYPES

# Symbol-table entry flags.
SYM_PUBLIC = 1
SYM_RETAIN = 2
SYM_EXPORT = 4  # an export-name string index follows
SYM_SYMBOL = 8  # a symbol-name string index follows
SYM_FLAGS = SYM_PUBLIC | SYM_RETAIN | SYM_EXPORT | SYM_SYMBOL

# Value references: 0 and 1 define a value inline, n >= 2 names value n - 2
# of the payload's value table.
REF_FREE = 0      # a plain `Value` (a name the text never defined, or built in code)
REF_LOCAL = 1     # a `LocalName` (a declaration's signature argument)
REF_BASE = 2

# Attribute tags.
A_NONE = 0
A_FALSE = 1
A_TRUE = 2
A_INT = 3        # uvarint x, value x
A_NEGINT = 4     # uvarint x, value -1 - x
A_FLOAT = 5      # 8 bytes, IEEE 754 binary64, little-endian
A_STR = 6        # string index
A_IDENT = 7      # string index
A_SYMREF = 8     # string index
A_LIST = 9       # count, attributes
A_TUPLE = 10     # count, attributes
A_DICT = 11      # count, (key string index, attribute) pairs
A_HASH = 12      # name string index, count, attributes (the params)
A_KEYPARAM = 13  # key string index, attribute
A_TYPE = 14      # type
A_SIG = 15       # signature
A_PRED = 16      # predicate
A_VALUE = 17     # value reference
A_LAST = A_VALUE

# Predicate argument tags.
P_VALUE = 0
P_INT = 1
P_NEGINT = 2

# Limits.
MAX_DEPTH = IR_MAX_DEPTH      # op nesting plus attribute nesting (text is held to it too)
INT_MIN = -(1 << 63)
INT_MAX = (1 << 64) - 1
MAX_VARINT_BYTES = 10
