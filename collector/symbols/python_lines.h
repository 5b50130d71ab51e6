// Line numbers from CPython's line tables, as the interpreter computes them (PyCode_Addr2Line):
// 3.9's co_lnotab, 3.10's co_linetable, and the location table of 3.11 on. Every byte is read
// within the table; a table that ends early or is malformed gives no line rather than a wrong one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace gprof::collector {

// The source line of the instruction at byte `offset` of a code object whose table is
// `linetable` in `format` (gprof_python_line_format) and whose first line is `firstlineno`. A
// negative offset (a frame not started) is on the first line; nullopt where the table gives the
// instruction no line, or does not reach it.
std::optional<int> PythonLine(uint32_t format, std::span<const uint8_t> linetable,
                              int32_t firstlineno, int32_t offset);

}  // namespace gprof::collector
