#include "collector/writers/dump_json.h"

#include <nlohmann/json.hpp>

#include "collector/writers/dump_text.h"
#include "collector/writers/report_html.h"
#include "collector/writers/words/dump_words.h"

namespace gprof::collector {
namespace {

using nlohmann::json;

json Holder(pid_t holder, live::HolderSource source, const std::string& note) {
  if (holder == 0) return nullptr;
  return json{{"id", holder},
              {"is_process", source == live::HolderSource::kFileLock},
              {"from", HolderSourceWords(source)},
              {"inferred", live::Inferred(source)},
              {"note", note.empty() ? json(nullptr) : json(note)}};
}

json HolderUnknown(const std::string& why) {
  return why.empty() ? json(nullptr) : json(HolderUnknownWords(why));
}

json ThreadJson(const live::Snapshot& snapshot, const live::ThreadSnapshot& thread) {
  json python = json::array();
  for (const live::PythonFrameLine& frame : thread.python_stack)
    python.push_back({{"file", frame.file},
                      {"line", frame.line > 0 ? json(frame.line) : json(nullptr)},
                      {"function", frame.function},
                      {"text", PythonFrameText(frame)}});
  json native = {
      {"read", thread.native_stack.ips.empty() ? json(nullptr) : json(StackPathWords(thread))},
      {"stopped_us", (thread.stopped_ns + 500) / 1000},
      {"lines",
       thread.native_stack.ips.empty() ? json::array() : json(NativeStackLines(snapshot, thread))},
      {"cut_short", thread.native_stack.cut_short.empty() ? json(nullptr)
                                                          : json(thread.native_stack.cut_short)}};
  return {{"tid", thread.tid},
          {"tid_in_its_namespace", thread.ns_tid},
          {"pid", thread.pid},
          {"name", thread.name},
          {"state", StateWord(thread.state)},
          {"wait", DescribeWait(thread)},
          {"lock", thread.lock_name.empty() ? json(nullptr) : json(thread.lock_name)},
          {"holder", Holder(thread.holder, thread.holder_source, thread.holder_note)},
          {"holder_unknown", HolderUnknown(thread.holder_unknown)},
          {"exited_during_the_dump", thread.exited},
          {"kernel_stack", thread.kernel_stack},
          {"kernel_stack_unreadable", thread.kernel_stack_unreadable.empty()
                                          ? json(nullptr)
                                          : json(thread.kernel_stack_unreadable)},
          {"native_stack", native},
          {"python_stack", python},
          {"python_stack_cut",
           thread.python_stack_cut.empty() ? json(nullptr) : json(thread.python_stack_cut)}};
}

}  // namespace

std::string DumpJson(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis) {
  json processes = json::array(), threads = json::array();
  for (const live::ProcessSnapshot& process : snapshot.processes) {
    json tids = json::array();
    for (const live::ThreadSnapshot& thread : process.threads) {
      tids.push_back(thread.tid);
      threads.push_back(ThreadJson(snapshot, thread));
    }
    processes.push_back({{"pid", process.pid},
                         {"ppid", process.ppid},
                         {"pid_in_its_namespace", process.ns_pid},
                         {"name", process.name},
                         {"python", process.python.empty() ? json(nullptr) : json(process.python)},
                         {"exited_during_the_dump", process.exited},
                         {"threads", tids}});
  }
  json deadlocks = json::array(), chains = json::array(), groups = json::array();
  for (const live::Deadlock& deadlock : analysis.deadlocks)
    deadlocks.push_back({{"members", deadlock.members}});
  for (const live::WaitChain& chain : analysis.chains)
    chains.push_back({{"waiters", chain.waiters}, {"path", chain.path}});
  for (const live::WaitGroup& group : analysis.groups) {
    json tids = json::array();
    for (const live::ThreadSnapshot* thread : group.threads) tids.push_back(thread->tid);
    groups.push_back(
        {{"wait", DescribeWait(*group.threads.front())},
         {"holder", Holder(group.holder, group.holder_source, group.threads.front()->holder_note)},
         {"holder_unknown",
          group.holder != 0 ? json(nullptr) : HolderUnknown(group.threads.front()->holder_unknown)},
         {"threads", tids}});
  }
  json odd_threads = json::array();
  for (const live::OddThread& odd : analysis.odd_threads)
    odd_threads.push_back({{"process", odd.process},
                           {"tid", odd.thread->tid},
                           {"wait", DescribeWait(*odd.thread)},
                           {"as_in_the_others", odd.usual->tid},
                           {"others", odd.others}});
  json root = {{"format", "gprof-run dump"},
               {"version", 1},
               {"read_ms", static_cast<double>(snapshot.read_ns) / 1e6},
               {"stopped_us", (snapshot.stopped_ns + 500) / 1000},
               {"threads_stopped", snapshot.threads_stopped},
               {"stopped", StoppedWords(snapshot.stopped_ns, snapshot.threads_stopped)},
               {"requested", snapshot.requested},
               {"processes", processes},
               {"threads", threads},
               {"deadlocks", deadlocks},
               {"chains", chains},
               {"groups", groups},
               {"not_where_the_others_are", odd_threads}};
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string DumpHtml(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis) {
  std::string pids;
  for (pid_t pid : snapshot.requested) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gprof-run dump -p " + pids +
         "</title></head>\n<body><pre>\n" + EscapeHtml(DumpText(snapshot, analysis)) +
         "</pre></body></html>\n";
}

}  // namespace gprof::collector
