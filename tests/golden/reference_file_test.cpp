#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "golden/reference_file.h"

using loom::test::ReferenceFile;

namespace {

// Builds a reference file byte by byte, the way tools/make_reference.py does.
class Writer {
 public:
  template <class T>
  void put(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void name(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  std::vector<char> bytes;
};

std::vector<char> sample_file() {
  Writer w;
  const char magic[8] = {'L', 'O', 'O', 'M', 'R', 'E', 'F', '\0'};
  w.bytes.insert(w.bytes.end(), magic, magic + 8);
  w.put<uint32_t>(1);  // version

  w.put<uint32_t>(2);  // int entries
  w.name("vocab_size");
  w.put<int64_t>(96);
  w.name("n_layer");
  w.put<int64_t>(2);

  w.put<uint32_t>(1);  // float entries
  w.name("lr");
  w.put<double>(1e-3);

  w.put<uint32_t>(3);  // tensors
  w.name("param/wte.weight");  // float32 [2,3]
  w.put<uint8_t>(0);
  w.put<uint32_t>(2);
  w.put<int64_t>(2);
  w.put<int64_t>(3);
  for (int i = 0; i < 6; ++i) w.put<float>(0.5f * static_cast<float>(i) - 1.0f);

  w.name("inputs");  // int32 [4]
  w.put<uint8_t>(1);
  w.put<uint32_t>(1);
  w.put<int64_t>(4);
  for (int32_t v : {7, -1, 0, 95}) w.put<int32_t>(v);

  w.name("loss");  // float32 [1]
  w.put<uint8_t>(0);
  w.put<uint32_t>(1);
  w.put<int64_t>(1);
  w.put<float>(4.5f);
  return w.bytes;
}

class ReferenceFileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& leaf) {
    auto dir = std::filesystem::path(::testing::TempDir());
    std::string p = (dir / ("loom_ref_" + std::to_string(::getpid()) + "_" + leaf)).string();
    created_.push_back(p);
    return p;
  }
  static void write(const std::string& p, const std::vector<char>& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << p;
  }
  void TearDown() override {
    for (const auto& p : created_) std::filesystem::remove(p);
  }

  // Runs load() and returns the error message; fails the test if none.
  static std::string load_error(const std::string& p) {
    try {
      ReferenceFile::load(p);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    ADD_FAILURE() << "load(" << p << ") did not throw";
    return "";
  }

 private:
  std::vector<std::string> created_;
};

TEST_F(ReferenceFileTest, RoundTrip) {
  std::string p = path("ok.bin");
  write(p, sample_file());
  ReferenceFile f = ReferenceFile::load(p);

  ASSERT_EQ(f.ints.size(), 2u);
  EXPECT_EQ(f.ints.at("vocab_size"), 96);
  EXPECT_EQ(f.ints.at("n_layer"), 2);
  ASSERT_EQ(f.floats.size(), 1u);
  EXPECT_DOUBLE_EQ(f.floats.at("lr"), 1e-3);
  ASSERT_EQ(f.tensors.size(), 3u);

  const auto& wte = f.tensor("param/wte.weight");
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(wte.numel(), 6);
  EXPECT_TRUE(wte.i32.empty());
  EXPECT_EQ(wte.f32, (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));

  const auto& inputs = f.tensor("inputs");
  EXPECT_EQ(inputs.shape, (std::vector<int64_t>{4}));
  EXPECT_TRUE(inputs.f32.empty());
  EXPECT_EQ(inputs.i32, (std::vector<int32_t>{7, -1, 0, 95}));

  EXPECT_EQ(f.tensor("loss").f32, (std::vector<float>{4.5f}));
  EXPECT_THROW(f.tensor("nope"), std::runtime_error);
}

TEST_F(ReferenceFileTest, TruncatedFileThrows) {
  std::vector<char> full = sample_file();
  // Cut inside the last tensor's data, inside a header, and inside the magic.
  for (size_t keep : {full.size() - 1, size_t{30}, size_t{5}, size_t{0}}) {
    std::string p = path("trunc_" + std::to_string(keep) + ".bin");
    write(p, std::vector<char>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(keep)));
    std::string msg = load_error(p);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << "keep=" << keep << ": " << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST_F(ReferenceFileTest, BadMagicThrows) {
  std::vector<char> bytes = sample_file();
  bytes[0] = 'X';
  std::string p = path("magic.bin");
  write(p, bytes);
  std::string msg = load_error(p);
  EXPECT_NE(msg.find("bad magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
}

TEST_F(ReferenceFileTest, UnsupportedVersionThrows) {
  std::vector<char> bytes = sample_file();
  uint32_t v = 2;
  std::memcpy(bytes.data() + 8, &v, sizeof(v));
  std::string p = path("version.bin");
  write(p, bytes);
  std::string msg = load_error(p);
  EXPECT_NE(msg.find("unsupported version 2"), std::string::npos) << msg;
}

TEST_F(ReferenceFileTest, MissingFileThrows) {
  std::string msg = load_error(path("does_not_exist.bin"));
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

}  // namespace
