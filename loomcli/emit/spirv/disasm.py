"""SPIR-V disassembly text for `loom emit --format asm`.

Pure Python over the emitter's own opcode tables, so the text depends only
on the binary (never on the installed SPIRV-Tools). It reads the subset of
SPIR-V the emitter writes; anything else prints as `Op<number>` with raw
words. The form follows spirv-dis without friendly names: `%12 = OpIAdd %3 %10 %11`.
"""

from __future__ import annotations

import struct

from loomcli.emit.spirv.spec import EXEC_LOCAL_SIZE, EXEC_SIGNED_ZERO_INF_NAN_PRESERVE, GLSL, SC, BuiltIn, Cap, Dec, Op

_NAMES = {v: k for k, v in vars(Op).items() if not k.startswith("_")}
_CAPS = {v: k for k, v in vars(Cap).items() if not k.startswith("_")}
_DECS = {v: k for k, v in vars(Dec).items() if not k.startswith("_")}
_SCS = {v: k for k, v in vars(SC).items() if not k.startswith("_")}
_BUILTINS = {v: k for k, v in vars(BuiltIn).items() if not k.startswith("_")}
_GLSL = {v: k for k, v in vars(GLSL).items() if not k.startswith("_")}

# Instructions whose first two operands are (result type, result id).
_TYPED = frozenset({Op.Constant, Op.ConstantTrue, Op.ConstantFalse, Op.ConstantComposite, Op.Function,
                    Op.FunctionParameter, Op.FunctionCall, Op.Variable, Op.ExtInst, Op.Undef}) | frozenset(
    v for k, v in vars(Op).items() if not k.startswith(("_", "Type", "Constant", "Decorate", "Member", "Capability",
                                                          "Extension", "ExtInstImport", "MemoryModel", "Entry",
                                                          "Execution", "Label", "Branch", "Selection", "Loop",
                                                          "Switch", "Return", "Unreachable", "Store", "Control",
                                                          "Memory", "Name", "Nop", "Function", "AtomicStore")))
# Result id only (no type).
_RESULT_ONLY = frozenset({Op.ExtInstImport, Op.Label} | {v for k, v in vars(Op).items() if k.startswith("Type")})


def _string(words: tuple[int, ...]) -> tuple[str, int]:
    raw = b"".join(struct.pack("<I", w) for w in words)
    text = raw.split(b"\0", 1)[0]
    return text.decode("utf-8", "replace"), len(text) // 4 + 1


def disassemble(data: bytes) -> str:
    if len(data) < 20 or len(data) % 4:
        raise ValueError("not a SPIR-V binary")
    words = struct.unpack(f"<{len(data) // 4}I", data)
    if words[0] != 0x07230203:
        raise ValueError("not a SPIR-V binary (magic)")
    lines = ["; SPIR-V", f"; Version: {(words[1] >> 16) & 0xFF}.{(words[1] >> 8) & 0xFF}",
             f"; Generator: {words[2]}", f"; Bound: {words[3]}", f"; Schema: {words[4]}"]
    float_types: dict[int, int] = {}
    at = 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0:
            raise ValueError(f"malformed instruction at word {at}")
        ops = words[at + 1:at + count]
        at += count
        if opcode == Op.TypeFloat:
            float_types[ops[0]] = ops[1]
        lines.append(_line(opcode, ops, float_types))
    return "\n".join(lines) + "\n"


def _ids(ops: tuple[int, ...]) -> list[str]:
    return [f"%{i}" for i in ops]


