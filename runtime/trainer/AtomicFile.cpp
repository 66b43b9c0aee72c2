//===- AtomicFile.cpp - files that appear whole or not at all -------------===//

#include "runtime/trainer/AtomicFile.h"

#include "runtime/exec/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mtrt {

namespace {
constexpr size_t kBufferBytes = size_t(1) << 20;
}

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_(path_ + ".tmp") {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("cannot create ", temp_, " (", std::strerror(errno), ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFile::drain() {
  write_through(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write_through(const char *p, size_t left) {
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("cannot write ", temp_, " (", std::strerror(errno), ")");
    p += n;
    left -= size_t(n);
  }
}

void AtomicFile::write(const void *data, size_t bytes) {
  if (buffer_.size() + bytes <= kBufferBytes) {
    buffer_.append(static_cast<const char *>(data), bytes);
    return;
  }
  drain();
  if (bytes < kBufferBytes) {
    buffer_.append(static_cast<const char *>(data), bytes);
    return;
  }
  write_through(static_cast<const char *>(data), bytes); // large: no copy
}

void AtomicFile::flush() { drain(); }

void AtomicFile::commit() {
  drain();
  if (::fsync(fd_) != 0)
    fail("cannot sync ", temp_, " (", std::strerror(errno), ")");
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temp_.c_str());
    fail("cannot write ", temp_, " (", std::strerror(errno), ")");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_.c_str());
    fail("cannot rename ", temp_, " to ", path_, " (", std::strerror(err),
         ")");
  }
  sync_directory(parent_directory(path_));
}

void sync_directory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open directory ", dir, " (", std::strerror(errno), ")");
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) // some filesystems cannot sync directories
    fail("cannot sync directory ", dir, " (", std::strerror(err), ")");
}

std::string parent_directory(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

std::string read_whole_file(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    fail("cannot open ", path, " (", std::strerror(errno), ")");
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad)
    fail("cannot read ", path);
  return out;
}

bool file_exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// ---- Checksum --------------------------------------------------------------

namespace {
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr uint64_t kP1 = 0x9e3779b185ebca87ull;
constexpr uint64_t kP2 = 0xc2b2ae3d27d4eb4full;
} // namespace

void Checksum::word(uint64_t w) {
  h_ = rotl(h_ ^ (w * kP2), 31) * kP1;
}

void Checksum::update(const void *data, size_t bytes) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  count_ += bytes;
  while (tail_len_ > 0 && tail_len_ < 8 && bytes > 0) {
    tail_[tail_len_++] = *p++;
    --bytes;
  }
  if (tail_len_ == 8) {
    uint64_t w;
    std::memcpy(&w, tail_, 8);
    word(w);
    tail_len_ = 0;
  }
  for (; bytes >= 8; bytes -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    word(w);
  }
  while (bytes-- > 0)
    tail_[tail_len_++] = *p++;
}

uint64_t Checksum::digest() const {
  uint64_t h = h_;
  uint64_t w = 0;
  std::memcpy(&w, tail_, tail_len_);
  h = rotl(h ^ (w * kP2), 31) * kP1;
  h ^= count_;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

std::string Checksum::hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

} // namespace mtrt
