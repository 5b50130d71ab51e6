# libgprof_inject.so for 32-bit x86 programs: nothing at all. LD_PRELOAD names the injected library
# through ld.so's $PLATFORM directory (cli/inject_library.h), so that a 32-bit program of the
# command's tree loads this instead of failing to load the 64-bit library, which would make its
# loader print "wrong ELF class" into the program's stderr. Such a program is not recorded.
	.section .note.GNU-stack,"",@progbits
