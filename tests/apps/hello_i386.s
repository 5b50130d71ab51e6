# hello_i386: a 32-bit x86 program, dynamically linked (a PIE with /lib/ld-linux.so.2 as its
# interpreter, so ld.so reads LD_PRELOAD for it) but needing no 32-bit libc to build: it writes
# "hello from i386" to its stderr with a system call and exits 5. Assembled and linked with
# binutils alone (tests/apps/CMakeLists.txt); running it needs the i386 loader (libc6-i386).
	.section .rodata
message:
	.ascii "hello from i386\n"
	.set message_length, . - message

	.text
	.globl _start
_start:
	call 1f
1:	popl %ecx
	addl $(message - 1b), %ecx	# position-independent: no text relocation
	movl $4, %eax			# write(2, message, length)
	movl $2, %ebx
	movl $message_length, %edx
	int $0x80
	movl $1, %eax			# exit(5)
	movl $5, %ebx
	int $0x80

	.section .note.GNU-stack,"",@progbits
