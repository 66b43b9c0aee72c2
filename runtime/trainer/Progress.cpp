//===- Progress.cpp - what a person watching the run sees -----------------===//

#include "runtime/trainer/Progress.h"

#include <cmath>
#include <string>

namespace mtrt {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  long long s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", s);
  return buf;
}

namespace {
std::string rate(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", tokens_per_s / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}
} // namespace

Progress::Progress(int64_t first_step, int64_t total_steps, bool tty,
                   std::FILE *out)
    : first_(first_step), total_(total_steps), tty_(tty), out_(out) {}

void Progress::step(const StepRecord &r) {
  elapsed_ += r.seconds;
  const int64_t done = r.step + 1 - first_;
  const int64_t left = total_ - (r.step + 1);
  const double eta = done > 0 ? elapsed_ / double(done) * double(left) : 0;
  if (!tty_) {
    std::fprintf(out_,
                 "step %lld/%lld loss %.6f lr %.3e grad_norm %.3e "
                 "tokens/s %s\n",
                 static_cast<long long>(r.step + 1),
                 static_cast<long long>(total_), r.loss, r.lr, r.grad_norm,
                 rate(r.tokens_per_s).c_str());
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 24;
  int filled = total_ > 0 ? int(kWidth * double(r.step + 1) / double(total_))
                          : kWidth;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_,
               "\r\033[K[%s] step %lld/%lld  loss %.4f  %s tok/s  ETA %s",
               bar.c_str(), static_cast<long long>(r.step + 1),
               static_cast<long long>(total_), r.loss,
               rate(r.tokens_per_s).c_str(), format_duration(eta).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void Progress::finish() {
  if (tty_ && drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  drawn_ = false;
}

} // namespace mtrt
