"""A compact ELF64 reader and the static link of one AMDGPU relocatable object
into a loadable code object (`ET_DYN`), in Python.

LLVM emits a relocatable object (`ET_REL`); the ROCm loader wants a shared
object. `link_shared` does what `ld.lld -shared` does for these objects and
lays the result out the way ld.lld 19 does, so the two outputs can be
compared byte for byte:

* one PT_LOAD per permission (R: headers, `.note`, `.dynsym`, `.gnu.hash`,
  `.hash`, `.dynstr`, read-only data such as the kernel descriptors; R+X:
  `.text`; R+W: `.dynamic` and `.relro_padding`), plus PT_PHDR, PT_DYNAMIC,
  PT_GNU_RELRO, PT_GNU_STACK and PT_NOTE;
* a later PT_LOAD starts at `align(dot, page) + dot % page`, its file offset
  congruent to its address (no file padding to page boundaries);
* `.dynsym` holds the defined global symbols that are not hidden (the
  kernels and their `.kd` descriptors), hashed for both `.gnu.hash` and
  `.hash`; `.symtab` keeps the local symbols, `_DYNAMIC` and the globals;
* relocations are resolved statically: the object is self-contained, so a
  PC-relative or absolute-symbol relocation needs no dynamic relocation.

Scope: one input object, no undefined symbols, no writable sections, and the
relocation types LLVM emits for code objects (`R_AMDGPU_ABS32_LO/HI`,
`ABS64`, `REL32`, `REL64`, `ABS32`, `REL32_LO/HI`, `REL16`). Absolute
relocations must name `SHN_ABS` symbols (a section address would need a
dynamic relocation). Anything else is an `ElfError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
PHDR = struct.Struct("<IIQQQQQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")
DYN = struct.Struct("<qQ")

ET_REL, ET_DYN = 1, 3
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
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

R_AMDGPU = {1: "ABS32_LO", 2: "ABS32_HI", 3: "ABS64", 4: "REL32", 5: "REL64", 6: "ABS32", 7: "GOTPCREL",
            8: "GOTPCREL32_LO", 9: "GOTPCREL32_HI", 10: "REL32_LO", 11: "REL32_HI", 13: "RELATIVE64",
            14: "REL16", 15: "ABS32_HI_ABS"}

MAX_PAGE = 0x1000       # ld.lld's page size for AMDGPU
COMMON_PAGE = 0x1000
GNU_HASH_SHIFT2 = 26


class ElfError(ValueError):
    """A malformed input or one outside the linker's scope."""


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
                return _symbols(self, s)
        return []

    @property
    def abi_version(self) -> int:
        return self.ident[8]


def _cstr(table: bytes, offset: int) -> str:
    if not 0 <= offset < max(len(table), 1):
        raise ElfError(f"string offset {offset} outside its table")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def _unpack(fmt: struct.Struct, data: bytes, offset: int, what: str) -> tuple:
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


def _symbols(elf: Elf, table: Section) -> list[Symbol]:
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


# ---------------------------------------------------------------- hashing


def gnu_hash(name: bytes) -> int:
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _align(x: int, a: int) -> int:
    return x if a <= 1 else (x + a - 1) // a * a


def _skew_align(off: int, align: int, skew: int) -> int:
    """The smallest value >= off congruent to skew modulo align."""
    skew %= align
    return off + ((skew - off) % align)


class _Strings:
    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.index: dict[str, int] = {"": 0}

    def add(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.data)
            self.data += s.encode() + b"\0"
        return self.index[s]


# ---------------------------------------------------------------- linking


@dataclass
class _Out:
    name: str
    type: int
    flags: int
    align: int
    entsize: int = 0
    link: int = 0
    info: int = 0
    data: bytearray = field(default_factory=bytearray)
    nobits_size: int = 0
    addr: int = 0
    offset: int = 0
    index: int = 0
    inputs: list[tuple[int, int]] = field(default_factory=list)   # (input section index, offset in this one)

    @property
    def size(self) -> int:
        return self.nobits_size if self.type == SHT_NOBITS else len(self.data)


def _output_name(name: str) -> str:
    for prefix in (".text", ".rodata", ".data.rel.ro", ".data", ".bss"):
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return name


