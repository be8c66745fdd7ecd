#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint/safetensors.h"
#include "checkpoint/sha256.h"
#include "checkpoint_test_util.h"
#include "core/check.h"
#include "core/dtype.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::slurp;
using test::spit;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; i++) s[i] = char(uint8_t(n >> (8 * i)));
  return s;
}

// A file from raw header text and data, for malformed cases.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  spit(path, le64(header.size()) + header + data);
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckpointSafetensors, ExactBytesOfHuggingFacesLayout) {
  std::string dir = ckpt_dir("st-bytes");
  float a[2] = {1.0f, -2.0f};
  WrittenFile w = write_safetensors(dir + "/x.safetensors", {{"a", StDType::F32, {2}, a}}, {{"format", "pt"}});
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string want = le64(header.size()) + header + std::string(reinterpret_cast<const char*>(a), 8);
  std::string got = slurp(dir + "/x.safetensors");
  EXPECT_EQ(got, want);
  EXPECT_EQ(w.bytes, want.size());
  EXPECT_EQ(w.sha256, sha256_hex(want.data(), want.size()));
  EXPECT_EQ(sha256_file(dir + "/x.safetensors"), w.sha256);
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CheckpointSafetensors, RoundTripsEveryDtypeAndMetadata) {
  std::string dir = ckpt_dir("st-dtypes");
  std::vector<float> f = {0.5f, -1.25f, 3.0f, 0.375f, 7.0f, -0.0f};
  std::vector<uint16_t> b(f.size()), h(f.size());
  convert_f32_to_bf16(reinterpret_cast<bf16*>(b.data()), f.data(), f.size());
  convert_f32_to_f16(reinterpret_cast<f16*>(h.data()), f.data(), f.size());
  std::vector<int32_t> ints = {-7, 0, 42};
  float scalar = 9.5f;
  write_safetensors(dir + "/t.safetensors",
                    {{"f32", StDType::F32, {2, 3}, f.data()},
                     {"bf16", StDType::BF16, {3, 2}, b.data()},
                     {"f16", StDType::F16, {6}, h.data()},
                     {"i32", StDType::I32, {3}, ints.data()},
                     {"scalar", StDType::F32, {}, &scalar},
                     {"empty", StDType::F32, {0, 4}, nullptr}},
                    {{"who", "loom"}, {"note", "a \"quoted\" value"}});
  SafetensorsFile file = SafetensorsFile::open(dir + "/t.safetensors");
  ASSERT_EQ(file.tensors().size(), 6u);
  EXPECT_EQ(file.metadata().at("who"), "loom");
  EXPECT_EQ(file.metadata().at("note"), "a \"quoted\" value");
  EXPECT_EQ(file.find("bf16")->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(file.find("bf16")->dtype, StDType::BF16);
  EXPECT_EQ(file.find("scalar")->shape, std::vector<int64_t>{});
  std::vector<float> out(6);
  for (const char* name : {"f32", "bf16", "f16"}) {
    file.read_floats(*file.find(name), 0, 6, out.data());
    for (size_t i = 0; i < f.size(); i++) EXPECT_EQ(out[i], f[i]) << name << " " << i;  // all exact in 16 bits
  }
  file.read_floats(*file.find("f32"), 4, 2, out.data());  // an inner range
  EXPECT_EQ(out[0], 7.0f);
  file.read_floats(*file.find("i32"), 0, 3, out.data());
  EXPECT_EQ(out[0], -7.0f);
  EXPECT_EQ(out[2], 42.0f);
  file.read_floats(*file.find("scalar"), 0, 1, out.data());
  EXPECT_EQ(out[0], 9.5f);
  EXPECT_EQ(file.find("missing"), nullptr);
}

TEST(CheckpointSafetensors, WriterRefusesDuplicateNames) {
  std::string dir = ckpt_dir("st-dup");
  float x = 1;
  EXPECT_THROW(write_safetensors(dir + "/d.safetensors", {{"a", StDType::F32, {1}, &x}, {"a", StDType::F32, {1}, &x}}, {}),
               UserError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.safetensors"));
}

TEST(CheckpointSafetensors, MalformedFilesAreNamedInTheError) {
  std::string dir = ckpt_dir("st-bad");
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\1');
  struct Case {
    const char* name;
    std::string header, data;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"truncated", good_header, std::string(5, '\1'), "outside"},
      {"extra", good_header, std::string(12, '\1'), "after the last tensor"},
      {"notjson", "{\"a\": [", eight, "not JSON"},
      {"notobject", "[1,2]", eight, "not a JSON object"},
      {"dtype", R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", eight, "unsupported dtype"},
      {"size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, "its shape needs 12"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       eight, "overlaps"},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "gap"},
      {"shape", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight, "non-negative"},
      {"metadata", R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight,
       "not a string"},
      {"fields", R"({"a":{"dtype":"F32","shape":[2]}})", eight, "expected {dtype, shape, data_offsets}"},
  };
  for (const Case& c : cases) {
    std::string path = dir + "/" + c.name + ".safetensors";
    write_raw(path, c.header, c.data);
    std::string err = error_of(path);
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
  // Too short for a header length, a header length past the end, no file at all.
  spit(dir + "/short.safetensors", "abc");
  EXPECT_NE(error_of(dir + "/short.safetensors").find("truncated"), std::string::npos);
  spit(dir + "/long.safetensors", le64(1000) + "{}");
  EXPECT_NE(error_of(dir + "/long.safetensors").find("truncated"), std::string::npos);
  EXPECT_NE(error_of(dir + "/none.safetensors").find(dir + "/none.safetensors"), std::string::npos);
  // A real file cut short.
  std::vector<float> v(100, 1.0f);
  write_safetensors(dir + "/cut.safetensors", {{"v", StDType::F32, {100}, v.data()}}, {});
  std::string bytes = slurp(dir + "/cut.safetensors");
  spit(dir + "/cut.safetensors", bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(error_of(dir + "/cut.safetensors").find("outside"), std::string::npos);
}

}  // namespace
}  // namespace loom
