//===- SafetensorsTest.cpp - round trips and corrupt files ----------------===//

#include "TempDir.h"

#include "runtime/exec/Error.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Json.h"
#include "runtime/trainer/Safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace mtrt;
using mtrt::testing::TempDir;

namespace {

std::string error_of(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsTest, RoundTrip) {
  TempDir dir;
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1.5f}, c;
  SafetensorsWriter w;
  w.add("layer.0/w \"quoted\"", {2, 3}, a.data());
  w.add("bias", {1}, b.data());
  w.add("empty", {0, 4}, c.data());
  w.set_metadata("plan_hash", "abc");
  const std::string path = dir / "t.safetensors";
  uint64_t hash = w.write(path);
  EXPECT_FALSE(mtrt::testing::exists(path + ".tmp"));

  SafetensorsReader r(path);
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.metadata().at("plan_hash"), "abc");
  std::vector<float> a2(6), b2(1);
  Checksum sum;
  r.read_f32("layer.0/w \"quoted\"", {2, 3}, a2.data(), &sum);
  r.read_f32("bias", {1}, b2.data(), &sum);
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
  EXPECT_EQ(sum.digest(), hash);
  // The data starts 8-byte aligned, as the format recommends.
  std::string bytes = mtrt::testing::read_text(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 7 * 4);
  // The header is plain JSON.
  JsonValue h = parse_json(bytes.substr(8, n));
  EXPECT_EQ(h.find("bias")->find("dtype")->as_string(), "F32");
}

TEST(SafetensorsTest, ReadErrorsNameTheTensorAndFile) {
  TempDir dir;
  std::vector<float> a(6, 1.0f);
  SafetensorsWriter w;
  w.add("a", {2, 3}, a.data());
  const std::string path = dir / "t.safetensors";
  w.write(path);
  SafetensorsReader r(path);
  std::vector<float> out(6);
  EXPECT_NE(error_of([&] { r.read_f32("b", {2, 3}, out.data()); })
                .find("tensor 'b' is missing (" + path + ")"),
            std::string::npos);
  EXPECT_NE(error_of([&] { r.read_f32("a", {3, 2}, out.data()); })
                .find("has shape [2, 3], expected [3, 2]"),
            std::string::npos);
}

TEST(SafetensorsTest, CorruptFilesAreRejected) {
  TempDir dir;
  std::vector<float> a(16, 2.0f);
  SafetensorsWriter w;
  w.add("a", {16}, a.data());
  const std::string good = dir / "good.safetensors";
  w.write(good);
  const std::string bytes = mtrt::testing::read_text(good);
  auto variant = [&](const std::string &name, const std::string &content) {
    std::string path = dir / name;
    mtrt::testing::write_bytes(path, content.data(), content.size());
    return error_of([&] { SafetensorsReader r(path); });
  };
  // Truncated in the data, in the header, before the length.
  std::string e = variant("cut.st", bytes.substr(0, bytes.size() - 4));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("cut.st"), std::string::npos) << e;
  e = variant("head.st", bytes.substr(0, 20));
  EXPECT_NE(e.find("header length"), std::string::npos) << e;
  e = variant("tiny.st", bytes.substr(0, 5));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // Garbage in the JSON.
  std::string bad = bytes;
  bad[8] = '#';
  e = variant("json.st", bad);
  EXPECT_NE(e.find("corrupt safetensors header"), std::string::npos) << e;
  // A size that disagrees with the shape, and overlapping tensors.
  auto with_header = [&](const std::string &json, size_t data) {
    std::string h = json;
    while (h.size() % 8)
      h += ' ';
    std::string out(8, '\0');
    uint64_t n = h.size();
    std::memcpy(&out[0], &n, 8);
    return out + h + std::string(data, '\0');
  };
  e = variant("size.st", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(e.find("needs 12 bytes, has 8"), std::string::npos) << e;
  e = variant("overlap.st", with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  e = variant("dtype.st", with_header(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(e.find("unknown dtype Q7"), std::string::npos) << e;
  e = error_of([&] { SafetensorsReader r(dir / "missing.st"); });
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST(SafetensorsTest, AtomicWriteLeavesNoPartialFile) {
  TempDir dir;
  const std::string path = dir / "out.txt";
  {
    AtomicFile f(path);
    f.write("partial");
    // Destroyed without commit: as if the process died mid-write.
  }
  EXPECT_FALSE(mtrt::testing::exists(path));
  EXPECT_FALSE(mtrt::testing::exists(path + ".tmp"));
  AtomicFile f(path);
  f.write("whole");
  f.commit();
  EXPECT_EQ(mtrt::testing::read_text(path), "whole");
}

TEST(JsonTest, ParsesAndQuotes) {
  JsonValue v = parse_json(R"( {"a": [1, -2.5e3, true, null], "s": "x\"\u00e9\n", "big": 9007199254740993} )");
  EXPECT_EQ(v.find("a")->items.size(), 4u);
  EXPECT_EQ(v.find("a")->items[1].as_double(), -2500.0);
  EXPECT_EQ(v.find("s")->as_string(), "x\"\xc3\xa9\n");
  EXPECT_EQ(v.find("big")->as_int(), 9007199254740993LL);
  EXPECT_THROW(parse_json("{\"a\": }"), std::runtime_error);
  EXPECT_THROW(parse_json("[1, 2"), std::runtime_error);
  EXPECT_EQ(parse_json(json_quote("a\"b\\c\n\x01")).as_string(), "a\"b\\c\n\x01");
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(3e-4), "0.0003");
  EXPECT_EQ(std::stod(json_number(1.0 / 3.0)), 1.0 / 3.0);
}

} // namespace
