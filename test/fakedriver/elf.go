package fakedriver

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// stubELF returns a minimal x86-64 ELF shared object that contains nothing
// but a dynamic section naming its SONAME. Tools that read a library's
// SONAME (nvcdi, to create the SONAME links in a container; ldconfig) see a
// library; it has no code and no symbols.
//
// Layout: ELF header, a PT_LOAD and a PT_DYNAMIC program header, .dynstr,
// .dynamic, .shstrtab, then the section headers. Addresses equal file
// offsets (the object would be loaded at 0).
func stubELF(soname string) []byte {
	const (
		ehdrSize = 64
		phdrSize = 56
		shdrSize = 64
		dynSize  = 16
	)
	dynstr := []byte("\x00" + soname + "\x00")
	shstrtab := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")
	const nameDynstr, nameDynamic, nameShstrtab = 1, 9, 18

	dynstrOff := uint64(ehdrSize + 2*phdrSize)
	dynOff := align8(dynstrOff + uint64(len(dynstr)))
	dyn := []elf.Dyn64{
		{Tag: int64(elf.DT_SONAME), Val: 1},
		{Tag: int64(elf.DT_STRTAB), Val: dynstrOff},
		{Tag: int64(elf.DT_STRSZ), Val: uint64(len(dynstr))},
		{Tag: int64(elf.DT_NULL)},
	}
	dynLen := uint64(len(dyn) * dynSize)
	shstrOff := dynOff + dynLen
	shOff := align8(shstrOff + uint64(len(shstrtab)))

	var ident [elf.EI_NIDENT]byte
	copy(ident[:], elf.ELFMAG)
	ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	ident[elf.EI_OSABI] = byte(elf.ELFOSABI_NONE)
	hdr := elf.Header64{
		Ident: ident, Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: ehdrSize, Shoff: shOff, Ehsize: ehdrSize,
		Phentsize: phdrSize, Phnum: 2, Shentsize: shdrSize, Shnum: 4, Shstrndx: 3,
	}
	progs := []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Filesz: shstrOff, Memsz: shstrOff, Align: 0x1000},
		{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R), Off: dynOff, Vaddr: dynOff, Paddr: dynOff,
			Filesz: dynLen, Memsz: dynLen, Align: 8},
	}
	sections := []elf.Section64{
		{},
		{Name: nameDynstr, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: dynstrOff, Off: dynstrOff,
			Size: uint64(len(dynstr)), Addralign: 1},
		{Name: nameDynamic, Type: uint32(elf.SHT_DYNAMIC), Flags: uint64(elf.SHF_ALLOC | elf.SHF_WRITE), Addr: dynOff, Off: dynOff,
			Size: dynLen, Link: 1, Addralign: 8, Entsize: dynSize},
		{Name: nameShstrtab, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstrtab)), Addralign: 1},
	}

	var b bytes.Buffer
	put := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) } // writes to a bytes.Buffer cannot fail
	pad := func(to uint64) { b.Write(make([]byte, to-uint64(b.Len()))) }
	put(hdr)
	put(progs)
	b.Write(dynstr)
	pad(dynOff)
	put(dyn)
	b.Write(shstrtab)
	pad(shOff)
	put(sections)
	return b.Bytes()
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }
