#include "golden/reference_file.h"

#include <bit>
#include <map>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace loom::test {
namespace {

static_assert(std::endian::native == std::endian::little,
              "reference files are little-endian; add byte swapping for this host");

// Cursor over the file's bytes; every read is bounds-checked so a short file
// reports "truncated" with what was being read instead of reading garbage.
class Reader {
 public:
  Reader(std::string path, std::vector<char> bytes)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("reference file " + path_ + ": " + what);
  }

  void read_raw(void* dst, size_t n, const char* what) {
    if (n > bytes_.size() - pos_) {
      fail(std::string("truncated while reading ") + what + " at offset " +
           std::to_string(pos_) + " (need " + std::to_string(n) + " bytes, " +
           std::to_string(bytes_.size() - pos_) + " left)");
    }
    if (n) std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }

  template <class T>
  T read(const char* what) {
    T v;
    read_raw(&v, sizeof(T), what);
    return v;
  }

  std::string read_name(const char* what) {
    uint32_t len = read<uint32_t>(what);
    if (len > bytes_.size() - pos_) {
      fail(std::string("truncated: name length ") + std::to_string(len) + " of " + what +
           " runs past the end of the file");
    }
    std::string s(bytes_.data() + pos_, len);
    pos_ += len;
    return s;
  }

  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string path_;
  std::vector<char> bytes_;
  size_t pos_ = 0;
};

}  // namespace

ReferenceFile ReferenceFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("reference file " + path + ": cannot open");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("reference file " + path + ": read error");

  Reader r(path, std::move(bytes));
  char magic[sizeof(kMagic)];
  r.read_raw(magic, sizeof(magic), "magic");
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) r.fail("bad magic (not a LOOMREF file)");
  uint32_t version = r.read<uint32_t>("version");
  if (version != kVersion) {
    r.fail("unsupported version " + std::to_string(version) + " (expected " +
           std::to_string(kVersion) + ")");
  }

  ReferenceFile f;
  uint32_t n_ints = r.read<uint32_t>("int config count");
  for (uint32_t i = 0; i < n_ints; ++i) {
    std::string name = r.read_name("int config name");
    f.ints[name] = r.read<int64_t>("int config value");
  }
  uint32_t n_floats = r.read<uint32_t>("float config count");
  for (uint32_t i = 0; i < n_floats; ++i) {
    std::string name = r.read_name("float config name");
    f.floats[name] = r.read<double>("float config value");
  }

  uint32_t n_tensors = r.read<uint32_t>("tensor count");
  for (uint32_t i = 0; i < n_tensors; ++i) {
    std::string name = r.read_name("tensor name");
    uint8_t dtype = r.read<uint8_t>("tensor dtype");
    if (dtype > 1) r.fail("tensor " + name + ": unknown dtype code " + std::to_string(dtype));
    uint32_t ndim = r.read<uint32_t>("tensor ndim");
    if (ndim > 16) r.fail("tensor " + name + ": implausible ndim " + std::to_string(ndim));
    Tensor t;
    t.shape.resize(ndim);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      int64_t dim = r.read<int64_t>("tensor dims");
      if (dim < 0) r.fail("tensor " + name + ": negative dimension");
      t.shape[d] = dim;
      numel *= static_cast<uint64_t>(dim);
      // Both dtypes are 4 bytes wide; check before allocating so a corrupt
      // header cannot make us allocate a huge buffer.
      if (numel > r.remaining() / 4) {
        r.fail("truncated: tensor " + name + " needs more data than the file holds");
      }
    }
    if (dtype == 0) {
      t.f32.resize(numel);
      r.read_raw(t.f32.data(), numel * sizeof(float), "tensor data");
    } else {
      t.i32.resize(numel);
      r.read_raw(t.i32.data(), numel * sizeof(int32_t), "tensor data");
    }
    if (!f.tensors.emplace(name, std::move(t)).second) r.fail("duplicate tensor " + name);
  }
  if (r.remaining() != 0) {
    r.fail(std::to_string(r.remaining()) + " unexpected trailing bytes");
  }
  return f;
}

const ReferenceFile::Tensor& ReferenceFile::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error("reference file: no tensor named " + name);
  return it->second;
}

std::vector<float> loom_tensor_values(const ReferenceFile& ref, const std::string& prefix, const std::string& name) {
  auto stack = [&](const std::string& base, std::initializer_list<const char*> parts) {
    std::vector<float> out;
    for (const char* part : parts) {
      const auto& t = ref.tensor(prefix + base + part + ".weight").f32;
      out.insert(out.end(), t.begin(), t.end());
    }
    return out;
  };
  const std::string qkv = "self_attn.qkv_proj.weight", gate_up = "mlp.gate_up_proj.weight";
  if (name.ends_with(qkv))
    return stack(name.substr(0, name.size() - qkv.size()) + "self_attn.", {"q_proj", "k_proj", "v_proj"});
  if (name.ends_with(gate_up))
    return stack(name.substr(0, name.size() - gate_up.size()) + "mlp.", {"gate_proj", "up_proj"});
  // The mixtral reference's MoE MLP (tools/moe_torch.py under "mlp."): the
  // router, and each expert's tensors stacked by rows, expert by expert.
  const std::string moe = "block_sparse_moe.";
  if (const size_t at = name.find(moe); at != std::string::npos) {
    const std::string layer = name.substr(0, at) + "mlp.", rest = name.substr(at + moe.size());
    if (rest == "gate.weight") return ref.tensor(prefix + layer + "gate.weight").f32;
    // The shared expert (Qwen2-MoE's names): gate and up stacked, the rest as named.
    if (rest == "shared_expert.gate_up_proj.weight") return stack(layer + "shared_expert.", {"gate_proj", "up_proj"});
    if (rest.starts_with("shared_expert")) return ref.tensor(prefix + layer + rest).f32;
    std::vector<float> out;
    for (int64_t e = 0; e < ref.ints.at("n_experts"); e++) {
      const std::string ex = layer + "experts." + std::to_string(e) + ".";
      const auto parts = rest == "experts.gate_up.weight" ? std::vector<std::string>{"gate_proj", "up_proj"}
                                                          : std::vector<std::string>{"down_proj"};
      for (const std::string& part : parts) {
        const auto& t = ref.tensor(prefix + ex + part + ".weight").f32;
        out.insert(out.end(), t.begin(), t.end());
      }
    }
    return out;
  }
  return ref.tensor(prefix + name).f32;
}

const ReferenceFile& built_reference(const std::string& name) {
  static std::map<std::string, ReferenceFile> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, ReferenceFile::load(LOOM_BINARY_DIR "/reference/" + name + ".ref")).first;
  return it->second;
}

}  // namespace loom::test
