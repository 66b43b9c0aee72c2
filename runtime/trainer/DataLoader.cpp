//===- DataLoader.cpp - token windows from a memory-mapped file -----------===//

#include "runtime/trainer/DataLoader.h"

#include "runtime/exec/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mtrt {

TokenFile::TokenFile(const std::string &path, int64_t seq_len, int64_t vocab)
    : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open token file ", path, " (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat token file ", path, " (", std::strerror(err), ")");
  }
  const int64_t bytes = st.st_size;
  if (bytes % 4) {
    ::close(fd);
    fail("token file ", path, " has ", bytes,
         " bytes, not a multiple of 4 (uint32 ids)");
  }
  count_ = bytes / 4;
  if (count_ < seq_len + 1) {
    ::close(fd);
    fail("token file ", path, " holds ", count_, " tokens; --seq-len ",
         seq_len, " needs at least ", seq_len + 1);
  }
  map_bytes_ = size_t(bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("cannot map token file ", path, " (", std::strerror(err), ")");
  }
  ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
  tokens_ = static_cast<const uint32_t *>(map_);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "token files are little-endian; add a byte swap for this host"
#endif
  // One scan at startup, so a bad id fails now with its offset, not as an
  // out-of-range read in the middle of training.
  const uint32_t limit = static_cast<uint32_t>(vocab);
  for (int64_t i = 0; i < count_; ++i)
    if (tokens_[i] >= limit)
      fail("token id ", tokens_[i], " >= vocab ", vocab, " (", path,
           ", byte offset ", 4 * i, ")");
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

TokenFile::~TokenFile() {
  if (map_)
    ::munmap(map_, map_bytes_);
}

DataLoader::DataLoader(const std::string &path, const BatchShape &shape,
                       bool prefetch)
    : tokens_(path, shape.seq_len, shape.vocab), shape_(shape),
      windows_((tokens_.size() - 1) / shape.seq_len), prefetch_(prefetch) {
  if (prefetch_) {
    ahead_.resize(size_t(batch_elems()));
    worker_ = std::thread([this] { prefetch_loop(); });
  }
}

DataLoader::~DataLoader() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
}

int64_t DataLoader::window(int64_t t, int64_t a, int64_t mb, int64_t r) const {
  const int64_t B = shape_.batch, M = shape_.micro_batches;
  // Reduce each factor first: t*A*M*B may overflow int64 for huge runs.
  const int64_t n = windows_;
  auto mulmod = [n](int64_t x, int64_t y) {
    return int64_t((unsigned __int128)(x % n) * (unsigned __int128)(y % n) %
                   (unsigned __int128)n);
  };
  int64_t micro_step = (mulmod(t, shape_.grad_accum) + a) % n;
  return (mulmod(micro_step, M * B % n) + (mb * B + r) % n) % n;
}

void DataLoader::gather(int64_t step, int micro, int32_t *batch) const {
  const int64_t B = shape_.batch, S = shape_.seq_len;
  for (int64_t mb = 0; mb < shape_.micro_batches; ++mb) {
    int32_t *ids = batch + mb * 2 * B * S;
    int32_t *targets = ids + B * S;
    for (int64_t r = 0; r < B; ++r) {
      const uint32_t *w = tokens_.data() + window(step, micro, mb, r) * S;
      for (int64_t i = 0; i < S; ++i) {
        ids[r * S + i] = static_cast<int32_t>(w[i]);
        targets[r * S + i] = static_cast<int32_t>(w[i + 1]);
      }
    }
  }
}

void DataLoader::fill(int64_t step, int micro, int32_t *batch) {
  if (!prefetch_) {
    gather(step, micro, batch);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !wanted_ || ready_; });
    if (ready_ && ahead_step_ == step && ahead_micro_ == micro)
      std::memcpy(batch, ahead_.data(), ahead_.size() * sizeof(int32_t));
    else
      gather(step, micro, batch);
    // The next micro-step, in order: what a training loop asks for next.
    ahead_micro_ = micro + 1;
    ahead_step_ = step;
    if (ahead_micro_ == shape_.grad_accum) {
      ahead_micro_ = 0;
      ++ahead_step_;
    }
    wanted_ = true;
    ready_ = false;
  }
  cv_.notify_all();
}

void DataLoader::prefetch_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (wanted_ && !ready_); });
    if (stop_)
      return;
    int64_t step = ahead_step_;
    int micro = ahead_micro_;
    lock.unlock();
    gather(step, micro, ahead_.data());
    lock.lock();
    ready_ = true;
    cv_.notify_all();
  }
}

} // namespace mtrt
