//===- DataLoaderTest.cpp - token windows and token file errors -----------===//

#include "TempDir.h"

#include "runtime/exec/Error.h"
#include "runtime/trainer/DataLoader.h"

#include <gtest/gtest.h>

using namespace mtrt;
using mtrt::testing::TempDir;

namespace {

std::string write_tokens(const TempDir &dir, const std::vector<uint32_t> &t,
                         const char *name = "tokens.u32") {
  std::string path = dir / name;
  mtrt::testing::write_bytes(path, t.data(), t.size() * 4);
  return path;
}

std::string error_of(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(DataLoaderTest, WindowsFollowTheOracle) {
  TempDir dir;
  std::vector<uint32_t> tokens(103);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint32_t(i % 50);
  BatchShape s;
  s.batch = 2;
  s.seq_len = 4;
  s.micro_batches = 3;
  s.grad_accum = 2;
  s.vocab = 50;
  for (bool prefetch : {false, true}) {
    DataLoader data(write_tokens(dir, tokens), s, prefetch);
    const int64_t n = (103 - 1) / 4; // 25 windows
    ASSERT_EQ(data.windows(), n);
    // The oracle's batch is the step's M*B rows: micro-step a of step t,
    // row j reads window ((t*A + a)*(M*B) + j) mod n, j = mb*B + r.
    std::vector<int32_t> batch(size_t(data.batch_elems()));
    for (int64_t t = 0; t < 6; ++t)
      for (int a = 0; a < 2; ++a) {
        data.fill(t, a, batch.data());
        for (int64_t mb = 0; mb < 3; ++mb)
          for (int64_t r = 0; r < 2; ++r) {
            int64_t j = mb * 2 + r;
            int64_t w = ((t * 2 + a) * 6 + j) % n;
            ASSERT_EQ(data.window(t, a, mb, r), w);
            const int32_t *ids = batch.data() + mb * 2 * 8 + r * 4;
            const int32_t *targets = ids + 8;
            for (int64_t i = 0; i < 4; ++i) {
              ASSERT_EQ(ids[i], int32_t(tokens[size_t(w * 4 + i)]));
              ASSERT_EQ(targets[i], int32_t(tokens[size_t(w * 4 + i + 1)]));
            }
          }
      }
    EXPECT_EQ(data.position(3), (3 * 2 * 6) % n);
  }
}

TEST(DataLoaderTest, OutOfOrderRequestsAreStillRight) {
  TempDir dir;
  std::vector<uint32_t> tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint32_t(i);
  BatchShape s;
  s.seq_len = 5;
  s.vocab = 100;
  DataLoader data(write_tokens(dir, tokens), s);
  std::vector<int32_t> batch(10);
  for (int64_t t : {5, 2, 2, 9, 0}) { // prefetch guesses t+1: miss, hit...
    data.fill(t, 0, batch.data());
    EXPECT_EQ(batch[0], int32_t((t % 8) * 5)) << t;
  }
}

TEST(DataLoaderTest, BadFilesAreErrorsNamingTheFile) {
  TempDir dir;
  BatchShape s;
  s.seq_len = 4;
  s.vocab = 10;
  // Not a multiple of 4 bytes.
  std::string odd = dir / "odd.u32";
  mtrt::testing::write_bytes(odd, "abcdefg", 7);
  std::string e = error_of([&] { DataLoader d(odd, s); });
  EXPECT_EQ(e, "error: token file " + odd +
                   " has 7 bytes, not a multiple of 4 (uint32 ids)");
  // Too short for one window.
  e = error_of([&] { DataLoader d(write_tokens(dir, {1, 2, 3, 4}, "short.u32"), s); });
  EXPECT_EQ(e, "error: token file " + dir / "short.u32" +
                   " holds 4 tokens; --seq-len 4 needs at least 5");
  // An id outside the vocabulary, with its byte offset.
  e = error_of([&] { DataLoader d(write_tokens(dir, {1, 2, 3, 4, 5, 10, 2}, "vocab.u32"), s); });
  EXPECT_EQ(e, "error: token id 10 >= vocab 10 (" + dir / "vocab.u32" +
                   ", byte offset 20)");
  e = error_of([&] { DataLoader d(dir / "nope.u32", s); });
  EXPECT_NE(e.find("cannot open token file " + dir / "nope.u32"),
            std::string::npos);
}

} // namespace