def link_shared(obj: bytes) -> bytes:
    """Link one AMDGPU relocatable object into a shared-object code object."""
    elf = read_elf(obj)
    if elf.type != ET_REL or elf.machine != EM_AMDGPU:
        raise ElfError("expected an AMDGPU relocatable object")
    symtab_index = next((i for i, s in enumerate(elf.sections) if s.type == SHT_SYMTAB), None)
    if symtab_index is None:
        raise ElfError("the object has no symbol table")
    symbols = _symbols(elf, elf.sections[symtab_index])

    # Output sections from input sections, by permission class.
    notes_out: list[_Out] = []
    ro: list[_Out] = []
    rx: list[_Out] = []
    other: list[_Out] = []
    by_name: dict[str, _Out] = {}
    placement: dict[int, tuple[_Out, int]] = {}
    for i, s in enumerate(elf.sections):
        if s.type in (SHT_NULL, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_REL) or s.name == ".note.GNU-stack":
            continue
        if s.flags & SHF_ALLOC and s.flags & SHF_WRITE:
            raise ElfError(f"writable section {s.name} is outside the linker's scope")
        if s.type not in (SHT_PROGBITS, SHT_NOTE, SHT_NOBITS):
            raise ElfError(f"section {s.name} of type {s.type:#x} is outside the linker's scope")
        name = _output_name(s.name) if s.flags & SHF_ALLOC else s.name
        out = by_name.get(name)
        if out is None:
            out = _Out(name, s.type, s.flags, max(s.addralign, 1), s.entsize)
            by_name[name] = out
            if not s.flags & SHF_ALLOC:
                other.append(out)
            elif s.type == SHT_NOTE:
                notes_out.append(out)
            elif s.flags & SHF_EXECINSTR:
                rx.append(out)
            else:
                ro.append(out)
        out.align = max(out.align, s.addralign, 1)
        at = _align(out.size, max(s.addralign, 1))
        if out.type == SHT_NOBITS:
            out.nobits_size = at + s.size
        else:
            out.data += b"\0" * (at - len(out.data)) + s.data
        out.inputs.append((i, at))
        placement[i] = (out, at)

    # Dynamic symbols: defined globals that are not hidden, in symbol table order.
    dynstr = _Strings()
    exported = []
    for sym in symbols:
        if sym.bind in (STB_GLOBAL, STB_WEAK) and sym.shndx != SHN_UNDEF and sym.visibility != STV_HIDDEN:
            exported.append((sym, dynstr.add(sym.name)))
        elif sym.bind != STB_LOCAL and sym.shndx == SHN_UNDEF and sym.name:
            raise ElfError(f"undefined symbol {sym.name}")
    nbuckets = max(len(exported) // 4, 1)
    hashed = sorted(((gnu_hash(s.name.encode()) % nbuckets, off, s, gnu_hash(s.name.encode()))
                     for s, off in exported), key=lambda e: (e[0], e[1]))
    dynsym_order = [(s, off) for _, off, s, _ in hashed]

    dynsym = _Out(".dynsym", SHT_DYNSYM, SHF_ALLOC, 8, SYM.size, info=1)
    gnuhash = _Out(".gnu.hash", SHT_GNU_HASH, SHF_ALLOC, 8)
    hash_ = _Out(".hash", SHT_HASH, SHF_ALLOC, 4, 4)
    dynstr_out = _Out(".dynstr", SHT_STRTAB, SHF_ALLOC, 1)
    dynamic = _Out(".dynamic", SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, 8, DYN.size)
    relro_pad = _Out(".relro_padding", SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 1)
    nsyms = len(dynsym_order) + 1
    dynsym.data = bytearray(SYM.size * nsyms)
    mask_words = 1 if not hashed else _next_pow2(len(hashed) * 12 // 64)
    gnuhash.data = bytearray(16 + 8 * mask_words + 4 * nbuckets + 4 * len(hashed))
    hash_.data = bytearray(4 * (2 + 2 * nsyms))
    dynstr_out.data = dynstr.data
    dynamic.data = bytearray(DYN.size * 7)

    r_sections = notes_out + [dynsym, gnuhash, hash_, dynstr_out] + ro
    loads = [r_sections, rx, [dynamic, relro_pad]]
    loads = [group for group in loads if group]
    sections = [s for group in loads for s in group] + other
    for k, s in enumerate(sections):
        s.index = k + 1

    # Addresses and file offsets (see the module docstring).
    nphdrs = 1 + len(loads) + 3 + (1 if notes_out else 0)  # PHDR, LOADs, DYNAMIC, GNU_RELRO, GNU_STACK, NOTE
    dot = off = EHDR.size + PHDR.size * nphdrs
    for g, group in enumerate(loads):
        if g:
            dot = _align(dot, MAX_PAGE) + dot % MAX_PAGE
        for j, s in enumerate(group):
            if s is relro_pad:
                end = dynamic.addr + dynamic.size
                relro_pad.nobits_size = _align(end, COMMON_PAGE) - end
            dot = _align(dot, s.align)
            s.addr = dot
            if g == 0:
                s.offset = s.addr             # the first PT_LOAD maps the file from 0 at address 0
            elif j == 0:
                s.offset = _skew_align(off, MAX_PAGE, s.addr)
            else:
                s.offset = group[0].offset + s.addr - group[0].addr
            dot += s.size
            if s.type != SHT_NOBITS:
                off = s.offset + s.size
    for s in other:
        off = _align(off, s.align)
        s.offset = off
        off += s.size

    def address(sym: Symbol) -> int:
        if sym.shndx == SHN_ABS:
            return sym.value
        if sym.shndx in placement:
            out, at = placement[sym.shndx]
            return out.addr + at + sym.value
        raise ElfError(f"symbol {sym.name or '#'} is in a section that was not linked")

    # Relocations.
    for s in elf.sections:
        if s.type == SHT_REL:
            raise ElfError("REL relocations are outside the linker's scope")
        if s.type != SHT_RELA or s.info not in placement:
            continue
        out, base = placement[s.info]
        for r_off in range(0, len(s.data) - len(s.data) % RELA.size, RELA.size):
            offset, info, addend = RELA.unpack_from(s.data, r_off)
            rtype, rsym = info & 0xFFFFFFFF, info >> 32
            if rsym >= len(symbols):
                raise ElfError("relocation names a missing symbol")
            sym = symbols[rsym]
            if sym.shndx == SHN_UNDEF:
                raise ElfError(f"relocation against undefined symbol {sym.name}")
            kind = R_AMDGPU.get(rtype, str(rtype))
            if kind.startswith("ABS") and sym.shndx != SHN_ABS and out.flags & SHF_ALLOC:
                raise ElfError(f"R_AMDGPU_{kind} against {sym.name or 'a section'} needs a dynamic relocation")
            S, A, P = address(sym), addend, out.addr + base + offset
            at = base + offset
            if kind in ("ABS64", "REL64"):
                value, width = (S + A if kind == "ABS64" else S + A - P), 8
            elif kind in ("ABS32", "ABS32_LO", "REL32", "REL32_LO"):
                value, width = (S + A if kind.startswith("ABS") else S + A - P) & 0xFFFFFFFF, 4
            elif kind in ("ABS32_HI", "REL32_HI"):
                value, width = ((S + A if kind.startswith("ABS") else S + A - P) >> 32) & 0xFFFFFFFF, 4
            elif kind == "REL16":
                value, width = (((S + A - P) - 4) >> 2) & 0xFFFF, 2
            else:
                raise ElfError(f"relocation R_AMDGPU_{kind} is outside the linker's scope")
            if at + width > len(out.data):
                raise ElfError("relocation outside its section")
            out.data[at:at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")

    # Dynamic symbols and their hash tables.
    for k, (sym, name_off) in enumerate(dynsym_order, start=1):
        out_index = SHN_ABS if sym.shndx == SHN_ABS else placement[sym.shndx][0].index
        SYM.pack_into(dynsym.data, k * SYM.size, name_off, sym.info, sym.other, out_index, address(sym), sym.size)
    g = gnuhash.data
    struct.pack_into("<IIII", g, 0, nbuckets, nsyms - len(hashed), mask_words, GNU_HASH_SHIFT2)
    bloom = [0] * mask_words
    for _, _, _, h in hashed:
        i = (h // 64) & (mask_words - 1)
        bloom[i] |= (1 << (h % 64)) | (1 << ((h >> GNU_HASH_SHIFT2) % 64))
    struct.pack_into(f"<{mask_words}Q", g, 16, *bloom)
    buckets_at = 16 + 8 * mask_words
    values_at = buckets_at + 4 * nbuckets
    previous = -1
    for k, (bucket, _, _, h) in enumerate(hashed):
        last = k + 1 == len(hashed) or hashed[k + 1][0] != bucket
        struct.pack_into("<I", g, values_at + 4 * k, (h | 1) if last else (h & ~1 & 0xFFFFFFFF))
        if bucket != previous:
            struct.pack_into("<I", g, buckets_at + 4 * bucket, k + 1)
            previous = bucket
    chains = [0] * nsyms
    buckets = [0] * nsyms
    for k, (sym, _) in enumerate(dynsym_order, start=1):
        h = sysv_hash(sym.name.encode()) % nsyms
        chains[k] = buckets[h]
        buckets[h] = k
    hash_.data = bytearray(struct.pack(f"<II{nsyms}I{nsyms}I", nsyms, nsyms, *buckets, *chains))
    dynsym.link = dynstr_out.index
    gnuhash.link = hash_.link = dynsym.index
    dynamic.link = dynstr_out.index
    dynamic.data = bytearray(b"".join(DYN.pack(tag, value) for tag, value in (
        (DT_SYMTAB, dynsym.addr), (DT_SYMENT, SYM.size), (DT_STRTAB, dynstr_out.addr),
        (DT_STRSZ, len(dynstr_out.data)), (DT_GNU_HASH, gnuhash.addr), (DT_HASH, hash_.addr), (DT_NULL, 0))))

    # The static symbol table: locals (but section symbols), _DYNAMIC, globals.
    strtab = _Strings()
    entries = [SYM.pack(0, 0, 0, 0, 0, 0)]
    locals_ = [s for s in symbols[1:] if s.bind == STB_LOCAL and s.type != STT_SECTION]
    globals_ = [s for s in symbols[1:] if s.bind != STB_LOCAL]
    for sym in locals_:
        index = SHN_ABS if sym.shndx == SHN_ABS else placement[sym.shndx][0].index if sym.shndx in placement else 0
        value = address(sym) if sym.shndx in placement or sym.shndx == SHN_ABS else sym.value
        entries.append(SYM.pack(strtab.add(sym.name), sym.info, sym.other, index, value, sym.size))
    entries.append(SYM.pack(strtab.add("_DYNAMIC"), (STB_LOCAL << 4) | STT_NOTYPE, STV_HIDDEN, dynamic.index,
                            dynamic.addr, 0))
    first_global = len(entries)
    for sym in globals_:
        index = SHN_ABS if sym.shndx == SHN_ABS else placement[sym.shndx][0].index
        entries.append(SYM.pack(strtab.add(sym.name), sym.info, sym.other, index, address(sym), sym.size))
    symtab = _Out(".symtab", SHT_SYMTAB, 0, 8, SYM.size, info=first_global, data=bytearray(b"".join(entries)))
    shstrtab = _Out(".shstrtab", SHT_STRTAB, 0, 1)
    strtab_out = _Out(".strtab", SHT_STRTAB, 0, 1, data=strtab.data)
    tail = [symtab, shstrtab, strtab_out]
    for s in tail:
        s.index = len(sections) + 1
        sections.append(s)
    symtab.link = strtab_out.index
    names = _Strings()
    name_offsets = [names.add(s.name) for s in sections]
    shstrtab.data = names.data
    for s in tail:
        off = _align(off, s.align)
        s.offset = off
        off += s.size
    shoff = _align(off, 8)

    # Program headers.
    phdrs = [Segment(PT_PHDR, PF_R, EHDR.size, EHDR.size, PHDR.size * nphdrs, PHDR.size * nphdrs, 8)]
    for group in loads:
        first, last = group[0], group[-1]
        if all(s.size == 0 for s in group):
            continue  # ld.lld drops an empty PT_LOAD after laying out the file (its header space stays)
        flags = PF_R | (PF_X if first.flags & SHF_EXECINSTR else 0) | (PF_W if first.flags & SHF_WRITE else 0)
        start_off, start_addr = (0, 0) if group is loads[0] else (first.offset, first.addr)
        file_end = max(s.offset + s.size for s in group if s.type != SHT_NOBITS)
        mem_end = last.addr + last.size
        phdrs.append(Segment(PT_LOAD, flags, start_off, start_addr, file_end - start_off, mem_end - start_addr,
                             MAX_PAGE))
    phdrs.append(Segment(PT_DYNAMIC, PF_R | PF_W, dynamic.offset, dynamic.addr, dynamic.size, dynamic.size, 8))
    relro_end = relro_pad.addr + relro_pad.size
    phdrs.append(Segment(PT_GNU_RELRO, PF_R, dynamic.offset, dynamic.addr, dynamic.size,
                         relro_end - dynamic.addr, 1))
    phdrs.append(Segment(PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0))
    if notes_out:
        first, last = notes_out[0], notes_out[-1]
        phdrs.append(Segment(PT_NOTE, PF_R, first.offset, first.addr, last.offset + last.size - first.offset,
                             last.addr + last.size - first.addr, first.align))

    # The file.
    image = bytearray(shoff + SHDR.size * (len(sections) + 1))
    ident = bytearray(elf.ident)
    ident[7] = ELFOSABI_AMDGPU_HSA
    EHDR.pack_into(image, 0, bytes(ident), ET_DYN, EM_AMDGPU, 1, 0, EHDR.size, shoff, elf.flags, EHDR.size,
                   PHDR.size, len(phdrs), SHDR.size, len(sections) + 1, shstrtab.index)
    for k, p in enumerate(phdrs):
        PHDR.pack_into(image, EHDR.size + k * PHDR.size, p.type, p.flags, p.offset, p.vaddr, p.vaddr, p.filesz,
                       p.memsz, p.align)
    for s in sections:
        if s.type != SHT_NOBITS:
            image[s.offset:s.offset + s.size] = s.data
    for s, name_off in zip(sections, name_offsets):
        SHDR.pack_into(image, shoff + s.index * SHDR.size, name_off, s.type, s.flags, s.addr, s.offset, s.size,
                       s.link, s.info, s.align, s.entsize)
    return bytes(image)


def _next_pow2(n: int) -> int:
    """LLVM's NextPowerOf2: the smallest power of two strictly greater than n."""
    p = 1
    while p <= n:
        p <<= 1
    return p
