#include "collector/writers/words/lines.h"

#include <algorithm>

#include "collector/symbols/user_symbols.h"
#include "collector/writers/words/names.h"

namespace gprof::collector {

std::vector<StackFrame> ResolveStack(const Session& session, uint32_t pid,
                                     const std::vector<uint64_t>& ips,
                                     const std::vector<std::string>* symbols, uint64_t time_ns) {
  std::vector<StackFrame> frames;
  frames.reserve(ips.size());
  auto process = session.processes.find(pid);
  for (size_t i = 0; i < ips.size(); ++i) {
    StackFrame frame;
    frame.address = ips[i];
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    UserLocation location = LocateUserAddress(session, pid, ips[i], time_ns, use);
    frame.module = location.module;
    const Mapping* mapping = nullptr;
    const MapsSnapshot* maps = nullptr;
    if (process != session.processes.end()) {
      maps = process->second.MapsHolding(ips[i], time_ns);
      if (maps != nullptr) mapping = maps->Find(ips[i]);
    }
    // Junk only where the maps say so: a process whose maps were not recorded, or a frame the
    // injected library's unwinder named, is taken as it is.
    const bool named = symbols != nullptr && i < symbols->size() && !(*symbols)[i].empty();
    const bool maps_known = process != session.processes.end() && !process->second.maps.empty();
    frame.junk = maps_known && !named &&
                 (mapping == nullptr || mapping->perms.size() < 3 || mapping->perms[2] != 'x');
    if (mapping != nullptr && !mapping->path.empty()) {
      const std::string& exe = process->second.exe;
      // The executable: the process's own, else the first file its maps hold.
      const Mapping* first = nullptr;
      for (const Mapping& m : maps->mappings) {
        if (m.path.starts_with('/')) {
          first = &m;
          break;
        }
      }
      frame.program =
          exe.empty() ? (first != nullptr && first->path == mapping->path) : mapping->path == exe;
    }
    if (symbols != nullptr && i < symbols->size() && !(*symbols)[i].empty()) {
      frame.name = (*symbols)[i];
    } else {
      frame.name = FrameText(location, ips[i]);
    }
    frame.source = location.source;
    frames.push_back(std::move(frame));
  }
  return frames;
}

namespace {

std::string FrameLine(const StackFrame& frame) {
  std::string line = ShortFrame(frame.name);
  // A frame named by its module already says where it is.
  if (!frame.program && !frame.module.empty() && !frame.name.starts_with(frame.module))
    line += " in " + frame.module;
  if (!frame.source.empty()) line += "  at " + frame.source;
  return line;
}

std::string FoldLine(size_t count, const std::vector<std::string>& modules) {
  std::string text = "... " + std::to_string(count) + (count == 1 ? " frame in " : " frames in ");
  for (size_t i = 0; i < modules.size(); ++i) text += (i == 0 ? "" : ", ") + modules[i];
  return text;
}

}  // namespace

std::vector<std::string> FoldedFrameLines(const std::vector<StackFrame>& all) {
  std::vector<const StackFrame*> frames;
  for (const StackFrame& frame : all) {
    if (!frame.junk) frames.push_back(&frame);
  }
  size_t outermost_program = frames.size();
  for (size_t i = frames.size(); i-- > 0;) {
    if (frames[i]->program) {
      outermost_program = i;
      break;
    }
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i < frames.size();) {
    if (outermost_program < frames.size() && i > outermost_program && frames.size() - i > 1) {
      // Past the program's outermost frame: how the thread started, nothing of the program's.
      std::vector<std::string> modules;
      for (size_t j = i; j < frames.size(); ++j) {
        const std::string& module = frames[j]->module.empty() ? "unknown code" : frames[j]->module;
        if (std::find(modules.begin(), modules.end(), module) == modules.end())
          modules.push_back(module);
      }
      lines.push_back(FoldLine(frames.size() - i, modules));
      break;
    }
    if (frames[i]->program) {
      lines.push_back(FrameLine(*frames[i++]));
      continue;
    }
    size_t end = i + 1;
    while (end < frames.size() && !frames[end]->program && frames[end]->module == frames[i]->module)
      ++end;
    // A run of three or more inside one library: where the caller entered it is what it says.
    if (end - i >= 3) {
      lines.push_back(
          FoldLine(end - i - 1, {frames[i]->module.empty() ? "unknown code" : frames[i]->module}));
      lines.push_back(FrameLine(*frames[end - 1]));
    } else {
      for (size_t j = i; j < end; ++j) lines.push_back(FrameLine(*frames[j]));
    }
    i = end;
  }
  return CollapseFrameRepeats(lines);
}

namespace {

// Columns a line takes: its UTF-8 characters.
size_t Columns(std::string_view text) {
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; });
}

// The byte index where `text`'s first `columns` characters end.
size_t ByteOfColumn(std::string_view text, size_t columns) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80 && seen++ == columns) return i;
  }
  return text.size();
}

void FitLine(std::string_view line, size_t width, std::string& out) {
  size_t indent = line.find_first_not_of(' ');
  if (indent == std::string_view::npos) indent = 0;
  std::string continuation(std::min(indent + 4, width / 2), ' ');
  std::string_view rest = line;
  bool first = true;
  while (true) {
    std::string prefix = first ? "" : continuation;
    if (Columns(prefix) + Columns(rest) <= width) {
      out += prefix;
      out += rest;
      out += '\n';
      return;
    }
    size_t room = ByteOfColumn(rest, width - Columns(prefix));
    std::string_view head = rest.substr(0, room);
    size_t skip = first ? indent : 0;
    size_t cut = std::string_view::npos;
    for (std::string_view mark : {"; ", ", ", " "}) {
      size_t at = head.rfind(mark);
      if (at != std::string_view::npos && at > skip) {
        cut = mark == " " ? at : at + 1;  // the line keeps the mark's "," or ";"
        break;
      }
    }
    size_t next = 0;
    if (cut == std::string_view::npos) {
      cut = room;  // one word longer than the line
      next = room;
    } else {
      next = cut;
      while (next < rest.size() && rest[next] == ' ') ++next;
    }
    out += prefix;
    out += rest.substr(0, cut);
    out += '\n';
    rest = rest.substr(next);
    first = false;
    if (rest.empty()) return;
  }
}

}  // namespace

std::string FitLines(std::string_view text, size_t width) {
  std::string out;
  out.reserve(text.size() + text.size() / 32);
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    FitLine(line, width, out);
    if (end == std::string_view::npos) {
      out.pop_back();  // the text had no newline at its end
      break;
    }
    text = text.substr(end + 1);
  }
  return out;
}

}  // namespace gprof::collector
