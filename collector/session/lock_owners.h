// Owners of mmap_lock waits that the kernel could not name.
#pragma once

#include "collector/model/model.h"

namespace gprof::collector {

// An rwsem held for reading keeps only a hint of one reader, which a reader that came later (a
// kernel thread, another process reading /proc/PID/maps) overwrites and which the kernel at times
// leaves empty: a wait on a process's mmap_lock then has no owner although the thread holding it
// is in the record, inside a memory map call (a munmap frees a large region holding the lock)
// that spans the whole wait. For each mmap_lock wait without an owner, names the thread of the
// same process whose memory map call began before the wait and ended when the lock was released
// to it (the wakeup that ended its last sleep) or later, and that was not itself waiting on the
// lock; marks it owner_inferred. Needs lock_waits, memory_map_calls and off_cpu sorted by start.
void InferMmapLockOwners(Session& session);

}  // namespace gprof::collector
