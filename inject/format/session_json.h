// session.json's schema: every key gprof-run writes (cli/session_directory.cc) and the collector
// reads (collector/session/session_meta.cc), named once so that the writer and the reader cannot
// spell one two ways. Each comment gives the value's JSON type and meaning; times are
// CLOCK_MONOTONIC nanoseconds unless they say otherwise. Keys are only ever added: a reader skips
// what it does not know, and a session of a newer format says so by its "version"
// (session_directory.h, kSessionMetaVersion).
#pragma once

namespace gprof::format::session_json {

// --- the top-level object ---
inline constexpr char kFormat[] = "format";  // string: kFormatName
inline constexpr char kFormatName[] = "gprof-run-session";
inline constexpr char kVersion[] = "version";            // integer: the session format's version
inline constexpr char kToolVersion[] = "tool_version";   // string: gprof-run's version
inline constexpr char kCommand[] = "command";            // array of strings: the command's argv
inline constexpr char kRootPid[] = "root_pid";           // integer: the command's process
inline constexpr char kClock[] = "clock";                // string: kClockName
inline constexpr char kClockName[] = "CLOCK_MONOTONIC";  // the one clock of a session
inline constexpr char kStart[] = "start";                // object: kStart* below
inline constexpr char kEnd[] = "end";                    // object: kEnd* below
inline constexpr char kExit[] = "exit";  // object: kExit* below; empty when the end is unknown
inline constexpr char kFinished[] = "finished";  // bool: gprof-run saw the command end (sessions
                                                 // before it: an end time meant the same)
inline constexpr char kKernelRecording[] = "kernel_recording";  // object: kKernel* below
inline constexpr char kInjectLibrary[] = "inject_library";      // string: libgprof_inject.so's path
inline constexpr char kRecordingStopped[] = "recording_stopped";  // array of kStop* objects
inline constexpr char kCudaMode[] = "cuda_mode";                  // string: gprof-run --cuda
// string: the user's own NVTX_INJECTION64_PATH, which the injected library forwarded every NVTX
// call to (docs/nvtx.md); absent when none was set.
inline constexpr char kNvtxTool[] = "nvtx_tool";
// string: the user's own NCCL_PROFILER_PLUGIN, which the injected library's NCCL plugin loaded and
// forwarded every event to (docs/distributed.md); absent when none was set.
inline constexpr char kNcclPlugin[] = "nccl_plugin";
inline constexpr char kWindow[] = "window";     // object, with --delay/--duration: kWindow* below
inline constexpr char kMaxSize[] = "max_size";  // object, with --max-size: kMaxSize* below
inline constexpr char kCapture[] = "capture";   // object, with --capture-range: kCapture* below
inline constexpr char kLost[] = "lost";         // array of kLost* objects; absent when none
inline constexpr char kNestedSessions[] = "nested_sessions";  // array of kNested* objects
inline constexpr char kRunningAtEnd[] = "running_at_end";     // array of kRunning* objects
inline constexpr char kHost[] = "host";                       // object: kHost* below
inline constexpr char kClockAnchors[] = "clock_anchors";      // object: kAnchors* below
inline constexpr char kTimeNamespace[] = "time_namespace";    // object: kTimeNamespace* below
// integer: GPROF_TEST_REALTIME_SKEW_NS, added to every CLOCK_REALTIME reading of gprof-run's (tests
// of the merge simulate hosts whose wall clocks differ); absent when not set.
inline constexpr char kTestRealtimeSkewNs[] = "test_realtime_skew_ns";
// object: kRank* below, the rank the launcher gave gprof-run's environment (which the command
// inherits); absent when it names none.
inline constexpr char kRank[] = "rank";
// object: kAttach* below, when gprof-run -p recorded running processes instead of a command it
// started; absent for a launched command.
inline constexpr char kAttach[] = "attach";

// "attach": gprof-run -p PID[,PID...].
inline constexpr char kAttachPids[] = "pids";            // array of integers: the processes given
inline constexpr char kAttachProcesses[] = "processes";  // integer: with their descendants then
inline constexpr char kAttachEnded[] =
    "ended";  // string: "duration", "signal", "exited", "max_size"

// "host": the machine, to tell sessions of one boot (one kernel clock) from those of others.
inline constexpr char kHostName[] = "name";       // string: gethostname()
inline constexpr char kHostBootId[] = "boot_id";  // string: /proc/sys/kernel/random/boot_id;
                                                  // empty: unreadable

// "clock_anchors": "start" and "end", each a kAnchor* object: CLOCK_REALTIME and the kernel's
// CLOCK_MONOTONIC (the recording clock; a time namespace's offset taken off) read tightly
// bracketed, and CLOCK_BOOTTIME (the kernel's) inside the same bracket.
inline constexpr char kAnchorsStart[] = "start";
inline constexpr char kAnchorsEnd[] = "end";                      // absent while the command runs
inline constexpr char kAnchorMonotonicNs[] = "monotonic_ns";      // integer: the bracket's middle
inline constexpr char kAnchorRealtimeNs[] = "realtime_ns";        // integer: ns since the epoch
inline constexpr char kAnchorBoottimeNs[] = "boottime_ns";        // integer
inline constexpr char kAnchorUncertaintyNs[] = "uncertainty_ns";  // integer: the bracket's width
// integer: how far CLOCK_REALTIME itself may be from the true time, as the kernel bounds it
// (adjtimex's maxerror, which NTP keeps; 16 s when unsynchronised). Absent in older sessions.
inline constexpr char kAnchorRealtimeMaxErrorNs[] = "realtime_max_error_ns";

// "time_namespace": gprof-run's own (`unshare -T ... gprof-run`), whose offsets it took off
// every time it wrote; both 0 outside one.
inline constexpr char kTimeNamespaceMonotonicNs[] = "monotonic_offset_ns";  // integer
inline constexpr char kTimeNamespaceBoottimeNs[] = "boottime_offset_ns";    // integer

// "rank": read from the variables launchers set (format/rank_variables.h); each key absent when
// none of its variables is set to a number.
inline constexpr char kRankRank[] = "rank";             // integer: RANK, SLURM_PROCID...
inline constexpr char kRankLocalRank[] = "local_rank";  // integer: LOCAL_RANK, SLURM_LOCALID...
inline constexpr char kRankWorldSize[] = "world_size";  // integer: WORLD_SIZE, SLURM_NTASKS...
inline constexpr char kRankVariable[] = "variable";     // string: the variable the rank came from

// "start": when the recording started, on three clocks (the same moment).
inline constexpr char kStartMonotonicNs[] = "monotonic_ns";  // integer
inline constexpr char kStartRealtimeNs[] = "realtime_ns";    // integer: wall clock, for dates
inline constexpr char kStartBoottimeNs[] = "boottime_ns";    // integer: CLOCK_BOOTTIME
// "end"
inline constexpr char kEndMonotonicNs[] = "monotonic_ns";  // integer; 0: still running
// "exit": the command's wait status, one of the two.
inline constexpr char kExitCode[] = "code";      // integer 0-255: it exited
inline constexpr char kExitSignal[] = "signal";  // integer: the signal that killed it

// "kernel_recording"
inline constexpr char kKernelEnabled[] = "enabled";          // bool: the BPF recorder ran
inline constexpr char kKernelNote[] = "note";                // string: why not, or what it left out
inline constexpr char kKernelStackMinNs[] = "stack_min_ns";  // integer: off-CPU stacks only for
                                                             // intervals this long (0: all)

// "window": gprof-run --delay, --duration.
inline constexpr char kWindowDelayS[] = "delay_s";              // number: seconds
inline constexpr char kWindowDurationS[] = "duration_s";        // number: seconds; null: no end
inline constexpr char kWindowStartNs[] = "start_monotonic_ns";  // integer
inline constexpr char kWindowEndNs[] = "end_monotonic_ns";      // integer; 0: no end

// "capture": gprof-run --capture-range (inject/shared/capture_windows.h).
inline constexpr char kCaptureRange[] = "range";      // string: "cudaProfilerApi", "manual"
inline constexpr char kCaptureControl[] = "control";  // string: the control's handle, for
                                                      // `gprof-run start|stop DIR` while it runs
inline constexpr char kCaptureWindows[] = "windows";  // array of the windows below, in order
inline constexpr char kCaptureRefusedOpens[] = "refused_opens";  // integer: past the windows' room
// An element of "windows".
inline constexpr char kCaptureStartNs[] = "start_monotonic_ns";  // integer
inline constexpr char kCaptureEndNs[] = "end_monotonic_ns";      // integer; 0: still open
inline constexpr char kCaptureOpenedBy[] = "opened_by";          // string: "cudaProfilerStart",
                                                                 // "gprof-run start", ...
inline constexpr char kCaptureClosedBy[] = "closed_by";          // string; "" while open
inline constexpr char kCaptureOpenPid[] = "open_pid";            // integer; 0: gprof-run
inline constexpr char kCaptureClosePid[] = "close_pid";          // integer; 0: gprof-run
// "flight" in "capture", with range "flight": gprof-run --flight-recorder (cli/flight_recorder.h).
inline constexpr char kFlight[] = "flight";                     // object: the keys below
inline constexpr char kFlightKeepNs[] = "keep_ns";              // integer: --flight-recorder SEC
inline constexpr char kFlightFreezeNs[] = "freeze_ns";          // integer; 0: no freeze trigger
inline constexpr char kFlightHangNs[] = "hang_ns";              // integer; 0: no hang trigger
inline constexpr char kFlightEndedBy[] = "ended_by";            // "freeze", "hang", "stop", "end"
inline constexpr char kFlightFiredNs[] = "fired_monotonic_ns";  // integer; 0: no trigger fired
inline constexpr char kFlightDurationNs[] = "duration_ns";  // the call's (freeze), silence's (hang)
inline constexpr char kFlightPid[] = "pid";                 // the call's process (freeze); 0: none
inline constexpr char kFlightTid[] = "tid";                 // and thread
inline constexpr char kFlightApiId[] = "api_id";            // the call's, in that process's names
// With "freeze": "call" (a call that took MS returned), "running" (a call still running after
// MS), "threads" (threads doing CUDA work all blocked for MS: inject/freeze_watch.h).
inline constexpr char kFlightFreezeKind[] = "freeze_kind";
inline constexpr char kFlightThreads[] = "threads";  // "threads": how many were blocked together

// "max_size": gprof-run --max-size, the size budget's counters at the end.
inline constexpr char kMaxSizeLimitBytes[] = "limit_bytes";               // integer
inline constexpr char kMaxSizeUsedBytes[] = "used_bytes";                 // integer
inline constexpr char kMaxSizeStoppedAtNs[] = "stopped_at_monotonic_ns";  // integer; 0: never
inline constexpr char kMaxSizeRefusedRecords[] = "refused_records";       // integer
inline constexpr char kMaxSizeRefusedBytes[] = "refused_bytes";           // integer: uncompressed

// An element of "recording_stopped": a stop that no recording file holds (kernel.gpr's, a
// writer's with no room for its stop record, the whole session's when the disk had no room).
inline constexpr char kStopFile[] = "file";       // string: the session file's name
inline constexpr char kStopTimeNs[] = "time_ns";  // integer
inline constexpr char kStopCause[] = "cause";     // string: "write_failed", "disk_room" ...
inline constexpr char kStopReason[] = "reason";   // string: the cause in words

// An element of "lost": what gprof-run counted as lost that no recording file says (the CUDA
// calls still in the memory of a process killed by SIGKILL).
inline constexpr char kLostWhat[] = "what";    // string
inline constexpr char kLostCount[] = "count";  // integer; null: unknown

// An element of "nested_sessions": a gprof-run started inside the command.
inline constexpr char kNestedPid[] = "pid";              // integer: that gprof-run's
inline constexpr char kNestedDirectory[] = "directory";  // string: its session directory
inline constexpr char kNestedCalls[] = "calls";  // integer: CUDA calls it holds; null: unknown

// An element of "running_at_end": a process of the tree still running when the recording ended.
inline constexpr char kRunningPid[] = "pid";                     // integer
inline constexpr char kRunningStillWriting[] = "still_writing";  // bool: its file was still open

}  // namespace gprof::format::session_json
