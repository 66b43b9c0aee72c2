//===- Trace.cpp - a Chrome-trace timeline of the streams -----------------===//

#include "runtime/exec/Trace.h"

#include "runtime/exec/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mtrt {

namespace {
void put_json_string(std::string &out, const char *s) {
  out += '"';
  for (; *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  out += '"';
}
} // namespace

Trace::Trace(size_t max_events)
    : origin_(std::chrono::steady_clock::now()), max_events_(max_events) {}

double Trace::now_us() const {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - origin_)
      .count();
}

void Trace::add(int tid, const char *name, double start_us, double end_us) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back({name, tid, start_us, end_us});
}

void Trace::name_row(int tid, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  rows_.emplace_back(tid, std::move(name));
}

size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

size_t Trace::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void Trace::write(const std::string &path) const {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  std::lock_guard<std::mutex> lock(mu_);
  bool first = true;
  char buf[160];
  for (const auto &row : rows_) {
    out += first ? "" : ",\n";
    first = false;
    std::snprintf(buf, sizeof buf,
                  "{\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"name\":\"thread_name\","
                  "\"args\":{\"name\":",
                  row.first);
    out += buf;
    put_json_string(out, row.second.c_str());
    out += "}}";
  }
  for (const Event &e : events_) {
    out += first ? "" : ",\n";
    first = false;
    out += "{\"name\":";
    put_json_string(out, e.name.c_str());
    std::snprintf(buf, sizeof buf,
                  ",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                  e.tid, e.start_us, e.end_us - e.start_us);
    out += buf;
  }
  out += "\n]";
  if (dropped_) {
    std::snprintf(buf, sizeof buf,
                  ",\"otherData\":{\"dropped_events\":\"%zu\"}", dropped_);
    out += buf;
  }
  out += "}\n";

  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    fail("cannot write the trace (", tmp, ": ", std::strerror(errno), ")");
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot write the trace (", path, ": ", std::strerror(errno), ")");
  }
}

} // namespace mtrt
