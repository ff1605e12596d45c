"""Loom v1 types (LANGUAGE.md section 5).

Types are immutable values. Scalar types are interned singletons so identity
comparison is cheap; shaped types compare structurally, a dynamic dim only by
the identity of the SSA value it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard, Union

if TYPE_CHECKING:
    from loomcli.ir.core import Value


class Type:
    __slots__ = ()
    name: str

    def __repr__(self) -> str:
        return f"<type {self}>"


class ScalarType(Type):
    """A non-shaped type: integers, floats, index, offset, buffer."""

    __slots__ = ("bits", "category", "name")

    def __init__(self, name: str, category: str, bits: int) -> None:
        self.name = name
        self.category = category  # "int" | "float" | "index" | "offset" | "buffer"
        self.bits = bits

    def __str__(self) -> str:
        return self.name


Dim = Union[int, "Value"]


class ShapedType(Type):
    """`view<...>`, `tensor<...>` and `vector<...>`: a rank >= 1 shape of an element type."""

    __slots__ = ("_hash", "dims", "elem", "name")

    def __init__(self, name: str, dims: tuple[Dim, ...], elem: ScalarType) -> None:
        self.name = name
        self.dims = dims
        self.elem = elem
        self._hash = hash((name, tuple(d if isinstance(d, int) else id(d) for d in dims), elem))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ShapedType) or self.name != other.name or self.elem is not other.elem:
            return False
        if len(self.dims) != len(other.dims):
            return False
        for a, b in zip(self.dims, other.dims):
            if isinstance(a, int) or isinstance(b, int):
                if not (isinstance(a, int) and isinstance(b, int) and a == b):
                    return False
            elif a is not b:
                return False
        return True

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    def dynamic_values(self) -> list[Value]:
        return [d for d in self.dims if not isinstance(d, int)]

    def replace_dims(self, dims: tuple[Dim, ...]) -> ShapedType:
        return ShapedType(self.name, dims, self.elem)

    def __str__(self) -> str:
        parts = [str(d) if isinstance(d, int) else f"[%{d.name}]" for d in self.dims]
        return f"{self.name}<{'x'.join(parts)}x{self.elem.name}>"


def scalar(t: Type) -> ScalarType:
    """`t` as the scalar type a verified op's typing rule makes it (TypeError otherwise)."""
    if not isinstance(t, ScalarType):
        raise TypeError(f"{t} is not a scalar type")
    return t


def shaped(t: Type) -> ShapedType:
    """`t` as the shaped type a verified op's typing rule makes it (TypeError otherwise)."""
    if not isinstance(t, ShapedType):
        raise TypeError(f"{t} is not a shaped type")
    return t


def lane_count(t: Type) -> int:
    """A vector type's lane count (its one dimension, always static)."""
    n = shaped(t).dims[0]
    if not isinstance(n, int):
        raise TypeError(f"{t} has no static lane count")
    return n


def _scalar(name: str, category: str, bits: int) -> ScalarType:
    return ScalarType(name, category, bits)


I1 = _scalar("i1", "int", 1)
I8 = _scalar("i8", "int", 8)
I16 = _scalar("i16", "int", 16)
I32 = _scalar("i32", "int", 32)
I64 = _scalar("i64", "int", 64)
F16 = _scalar("f16", "float", 16)
BF16 = _scalar("bf16", "float", 16)
F32 = _scalar("f32", "float", 32)
F64 = _scalar("f64", "float", 64)
INDEX = _scalar("index", "index", 64)
OFFSET = _scalar("offset", "offset", 64)
BUFFER = _scalar("buffer", "buffer", 0)
# The type of a value whose definition failed to resolve; ops using it are not checked further.
ERROR = _scalar("<error>", "error", 0)

SCALAR_TYPES: dict[str, ScalarType] = {
    t.name: t for t in (I1, I8, I16, I32, I64, F16, BF16, F32, F64, INDEX, OFFSET, BUFFER)
}
SHAPED_KINDS = ("view", "tensor", "vector")
ELEMENT_TYPES = frozenset(t for t in SCALAR_TYPES.values() if t.category in ("int", "float"))

# Byte size of an element as stored in memory (LANGUAGE.md section 5).
ELEMENT_BYTES = {I1: 1, I8: 1, I16: 2, F16: 2, BF16: 2, I32: 4, F32: 4, I64: 8, F64: 8}


def is_int(t: Type) -> TypeGuard[ScalarType]:
    return isinstance(t, ScalarType) and t.category == "int"


def is_float(t: Type) -> TypeGuard[ScalarType]:
    return isinstance(t, ScalarType) and t.category == "float"


def is_index_like(t: Type) -> bool:
    """index or offset."""
    return t is INDEX or t is OFFSET


def is_integer_like(t: Type) -> bool:
    """index, offset or an integer type: the subjects of predicates."""
    return t is INDEX or t is OFFSET or is_int(t)


def is_numeric(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.category in ("int", "float")


def is_vector(t: Type) -> TypeGuard[ShapedType]:
    return isinstance(t, ShapedType) and t.name == "vector"


def is_view(t: Type) -> TypeGuard[ShapedType]:
    return isinstance(t, ShapedType) and t.name == "view"


def is_tensor(t: Type) -> TypeGuard[ShapedType]:
    return isinstance(t, ShapedType) and t.name == "tensor"
