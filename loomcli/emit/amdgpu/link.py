"""The static link of one AMDGPU relocatable object into a loadable code
object (`ET_DYN`), in Python, over the shared reader of `loomcli.emit.elf`.

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

from loomcli.emit.elf import (
    DT_GNU_HASH,
    DT_HASH,
    DT_NULL,
    DT_STRSZ,
    DT_STRTAB,
    DT_SYMENT,
    DT_SYMTAB,
    DYN,
    EHDR,
    ET_DYN,
    ET_REL,
    PF_R,
    PF_W,
    PF_X,
    PHDR,
    PT_DYNAMIC,
    PT_GNU_RELRO,
    PT_GNU_STACK,
    PT_LOAD,
    PT_NOTE,
    PT_PHDR,
    RELA,
    SHDR,
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHF_WRITE,
    SHN_ABS,
    SHN_UNDEF,
    SHT_DYNAMIC,
    SHT_DYNSYM,
    SHT_GNU_HASH,
    SHT_HASH,
    SHT_NOBITS,
    SHT_NOTE,
    SHT_NULL,
    SHT_PROGBITS,
    SHT_REL,
    SHT_RELA,
    SHT_STRTAB,
    SHT_SYMTAB,
    STB_GLOBAL,
    STB_LOCAL,
    STB_WEAK,
    STT_NOTYPE,
    STT_SECTION,
    STV_HIDDEN,
    SYM,
    Elf,
    ElfError,
    Segment,
    Symbol,
    read_elf,
    symbols_of,
)

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64

R_AMDGPU = {1: "ABS32_LO", 2: "ABS32_HI", 3: "ABS64", 4: "REL32", 5: "REL64", 6: "ABS32", 7: "GOTPCREL",
            8: "GOTPCREL32_LO", 9: "GOTPCREL32_HI", 10: "REL32_LO", 11: "REL32_HI", 13: "RELATIVE64",
            14: "REL16", 15: "ABS32_HI_ABS"}

MAX_PAGE = 0x1000       # ld.lld's page size for AMDGPU
COMMON_PAGE = 0x1000
GNU_HASH_SHIFT2 = 26


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
    return _Link(elf).run()


class _Link:
    """One link, in the phases ld.lld runs: place input sections, choose the
    dynamic symbols, lay out addresses and offsets, apply relocations, fill
    the dynamic tables, write the static symbol table, then the file."""

    def __init__(self, elf: Elf) -> None:
        symtab = next((s for s in elf.sections if s.type == SHT_SYMTAB), None)
        if symtab is None:
            raise ElfError("the object has no symbol table")
        self.elf = elf
        self.symbols = symbols_of(elf, symtab)
        self.notes: list[_Out] = []
        self.ro: list[_Out] = []
        self.rx: list[_Out] = []
        self.other: list[_Out] = []            # not allocated: after the loaded image
        self.placement: dict[int, tuple[_Out, int]] = {}   # input section -> (output, offset in it)

    def run(self) -> bytes:
        self.place_sections()
        self.choose_dynamic_symbols()
        self.lay_out()
        self.relocate()
        self.fill_dynamic_tables()
        self.write_symbol_table()
        return self.image()

    def place_sections(self) -> None:
        """Output sections from input sections, by permission class."""
        by_name: dict[str, _Out] = {}
        for i, s in enumerate(self.elf.sections):
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
                    self.other.append(out)
                elif s.type == SHT_NOTE:
                    self.notes.append(out)
                elif s.flags & SHF_EXECINSTR:
                    self.rx.append(out)
                else:
                    self.ro.append(out)
            out.align = max(out.align, s.addralign, 1)
            at = _align(out.size, max(s.addralign, 1))
            if out.type == SHT_NOBITS:
                out.nobits_size = at + s.size
            else:
                out.data += b"\0" * (at - len(out.data)) + s.data
            self.placement[i] = (out, at)

    def choose_dynamic_symbols(self) -> None:
        """Defined globals that are not hidden, ordered by GNU hash bucket;
        the synthetic sections sized for them."""
        self.dynstr = _Strings()
        exported = []
        for sym in self.symbols:
            if sym.bind in (STB_GLOBAL, STB_WEAK) and sym.shndx != SHN_UNDEF and sym.visibility != STV_HIDDEN:
                exported.append((sym, self.dynstr.add(sym.name)))
            elif sym.bind != STB_LOCAL and sym.shndx == SHN_UNDEF and sym.name:
                raise ElfError(f"undefined symbol {sym.name}")
        self.nbuckets = max(len(exported) // 4, 1)
        self.hashed = sorted(((gnu_hash(s.name.encode()) % self.nbuckets, off, s, gnu_hash(s.name.encode()))
                              for s, off in exported), key=lambda e: (e[0], e[1]))
        self.dynsym_order = [(s, off) for _, off, s, _ in self.hashed]
        self.nsyms = len(self.dynsym_order) + 1
        self.mask_words = 1 if not self.hashed else _next_pow2(len(self.hashed) * 12 // 64)

        self.dynsym = _Out(".dynsym", SHT_DYNSYM, SHF_ALLOC, 8, SYM.size, info=1,
                           data=bytearray(SYM.size * self.nsyms))
        self.gnuhash = _Out(".gnu.hash", SHT_GNU_HASH, SHF_ALLOC, 8, data=bytearray(
            16 + 8 * self.mask_words + 4 * self.nbuckets + 4 * len(self.hashed)))
        self.hash = _Out(".hash", SHT_HASH, SHF_ALLOC, 4, 4, data=bytearray(4 * (2 + 2 * self.nsyms)))
        self.dynstr_out = _Out(".dynstr", SHT_STRTAB, SHF_ALLOC, 1, data=self.dynstr.data)
        self.dynamic = _Out(".dynamic", SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, 8, DYN.size,
                            data=bytearray(DYN.size * 7))
        self.relro_pad = _Out(".relro_padding", SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 1)

    def lay_out(self) -> None:
        """Addresses and file offsets (see the module docstring)."""
        r_sections = self.notes + [self.dynsym, self.gnuhash, self.hash, self.dynstr_out] + self.ro
        self.loads = [group for group in (r_sections, self.rx, [self.dynamic, self.relro_pad]) if group]
        self.sections = [s for group in self.loads for s in group] + self.other
        for k, s in enumerate(self.sections):
            s.index = k + 1
        # PHDR, the LOADs, DYNAMIC, GNU_RELRO, GNU_STACK and NOTE
        self.nphdrs = 1 + len(self.loads) + 3 + (1 if self.notes else 0)
        dot = off = EHDR.size + PHDR.size * self.nphdrs
        for g, group in enumerate(self.loads):
            if g:
                dot = _align(dot, MAX_PAGE) + dot % MAX_PAGE
            for j, s in enumerate(group):
                if s is self.relro_pad:
                    end = self.dynamic.addr + self.dynamic.size
                    self.relro_pad.nobits_size = _align(end, COMMON_PAGE) - end
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
        for s in self.other:
            off = _align(off, s.align)
            s.offset = off
            off += s.size
        self.file_end = off

    def address(self, sym: Symbol) -> int:
        if sym.shndx == SHN_ABS:
            return sym.value
        if sym.shndx in self.placement:
            out, at = self.placement[sym.shndx]
            return out.addr + at + sym.value
        raise ElfError(f"symbol {sym.name or '#'} is in a section that was not linked")

    def relocate(self) -> None:
        """Resolve every RELA relocation statically (module docstring: scope)."""
        for s in self.elf.sections:
            if s.type == SHT_REL:
                raise ElfError("REL relocations are outside the linker's scope")
            if s.type != SHT_RELA or s.info not in self.placement:
                continue
            out, base = self.placement[s.info]
            for r_off in range(0, len(s.data) - len(s.data) % RELA.size, RELA.size):
                offset, info, addend = RELA.unpack_from(s.data, r_off)
                self.apply(out, base + offset, info & 0xFFFFFFFF, info >> 32, addend)

    def apply(self, out: _Out, at: int, rtype: int, rsym: int, addend: int) -> None:
        if rsym >= len(self.symbols):
            raise ElfError("relocation names a missing symbol")
        sym = self.symbols[rsym]
        if sym.shndx == SHN_UNDEF:
            raise ElfError(f"relocation against undefined symbol {sym.name}")
        kind = R_AMDGPU.get(rtype, str(rtype))
        if kind.startswith("ABS") and sym.shndx != SHN_ABS and out.flags & SHF_ALLOC:
            raise ElfError(f"R_AMDGPU_{kind} against {sym.name or 'a section'} needs a dynamic relocation")
        S, A, P = self.address(sym), addend, out.addr + at
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

    def fill_dynamic_tables(self) -> None:
        """`.dynsym`, `.gnu.hash`, `.hash` and `.dynamic`."""
        for k, (sym, name_off) in enumerate(self.dynsym_order, start=1):
            out_index = SHN_ABS if sym.shndx == SHN_ABS else self.placement[sym.shndx][0].index
            SYM.pack_into(self.dynsym.data, k * SYM.size, name_off, sym.info, sym.other, out_index,
                          self.address(sym), sym.size)
        g, hashed, mask_words = self.gnuhash.data, self.hashed, self.mask_words
        struct.pack_into("<IIII", g, 0, self.nbuckets, self.nsyms - len(hashed), mask_words, GNU_HASH_SHIFT2)
        bloom = [0] * mask_words
        for _, _, _, h in hashed:
            i = (h // 64) & (mask_words - 1)
            bloom[i] |= (1 << (h % 64)) | (1 << ((h >> GNU_HASH_SHIFT2) % 64))
        struct.pack_into(f"<{mask_words}Q", g, 16, *bloom)
        buckets_at = 16 + 8 * mask_words
        values_at = buckets_at + 4 * self.nbuckets
        previous = -1
        for k, (bucket, _, _, h) in enumerate(hashed):
            last = k + 1 == len(hashed) or hashed[k + 1][0] != bucket
            struct.pack_into("<I", g, values_at + 4 * k, (h | 1) if last else (h & ~1 & 0xFFFFFFFF))
            if bucket != previous:
                struct.pack_into("<I", g, buckets_at + 4 * bucket, k + 1)
                previous = bucket
        nsyms = self.nsyms
        chains = [0] * nsyms
        buckets = [0] * nsyms
        for k, (sym, _) in enumerate(self.dynsym_order, start=1):
            h = sysv_hash(sym.name.encode()) % nsyms
            chains[k] = buckets[h]
            buckets[h] = k
        self.hash.data = bytearray(struct.pack(f"<II{nsyms}I{nsyms}I", nsyms, nsyms, *buckets, *chains))
        self.dynsym.link = self.dynstr_out.index
        self.gnuhash.link = self.hash.link = self.dynsym.index
        self.dynamic.link = self.dynstr_out.index
        self.dynamic.data = bytearray(b"".join(DYN.pack(tag, value) for tag, value in (
            (DT_SYMTAB, self.dynsym.addr), (DT_SYMENT, SYM.size), (DT_STRTAB, self.dynstr_out.addr),
            (DT_STRSZ, len(self.dynstr_out.data)), (DT_GNU_HASH, self.gnuhash.addr), (DT_HASH, self.hash.addr),
            (DT_NULL, 0))))

    def write_symbol_table(self) -> None:
        """The static symbol table: locals (but section symbols), _DYNAMIC,
        globals; then the section name table, after the image."""
        placement, symbols = self.placement, self.symbols
        strtab = _Strings()
        entries = [SYM.pack(0, 0, 0, 0, 0, 0)]
        locals_ = [s for s in symbols[1:] if s.bind == STB_LOCAL and s.type != STT_SECTION]
        globals_ = [s for s in symbols[1:] if s.bind != STB_LOCAL]
        for sym in locals_:
            index = SHN_ABS if sym.shndx == SHN_ABS else placement[sym.shndx][0].index if sym.shndx in placement else 0
            value = self.address(sym) if sym.shndx in placement or sym.shndx == SHN_ABS else sym.value
            entries.append(SYM.pack(strtab.add(sym.name), sym.info, sym.other, index, value, sym.size))
        entries.append(SYM.pack(strtab.add("_DYNAMIC"), (STB_LOCAL << 4) | STT_NOTYPE, STV_HIDDEN,
                                self.dynamic.index, self.dynamic.addr, 0))
        first_global = len(entries)
        for sym in globals_:
            index = SHN_ABS if sym.shndx == SHN_ABS else placement[sym.shndx][0].index
            entries.append(SYM.pack(strtab.add(sym.name), sym.info, sym.other, index, self.address(sym), sym.size))
        symtab = _Out(".symtab", SHT_SYMTAB, 0, 8, SYM.size, info=first_global, data=bytearray(b"".join(entries)))
        self.shstrtab = _Out(".shstrtab", SHT_STRTAB, 0, 1)
        strtab_out = _Out(".strtab", SHT_STRTAB, 0, 1, data=strtab.data)
        tail = [symtab, self.shstrtab, strtab_out]
        for s in tail:
            s.index = len(self.sections) + 1
            self.sections.append(s)
        symtab.link = strtab_out.index
        names = _Strings()
        self.name_offsets = [names.add(s.name) for s in self.sections]
        self.shstrtab.data = names.data
        off = self.file_end
        for s in tail:
            off = _align(off, s.align)
            s.offset = off
            off += s.size
        self.shoff = _align(off, 8)

    def program_headers(self) -> list[Segment]:
        nphdrs, loads, dynamic = self.nphdrs, self.loads, self.dynamic
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
        relro_end = self.relro_pad.addr + self.relro_pad.size
        phdrs.append(Segment(PT_GNU_RELRO, PF_R, dynamic.offset, dynamic.addr, dynamic.size,
                             relro_end - dynamic.addr, 1))
        phdrs.append(Segment(PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0))
        if self.notes:
            first, last = self.notes[0], self.notes[-1]
            phdrs.append(Segment(PT_NOTE, PF_R, first.offset, first.addr, last.offset + last.size - first.offset,
                                 last.addr + last.size - first.addr, first.align))
        return phdrs

    def image(self) -> bytes:
        phdrs = self.program_headers()
        sections, shoff = self.sections, self.shoff
        image = bytearray(shoff + SHDR.size * (len(sections) + 1))
        ident = bytearray(self.elf.ident)
        ident[7] = ELFOSABI_AMDGPU_HSA
        EHDR.pack_into(image, 0, bytes(ident), ET_DYN, EM_AMDGPU, 1, 0, EHDR.size, shoff, self.elf.flags,
                       EHDR.size, PHDR.size, len(phdrs), SHDR.size, len(sections) + 1, self.shstrtab.index)
        for k, p in enumerate(phdrs):
            PHDR.pack_into(image, EHDR.size + k * PHDR.size, p.type, p.flags, p.offset, p.vaddr, p.vaddr,
                           p.filesz, p.memsz, p.align)
        for s in sections:
            if s.type != SHT_NOBITS:
                image[s.offset:s.offset + s.size] = s.data
        for s, name_off in zip(sections, self.name_offsets):
            SHDR.pack_into(image, shoff + s.index * SHDR.size, name_off, s.type, s.flags, s.addr, s.offset,
                           s.size, s.link, s.info, s.align, s.entsize)
        return bytes(image)


def _next_pow2(n: int) -> int:
    """LLVM's NextPowerOf2: the smallest power of two strictly greater than n."""
    p = 1
    while p <= n:
        p <<= 1
    return p
