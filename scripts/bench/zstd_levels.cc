// bench_zstd_levels: how much CPU each zstd level costs the session writers, on recorded sessions.
//
// usage: bench_zstd_levels [--levels 1,-1,-2,-3] [--rounds 9] FILE.gpr...
//
// The records of the files are regrouped into 1 MiB chunks, as the writers stage them
// (inject/session_writer.cc, bpf/ring_records.cc), and each round compresses every chunk once
// at each level, the levels interleaved (A B C A B C ...) so that all see the same machine load.
// CPU time is the thread's own (CLOCK_THREAD_CPUTIME_ID). Printed per level: MB of records per CPU
// second and the CPU time relative to the first level (median [min-max] of the per-round ratios),
// and the bytes written relative to the first level.
#include <zstd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "collector/session/chunk_reader.h"

namespace {

constexpr size_t kChunkBytes = 1u << 20;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

struct Spread {
  double median, min, max;
};

Spread SpreadOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[values.size() / 2], values.front(), values.back()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU and bytes of each zstd level on recorded session files"};
  std::vector<int> levels = {1, -1, -2, -3};
  int rounds = 9;
  std::vector<std::string> files;
  app.add_option("--levels", levels, "zstd levels, the first is the reference")->delimiter(',');
  app.add_option("--rounds", rounds, "rounds of all levels")->check(CLI::Range(1, 1000));
  app.add_option("files", files, "session files (.gpr)")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::vector<uint8_t>> chunks(1);
  size_t total = 0;
  for (const std::string& file : files) {
    std::vector<gprof::collector::Diagnostic> diagnostics;
    auto read = gprof::collector::ReadChunkFile(
        file,
        [&](const gprof::collector::RecordView& record) {
          if (chunks.back().size() + record.bytes.size() > kChunkBytes) chunks.emplace_back();
          chunks.back().insert(chunks.back().end(), record.bytes.begin(), record.bytes.end());
          total += record.bytes.size();
        },
        &diagnostics);
    if (!read.ok()) {
      std::fprintf(stderr, "bench_zstd_levels: %s: %s\n", file.c_str(),
                   read.status().message().c_str());
      return 1;
    }
  }
  if (total == 0) {
    std::fprintf(stderr, "bench_zstd_levels: no records in the files\n");
    return 1;
  }

  std::vector<uint8_t> out(ZSTD_compressBound(kChunkBytes));
  std::vector<std::vector<double>> seconds(levels.size());
  std::vector<size_t> bytes(levels.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < levels.size(); ++i) {
      ZSTD_CCtx* context = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, levels[i]);
      ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1);  // as the writers set it
      double start = ThreadCpuSeconds();
      size_t written = 0;
      for (const auto& chunk : chunks) {
        size_t n = ZSTD_compress2(context, out.data(), out.size(), chunk.data(), chunk.size());
        written += ZSTD_isError(n) ? chunk.size() : std::min(n, chunk.size());
      }
      seconds[i].push_back(ThreadCpuSeconds() - start);
      bytes[i] = written;
      ZSTD_freeCCtx(context);
    }
  }

  std::printf("%zu MB of records in %zu chunks, %d rounds\n", total / 1000000, chunks.size(),
              rounds);
  std::printf("level  MB/CPU s median [min-max]   CPU vs level %d   bytes vs level %d\n", levels[0],
              levels[0]);
  for (size_t i = 0; i < levels.size(); ++i) {
    std::vector<double> speed, ratio;
    for (int round = 0; round < rounds; ++round) {
      speed.push_back(double(total) / 1e6 / seconds[i][size_t(round)]);
      ratio.push_back(seconds[i][size_t(round)] / seconds[0][size_t(round)]);
    }
    Spread s = SpreadOf(speed), r = SpreadOf(ratio);
    std::printf("%5d  %6.0f [%4.0f-%4.0f]        %.2f [%.2f-%.2f]   %.2f\n", levels[i], s.median,
                s.min, s.max, r.median, r.min, r.max, double(bytes[i]) / double(bytes[0]));
  }
  return 0;
}
