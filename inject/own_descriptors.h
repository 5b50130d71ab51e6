// Descriptors the program cannot reach. A program may close every descriptor (close_range,
// closefrom) or dup2 onto any number, from any thread, at any moment, and open files of its own at
// once: no check before a write or a close is safe from that. A thread with a descriptor table of
// its own is: what it opens takes none of the program's numbers, and nothing the program closes is
// its.
#pragma once

namespace gprof::inject {

// Gives the calling thread an empty descriptor table of its own (close_range with
// CLOSE_RANGE_UNSHARE over every number copies none of the program's: holding one open would keep
// a pipe's reader from its end of file). POSIX record locks belong to the table that took them:
// the program's stay. False on a kernel without it (before 5.9): the thread shares the program's.
bool UseOwnDescriptorTable();

// dlopen(path, flags) from a short-lived thread with a table of its own, for a library the program
// did not load: the loader opens the file at the lowest free number, reads and maps it, and closes
// it, and a thread of the program closing every descriptor and opening its own meanwhile would
// have one of its files read, mapped and closed by the loader. Plain dlopen where no thread can
// be made.
void* DlopenOutsideTheProgramsTable(const char* path, int flags);

}  // namespace gprof::inject