def _line(opcode: int, ops: tuple[int, ...], float_types: dict[int, int]) -> str:
    name = "Op" + _NAMES.get(opcode, str(opcode))
    if opcode not in _NAMES:
        return f"{name} " + " ".join(map(str, ops))
    head = ""
    rest: list[str]
    if opcode == Op.Capability:
        rest = [_CAPS.get(ops[0], str(ops[0]))]
    elif opcode == Op.Extension:
        rest = [f'"{_string(ops)[0]}"']
    elif opcode == Op.ExtInstImport:
        head = f"%{ops[0]} = "
        rest = [f'"{_string(ops[1:])[0]}"']
    elif opcode == Op.MemoryModel:
        rest = ["Logical" if ops[0] == 0 else str(ops[0]), "GLSL450" if ops[1] == 1 else str(ops[1])]
    elif opcode == Op.EntryPoint:
        text, n = _string(ops[2:])
        rest = ["GLCompute" if ops[0] == 5 else str(ops[0]), f"%{ops[1]}", f'"{text}"', *_ids(ops[2 + n:])]
    elif opcode == Op.ExecutionMode:
        mode = {EXEC_LOCAL_SIZE: "LocalSize", EXEC_SIGNED_ZERO_INF_NAN_PRESERVE: "SignedZeroInfNanPreserve"}
        rest = [f"%{ops[0]}", mode.get(ops[1], str(ops[1])), *map(str, ops[2:])]
    elif opcode in (Op.Decorate, Op.MemberDecorate):
        k = 2 if opcode == Op.MemberDecorate else 1
        dec = ops[k]
        extra = [_BUILTINS.get(ops[k + 1], str(ops[k + 1]))] if dec == Dec.BuiltIn else list(map(str, ops[k + 1:]))
        rest = [f"%{ops[0]}", *map(str, ops[1:k]), _DECS.get(dec, str(dec)), *extra]
    elif opcode in _RESULT_ONLY:
        head = f"%{ops[0]} = "
        if opcode == Op.TypePointer:
            rest = [_SCS.get(ops[1], str(ops[1])), f"%{ops[2]}"]
        elif opcode in (Op.TypeInt, Op.TypeFloat):
            rest = list(map(str, ops[1:]))
        elif opcode == Op.TypeVector:
            rest = [f"%{ops[1]}", str(ops[2])]
        else:
            rest = _ids(ops[1:])
    elif opcode == Op.Constant:
        head = f"%{ops[1]} = "
        bits = float_types.get(ops[0])
        value = ops[2] | (ops[3] << 32 if len(ops) > 3 else 0)
        if bits is not None:
            fmt = {16: "<e", 32: "<f", 64: "<d"}[bits]
            packed = value.to_bytes(bits // 8, "little")
            text = repr(struct.unpack(fmt, packed)[0])
        else:
            text = str(value)
        rest = [f"%{ops[0]}", text]
    elif opcode == Op.Variable:
        head = f"%{ops[1]} = "
        rest = [f"%{ops[0]}", _SCS.get(ops[2], str(ops[2]))]
    elif opcode == Op.Function:
        head = f"%{ops[1]} = "
        rest = [f"%{ops[0]}", "None" if ops[2] == 0 else str(ops[2]), f"%{ops[3]}"]
    elif opcode == Op.ExtInst:
        head = f"%{ops[1]} = "
        rest = [f"%{ops[0]}", f"%{ops[2]}", _GLSL.get(ops[3], str(ops[3])), *_ids(ops[4:])]
    elif opcode in (Op.SelectionMerge, Op.LoopMerge):
        rest = [*_ids(ops[:-1]), "None" if ops[-1] == 0 else str(ops[-1])]
    elif opcode == Op.Switch:
        cases = [f"{ops[j]} %{ops[j + 1]}" for j in range(2, len(ops), 2)]
        rest = [f"%{ops[0]}", f"%{ops[1]}", *cases]
    elif name.startswith("OpGroupNonUniform") and opcode >= Op.GroupNonUniformIAdd:
        head = f"%{ops[1]} = "
        rest = [f"%{ops[0]}", f"%{ops[2]}", "Reduce" if ops[3] == 0 else str(ops[3]), *_ids(ops[4:])]
    elif opcode in _TYPED:
        head = f"%{ops[1]} = "
        rest = [f"%{ops[0]}", *_ids(ops[2:])]
    else:
        rest = _ids(ops)
    return f"{head}{name} " + " ".join(rest) if rest else f"{head}{name}"
