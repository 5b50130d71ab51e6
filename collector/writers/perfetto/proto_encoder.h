// A protobuf encoder for the Perfetto writer's many small nested messages: one growing byte buffer,
// and a nested message reserves one byte for its length, moved up only in the rare case the
// message reaches 128 bytes. (protozero reserves five and moves every message down when it closes,
// and grows its std::string a byte at a time: most of the trace writer's time went there.)
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace gprof::collector {

enum ProtoWireType : uint32_t { kVarintWire = 0, kFixed64Wire = 1, kLengthDelimitedWire = 2 };

// The bytes written so far. Offsets, not pointers, name positions: the buffer moves as it grows.
class ProtoBuffer {
 public:
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  void clear() { size_ = 0; }

  // Room for `bytes` more; the pointer to write them at (valid until the next Reserve).
  [[gnu::always_inline]] char* Reserve(size_t bytes) {
    if (size_ + bytes > capacity_) [[unlikely]]
      Grow(size_ + bytes);
    return data_.get() + size_;
  }
  void Commit(char* end) { size_ = static_cast<size_t>(end - data_.get()); }
  char* At(size_t offset) { return data_.get() + offset; }
  void Shrink(size_t size) { size_ = size; }

  [[gnu::always_inline]] static char* WriteVarint(char* out, uint64_t value) {
    while (value >= 0x80) {
      *out++ = static_cast<char>(value | 0x80);
      value >>= 7;
    }
    *out++ = static_cast<char>(value);
    return out;
  }

  [[gnu::always_inline]] static char* WriteTag(char* out, uint32_t field, ProtoWireType wire) {
    return WriteVarint(out, (uint64_t{field} << 3) | wire);
  }

  static size_t VarintSize(uint64_t value) {
    size_t size = 1;
    while (value >= 0x80) {
      value >>= 7;
      ++size;
    }
    return size;
  }

  // A nested message's `length` bytes follow the one byte reserved for their length at
  // `length_at`, and the length needs more: moves them up and writes it. Returns the bytes added;
  // the room for them must be there.
  static size_t WidenLength(char* length_at, size_t length) {
    size_t extra = VarintSize(length) - 1;
    std::memmove(length_at + 1 + extra, length_at + 1, length);
    WriteVarint(length_at, length);
    return extra;
  }

 private:
  [[gnu::noinline]] void Grow(size_t needed) {
    size_t capacity = capacity_ == 0 ? size_t{1} << 16 : capacity_;
    while (capacity < needed) capacity *= 2;
    std::unique_ptr<char[]> grown(new char[capacity]);
    if (size_ != 0) std::memcpy(grown.get(), data_.get(), size_);
    data_ = std::move(grown);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Fields written at a pointer into room already reserved (ProtoBuffer::Reserve), with no bounds
// check of their own: for the trace's millions of small packets, whose size is bounded before they
// are written, so that one Reserve covers a whole packet. A nested message reserves one byte for
// its length, moved up in the rare case the message reaches 128 bytes (the room reserved must allow
// 4 more bytes per nested message for that).
class RawFields {
 public:
  explicit RawFields(char* out) : out_(out) {}
  char* end() const { return out_; }

  template <typename Field>
  [[gnu::always_inline]] void AddUint64(Field field, uint64_t value) {
    Tag(static_cast<uint32_t>(field), kVarintWire);
    out_ = ProtoBuffer::WriteVarint(out_, value);
  }
  template <typename Field>
  [[gnu::always_inline]] void AddString(Field field, std::string_view text) {
    Tag(static_cast<uint32_t>(field), kLengthDelimitedWire);
    out_ = ProtoBuffer::WriteVarint(out_, text.size());
    if (!text.empty()) std::memcpy(out_, text.data(), text.size());
    out_ += text.size();
  }

  [[gnu::always_inline]] void AddVarint(uint64_t value) {
    out_ = ProtoBuffer::WriteVarint(out_, value);
  }

  // Up to 8 bytes of fields encoded beforehand, copied as they are: 8 bytes are read from
  // `encoded` and written whatever `size` (in one move; the room reserved must allow it).
  [[gnu::always_inline]] void AddEncoded(const char* encoded, size_t size) {
    std::memcpy(out_, encoded, 8);
    out_ += size;
  }

  // Opens a nested message; Close(the returned position) ends it.
  template <typename Field>
  [[gnu::always_inline]] char* Open(Field field) {
    Tag(static_cast<uint32_t>(field), kLengthDelimitedWire);
    return out_++;
  }
  // Close for a message known to be shorter than 128 bytes.
  [[gnu::always_inline]] void CloseShort(char* length_at) {
    *length_at = static_cast<char>(out_ - length_at - 1);
  }
  [[gnu::always_inline]] void Close(char* length_at) {
    size_t length = static_cast<size_t>(out_ - length_at - 1);
    if (length < 0x80) [[likely]] {
      *length_at = static_cast<char>(length);
      return;
    }
    out_ += ProtoBuffer::WidenLength(length_at, length);
  }

 private:
  [[gnu::always_inline]] void Tag(uint32_t field, ProtoWireType wire) {
    out_ = ProtoBuffer::WriteTag(out_, field, wire);
  }
  char* out_;
};

// One message being written: the fields of enum `Field`. A nested one is opened on its parent
// and closed (its length written) when it goes out of scope; an empty one leaves no trace, not even
// its tag, so a message that may stay empty (new interned strings) costs nothing when it does.
template <typename Field>
class ProtoMessage {
 public:
  // A message whose fields go straight into `buffer`, with no tag or length of its own.
  explicit ProtoMessage(ProtoBuffer& buffer) : buffer_(buffer) {}

  template <typename ParentField>
  ProtoMessage(ProtoMessage<ParentField>& parent, ParentField field)
      : buffer_(parent.buffer()), tag_offset_(buffer_.size()) {
    char* out = buffer_.Reserve(kMaxVarint + 1);
    out = ProtoBuffer::WriteTag(out, static_cast<uint32_t>(field), kLengthDelimitedWire);
    length_offset_ = static_cast<size_t>(out - buffer_.At(0));
    *out++ = 0;  // the length's one reserved byte
    buffer_.Commit(out);
  }

  ProtoMessage(const ProtoMessage&) = delete;
  ProtoMessage& operator=(const ProtoMessage&) = delete;

  ~ProtoMessage() {
    if (length_offset_ == kTopLevel) return;
    size_t length = buffer_.size() - length_offset_ - 1;
    if (length == 0) {
      buffer_.Shrink(tag_offset_);
      return;
    }
    if (length < 0x80) {
      *buffer_.At(length_offset_) = static_cast<char>(length);
      return;
    }
    buffer_.Reserve(ProtoBuffer::VarintSize(length) - 1);
    size_t extra = ProtoBuffer::WidenLength(buffer_.At(length_offset_), length);
    buffer_.Commit(buffer_.At(buffer_.size() + extra));
  }

  ProtoBuffer& buffer() { return buffer_; }

  void AddUint64(Field field, uint64_t value) {
    char* out = buffer_.Reserve(2 * kMaxVarint);
    out = ProtoBuffer::WriteTag(out, static_cast<uint32_t>(field), kVarintWire);
    buffer_.Commit(ProtoBuffer::WriteVarint(out, value));
  }
  void AddUint32(Field field, uint32_t value) { AddUint64(field, value); }
  // int32 and int64 are sign-extended to 64 bits, as the protobuf encoding says.
  void AddInt64(Field field, int64_t value) { AddUint64(field, static_cast<uint64_t>(value)); }
  void AddInt32(Field field, int32_t value) { AddInt64(field, value); }
  void AddEnum(Field field, int32_t value) { AddInt64(field, value); }
  void AddBool(Field field, bool value) { AddUint64(field, value ? 1 : 0); }

  void AddFixed64(Field field, uint64_t value) {
    char* out = buffer_.Reserve(kMaxVarint + 8);
    out = ProtoBuffer::WriteTag(out, static_cast<uint32_t>(field), kFixed64Wire);
    for (int byte = 0; byte < 8; ++byte) *out++ = static_cast<char>(value >> (8 * byte));
    buffer_.Commit(out);
  }

  void AddString(Field field, std::string_view text) {
    char* out = buffer_.Reserve(2 * kMaxVarint + text.size());
    out = ProtoBuffer::WriteTag(out, static_cast<uint32_t>(field), kLengthDelimitedWire);
    out = ProtoBuffer::WriteVarint(out, text.size());
    if (!text.empty()) std::memcpy(out, text.data(), text.size());
    buffer_.Commit(out + text.size());
  }

 private:
  static constexpr size_t kMaxVarint = 10;
  static constexpr size_t kTopLevel = ~size_t{0};

  ProtoBuffer& buffer_;
  size_t tag_offset_ = 0;
  size_t length_offset_ = kTopLevel;
};

}  // namespace gprof::collector
