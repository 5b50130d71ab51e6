// The session directory's files, named once for gprof-run that makes them, the recorders that
// write them and the collector that reads them (docs/architecture.md, "The session directory").
#pragma once

namespace gprof::format {

inline constexpr char kSessionMetaFile[] = "session.json";  // session_json.h's keys
inline constexpr char kKernelFile[] = "kernel.gpr";         // the kernel recorder's records
inline constexpr char kInjectFilePrefix[] = "inject-";      // inject-<pid>.gpr: a process's calls
inline constexpr char kRecordingFileSuffix[] = ".gpr";
inline constexpr int kSessionMetaVersion = 1;  // session.json's "version" that this build writes

}  // namespace gprof::format
