"""Read struct layouts and global-variable offsets from a BPF object's BTF.

The `.BTF` section of a built ``.bpf.o`` is the compiler's own record of
every struct layout and of where each global lives in `.rodata`.  We read it
(pure Python, no root needed) to (1) place `const volatile` settings before
load and (2) let tests prove each family's numpy mirror (its dtype module) matches
the C structs byte for byte.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

BTF_MAGIC = 0xEB9F
KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM = 1, 2, 3, 4, 5, 6
KIND_VAR, KIND_DATASEC, KIND_FUNC_PROTO, KIND_DECL_TAG, KIND_ENUM64 = 14, 15, 13, 17, 19
# Bytes that follow the 12-byte btf_type header, per kind: fixed + per-vlen.
_EXTRA = {KIND_INT: (4, 0), KIND_ARRAY: (12, 0), KIND_STRUCT: (0, 12), KIND_UNION: (0, 12),
          KIND_ENUM: (0, 8), KIND_FUNC_PROTO: (0, 8), KIND_VAR: (4, 0), KIND_DATASEC: (0, 12),
          KIND_DECL_TAG: (4, 0), KIND_ENUM64: (0, 12)}


@dataclass
class BtfType:
    id: int
    kind: int
    name: str
    size_or_type: int
    vlen: int
    kind_flag: bool
    extra: bytes


class Btf:
    def __init__(self, data: bytes):
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data)
        if magic != BTF_MAGIC:
            raise ValueError("not BTF data")
        base = hdr_len
        self._strs = data[base + str_off : base + str_off + str_len]
        self.types: list[BtfType | None] = [None]  # type id 0 is void
        pos, end = base + type_off, base + type_off + type_len
        while pos < end:
            name_off, info, size = struct.unpack_from("<III", data, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            fixed, per = _EXTRA.get(kind, (0, 0))
            extra_len = fixed + per * vlen
            self.types.append(BtfType(len(self.types), kind, self._name(name_off), size, vlen,
                                      bool(info >> 31), data[pos + 12 : pos + 12 + extra_len]))
            pos += 12 + extra_len

    @classmethod
    def from_object(cls, path: str) -> "Btf":
        with open(path, "rb") as f:
            sec = ELFFile(f).get_section_by_name(".BTF")
            if sec is None:
                raise ValueError(f"{path} has no .BTF section")
            return cls(sec.data())

    def _name(self, off: int) -> str:
        return self._strs[off : self._strs.index(b"\0", off)].decode()

    def find(self, name: str, kind: int) -> BtfType:
        for t in self.types[1:]:
            if t.kind == kind and t.name == name:
                return t
        raise KeyError(f"no BTF {name!r} of kind {kind}")

    def resolve_size(self, type_id: int) -> int:
        t = self.types[type_id]
        while t.kind in (8, 9, 10, 11, 18):  # typedef, volatile, const, restrict, type_tag
            t = self.types[t.size_or_type]
        if t.kind == KIND_ARRAY:
            elem, _idx, nelems = struct.unpack_from("<III", t.extra)
            return self.resolve_size(elem) * nelems
        if t.kind == KIND_PTR:
            return 8
        return t.size_or_type

    def struct_layout(self, name: str) -> tuple[int, dict[str, tuple[int, int]]]:
        """(size, {member: (byte offset, byte size)}) of `struct name`."""
        t = self.find(name, KIND_STRUCT)
        members = {}
        for i in range(t.vlen):
            m_name, m_type, m_off = struct.unpack_from("<III", t.extra, i * 12)
            bit_off = m_off & 0xFFFFFF if t.kind_flag else m_off
            members[self._name(m_name)] = (bit_off // 8, self.resolve_size(m_type))
        return t.size_or_type, members


def section_globals(path: str, section: str = ".rodata") -> dict[str, tuple[int, int]]:
    """{variable: (offset, size)} of the globals in `section` of an object.

    Read from the ELF symbol table: in an unlinked object BTF's DATASEC
    offsets are still zero (libbpf fills them in from these symbols).
    """
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec_idx = next((i for i, s in enumerate(elf.iter_sections()) if s.name == section), None)
        if sec_idx is None:
            return {}
        symtab = elf.get_section_by_name(".symtab")
        return {s.name: (s["st_value"], s["st_size"]) for s in symtab.iter_symbols()
                if s["st_shndx"] == sec_idx and s["st_info"]["type"] == "STT_OBJECT"}
