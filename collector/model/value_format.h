// How the collector writes a value, at every stage: durations, offsets into the session, sizes,
// counts, shares, addresses, and text cut to a length.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// "850 ns", "12.5 us", "39.8 ms", "1.234 s".
std::string FormatDuration(uint64_t ns);
// Time since the session started: "+0.210 s".
std::string FormatOffset(const Session& session, uint64_t time_ns);
std::string FormatHex(uint64_t value);
// The first moment of the session, for offsets: gprof-run's start, or the earliest event.
uint64_t SessionOrigin(const Session& session);
// At most the first `max_bytes` of `text`, cut before a UTF-8 character, never inside one.
std::string Shortened(std::string_view text, size_t max_bytes);
// A command line as one text, an argument with a space in quotes; past `max_bytes` cut short with
// its length said: "python3 train.py xxx... (1,212,000 bytes, 12,002 arguments)".
std::string CommandLineText(const std::vector<std::string>& command, size_t max_bytes);
// `text` up to `max_bytes`, past that cut with its length said: "...xxx... (1,212,000 bytes)".
std::string ShortenedWithLength(std::string_view text, size_t max_bytes);
// "1,234,567".
std::string WithThousands(uint64_t value);
// "73.4 MiB", "512 B".
std::string FormatBytes(uint64_t bytes);
// "100%" only when `part` is all of `whole`, "<1%" when it is a sliver of it.
std::string FormatShare(uint64_t part, uint64_t whole);

}  // namespace gprof::collector
