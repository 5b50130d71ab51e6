// The trace's output file: where the packet writer (packet_writer.h) encodes its packets, and what
// WritePerfettoTrace (perfetto_writer.cc) opens and closes.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "collector/writers/output_file.h"
#include "collector/writers/perfetto/perfetto_fields.h"
#include "collector/writers/perfetto/proto_encoder.h"
#include "inject/shared/status.h"

namespace gprof::collector::perfetto {

// The output file. Packets are encoded into a buffer that goes to the file whenever it passes
// kFlushBytes, so memory stays flat however long the session.
class TraceFile {
 public:
  TraceFile(int dir_fd, std::string name, std::string path)
      : dir_fd_(dir_fd), name_(std::move(name)), path_(std::move(path)) {}

  Status Open() {
    auto file = CreateOutputFile(dir_fd_, name_, path_);
    if (!file.ok())
      return Status::Error(file.status().code(),
                           "cannot write Perfetto trace " + file.status().message());
    file_ = std::move(*file);
    return {};
  }

  // Appends one TracePacket; `fill` writes its fields.
  template <typename Fill>
  void AppendPacket(Fill&& fill) {
    {
      ProtoMessage<TraceField> trace{buffer_};
      PacketBuilder packet{trace, TraceField::kPacket};
      fill(packet);
    }
    PacketDone();
  }

  // For a writer that encodes a packet straight into the buffer; PacketDone() after each.
  ProtoBuffer& buffer() { return buffer_; }
  void PacketDone() {
    if (buffer_.size() >= kFlushBytes) Flush();
  }

  Status Close() {
    Flush();
    FILE* file = file_.release();
    if (std::fclose(file) != 0 && write_errno_ == 0) write_errno_ = errno;
    if (write_errno_ != 0) return Failure(write_errno_);
    return {};
  }

 private:
  static constexpr size_t kFlushBytes = size_t{1} << 20;

  void Flush() {
    if (write_errno_ == 0 &&
        std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size()) {
      write_errno_ = errno != 0 ? errno : EIO;
    }
    buffer_.clear();
  }

  Status Failure(int error) const {
    return Status::FromErrno(error,
                             "cannot write Perfetto trace " + path_ + ": " + std::strerror(error));
  }

  int dir_fd_;
  std::string name_;
  std::string path_;
  OutputFile file_{nullptr, &std::fclose};
  ProtoBuffer buffer_;
  int write_errno_ = 0;  // the first write error; later packets are encoded but not written
};

}  // namespace gprof::collector::perfetto
