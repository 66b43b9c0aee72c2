//===- AtomicFile.h - files that appear whole or not at all ------*- C++ -*-===//
//
// Every output the trainer promises (checkpoints, --dump-grads, --export,
// --log-jsonl) is written under a temporary name, fsynced, and renamed over
// the final name, so a crash at any point leaves either the previous file or
// the complete new one, never a partial one.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_ATOMICFILE_H
#define MEGATRAIN_RUNTIME_TRAINER_ATOMICFILE_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace mtrt {

class AtomicFile {
public:
  /// Opens `path` + ".tmp" for writing; throws Error naming the file.
  explicit AtomicFile(std::string path);
  /// Removes the temporary file unless commit() ran.
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  void write(const void *data, size_t bytes);
  void write(const std::string &s) { write(s.data(), s.size()); }
  /// Pushes what was written to the temporary file, visible under its
  /// temporary name (for logs read while training).
  void flush();
  /// fsync, close, rename over the final name, fsync the directory.
  void commit();
  const std::string &temp_path() const { return temp_; }

private:
  void drain();
  void write_through(const char *data, size_t bytes);
  std::string path_, temp_;
  int fd_ = -1;
  std::string buffer_;
};

/// fsync of a directory, so a rename in it is durable; throws Error.
void sync_directory(const std::string &dir);
/// The directory part of a path ("." when there is none).
std::string parent_directory(const std::string &path);
/// The whole file; throws Error naming it.
std::string read_whole_file(const std::string &path);
bool file_exists(const std::string &path);

/// A 64-bit checksum over a byte stream (not cryptographic): corruption of a
/// checkpoint shows up as a mismatch with the manifest.
class Checksum {
public:
  void update(const void *data, size_t bytes);
  uint64_t digest() const;
  static std::string hex(uint64_t v);

private:
  void word(uint64_t w);
  uint64_t h_ = 0x9e3779b97f4a7c15ull;
  uint64_t count_ = 0;
  unsigned char tail_[8];
  size_t tail_len_ = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_ATOMICFILE_H
