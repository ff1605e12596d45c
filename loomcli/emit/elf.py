"""A compact, checked ELF64 little-endian reader: what loom needs to look
inside the code objects it makes (AMDGPU `.hsaco`, NVIDIA `.cubin`).

Every offset and size is checked against the file, so a malformed input is an
`ElfError`, never an IndexError or a read past the end.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
PHDR = struct.Struct("<IIQQQQQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")
DYN = struct.Struct("<qQ")

ET_REL, ET_DYN = 1, 3
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS = (
    0, 1, 2, 3, 4, 5, 6, 7, 8)
SHT_REL, SHT_DYNSYM, SHT_GNU_HASH = 9, 11, 0x6FFFFFF6
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4
STV_DEFAULT, STV_HIDDEN = 0, 2
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR = 1, 2, 4, 6
PT_GNU_STACK, PT_GNU_RELRO = 0x6474E551, 0x6474E552
PF_X, PF_W, PF_R = 1, 2, 4
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_GNU_HASH = 0, 4, 5, 6, 10, 11, 0x6FFFFEF5


class ElfError(ValueError):
    """A malformed input, or one outside what the reader or a linker handles."""


# ---------------------------------------------------------------- reading


@dataclass
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int
    data: bytes


@dataclass
class Symbol:
    name: str
    info: int
    other: int
    shndx: int
    value: int
    size: int

    @property
    def bind(self) -> int:
        return self.info >> 4

    @property
    def type(self) -> int:
        return self.info & 0xF

    @property
    def visibility(self) -> int:
        return self.other & 3


@dataclass
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


@dataclass
class Elf:
    ident: bytes
    type: int
    machine: int
    flags: int
    sections: list[Section]
    segments: list[Segment]

    def section(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def symbols(self, kind: int = SHT_SYMTAB) -> list[Symbol]:
        for s in self.sections:
            if s.type == kind:
                return symbols_of(self, s)
        return []

    @property
    def abi_version(self) -> int:
        return self.ident[8]


def _cstr(table: bytes, offset: int) -> str:
    if not 0 <= offset < max(len(table), 1):
        raise ElfError(f"string offset {offset} outside its table")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def _unpack(fmt: struct.Struct, data: bytes, offset: int, what: str) -> tuple[Any, ...]:
    if offset < 0 or offset + fmt.size > len(data):
        raise ElfError(f"{what} at {offset} runs past the end of the file")
    return fmt.unpack_from(data, offset)


def read_elf(data: bytes) -> Elf:
    """Parse an ELF64 little-endian file; every offset and size is checked."""
    if len(data) < EHDR.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a little-endian ELF64 file")
    (ident, etype, machine, _version, _entry, phoff, shoff, flags, _ehsize, phentsize, phnum, shentsize, shnum,
     shstrndx) = EHDR.unpack_from(data, 0)
    if (shnum and shentsize != SHDR.size) or (phnum and phentsize != PHDR.size):
        raise ElfError("unexpected header entry sizes")
    raw = []
    for i in range(shnum):
        raw.append(_unpack(SHDR, data, shoff + i * SHDR.size, "section header"))
    names = b""
    if shnum:
        if shstrndx >= shnum:
            raise ElfError("section name table index out of range")
        h = raw[shstrndx]
        names = data[h[4]:h[4] + h[5]]
    sections = []
    for (name, stype, sflags, addr, offset, size, link, info, align, entsize) in raw:
        if stype != SHT_NOBITS and (offset + size > len(data)):
            raise ElfError("section data runs past the end of the file")
        body = b"" if stype in (SHT_NOBITS, SHT_NULL) else data[offset:offset + size]
        sections.append(Section(_cstr(names, name) if names else "", stype, sflags, addr, offset, size, link, info,
                                align, entsize, body))
    segments = [Segment(*(lambda t: (t[0], t[1], t[2], t[3], t[5], t[6], t[7]))(
        _unpack(PHDR, data, phoff + i * PHDR.size, "program header"))) for i in range(phnum)]
    return Elf(ident, etype, machine, flags, sections, segments)


def symbols_of(elf: Elf, table: Section) -> list[Symbol]:
    if table.link >= len(elf.sections):
        raise ElfError("symbol table links to a missing string table")
    strings = elf.sections[table.link].data
    out = []
    for off in range(0, len(table.data) - len(table.data) % SYM.size, SYM.size):
        name, info, other, shndx, value, size = SYM.unpack_from(table.data, off)
        out.append(Symbol(_cstr(strings, name) if name else "", info, other, shndx, value, size))
    return out


def notes(elf: Elf) -> list[tuple[str, int, bytes]]:
    """(owner, type, descriptor) of every note in SHT_NOTE sections."""
    out = []
    for s in elf.sections:
        if s.type != SHT_NOTE:
            continue
        d, pos = s.data, 0
        while pos + 12 <= len(d):
            namesz, descsz, ntype = struct.unpack_from("<III", d, pos)
            pos += 12
            name_end = pos + namesz
            desc_start = pos + (namesz + 3) // 4 * 4
            desc_end = desc_start + descsz
            if desc_end > len(d):
                raise ElfError("note runs past its section")
            out.append((d[pos:name_end].rstrip(b"\0").decode("utf-8", "replace"), ntype, d[desc_start:desc_end]))
            pos = desc_start + (descsz + 3) // 4 * 4
    return out
