# The testbed's guest: the smallest kernel QEMU boots through PVH.
#
# A stock Linux guest does not boot under this host's nested PVM /dev/kvm,
# and StartVM only needs the VMM's real work (KVM VM and vCPU creation,
# guest memory, the tap NIC) plus proof that the guest ran. So the guest
# prints a marker on COM1, then writes to QEMU's isa-debug-exit port so
# QEMU exits at once (exit code 1 = (0 << 1) | 1); without that device it
# halts with interrupts off.
#
# Built at run time: as --32 pvh_stub.s -o stub.o && ld -m elf_i386 -Ttext=0x100000 -o stub.elf stub.o

        .section .note.Xen, "a", @note
        .p2align 2
        .long 4                 # namesz: "Xen\0"
        .long 4                 # descsz
        .long 18                # XEN_ELFNOTE_PHYS32_ENTRY: QEMU's PVH loader enters here
        .asciz "Xen"
        .p2align 2
        .long _start

        .text
        .code32
        .globl _start
_start:                         # 32-bit protected mode, paging off (the PVH contract)
        cli
        mov $marker, %esi
        mov $0x3f8, %dx         # COM1 data register; QEMU needs no UART set-up
1:      lodsb
        test %al, %al
        jz 2f
        out %al, %dx
        jmp 1b
2:      mov $0xf4, %dx          # isa-debug-exit
        xor %eax, %eax
        outl %eax, %dx
3:      hlt
        jmp 3b

marker: .asciz "BOOTSTORM-GUEST-UP\n"
