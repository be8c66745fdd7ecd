// `loom bench checkpoint`: checkpoint save and load throughput beside a plain
// copy of the same bytes, measured in the same run on the same disk.
//
// Save = every rank file (sha256 while writing, fsync) + commit (checks,
// manifest, renames, fsyncs). Load = verify every sha256, then assemble every
// global tensor from the rank files. Before each read the files' pages are
// dropped from the page cache (posix_fadvise DONTNEED after fsync), so reads
// come from the disk as they would after a restart.
//
// Then (--stall-model: a planner preset, gpt2-124m by default, or a run
// config file; "none" skips it) how long a save
// holds up training, synchronous against asynchronous
// (bench_checkpoint_stall.cpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_writer.h"
#include "bench/bench_checkpoint_stall.h"
#include "cli/commands.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"

namespace loom::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// cp + sync: read each file, write it elsewhere, fsync. Returns seconds.
double plain_copy(const std::vector<std::string>& files, const std::string& to_dir) {
  std::filesystem::create_directories(to_dir);
  std::vector<char> buf(size_t(8) << 20);
  auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : files) {
    int in = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    std::string to = to_dir + "/" + std::filesystem::path(f).filename().string();
    int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    LOOM_USER_CHECK(in >= 0 && out >= 0, "bench: cannot copy '%s' to '%s'", f.c_str(), to.c_str());
    for (ssize_t n; (n = ::read(in, buf.data(), buf.size())) > 0;)
      LOOM_USER_CHECK(::write(out, buf.data(), size_t(n)) == n, "bench: short write to '%s'", to.c_str());
    ::fsync(out);
    ::close(in);
    ::close(out);
  }
  return seconds_since(t0);
}

double parse_positive(const std::string& s, const char* flag) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size() && v > 0 && v < 1e7) return v;
  } catch (...) {
  }
  throw UserError(strprintf("bench checkpoint: %s expects a positive number, got '%s'", flag, s.c_str()));
}

}  // namespace

int cmd_bench_checkpoint(const Args& args) {
  double mb = 256;
  int ranks = 4, repeat = 3;
  std::string dir = strprintf("/tmp/loom-bench-checkpoint.%d", int(::getpid()));
  std::string stall_model = "gpt2-124m";
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&](const char* flag) {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench checkpoint: %s needs a value", flag);
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--mb") mb = parse_positive(value("--mb"), "--mb");
    else if (a == "--ranks") ranks = int(parse_positive(value("--ranks"), "--ranks"));
    else if (a == "--repeat") repeat = int(parse_positive(value("--repeat"), "--repeat"));
    else if (a == "--dir") dir = value("--dir");
    else if (a == "--stall-model") stall_model = value("--stall-model");
    else throw UserError(strprintf("bench checkpoint: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  LOOM_USER_CHECK(ranks >= 1 && ranks <= 1024 && repeat >= 1, "bench checkpoint: --ranks in [1, 1024], --repeat >= 1");
  if (stall_model != "none") stall_bench_model(stall_model);  // an unknown name fails now, listing the known ones
  LOOM_USER_CHECK(!std::filesystem::exists(dir), "bench checkpoint: '%s' exists; give a fresh --dir", dir.c_str());

  // Model-like tensors of 1024 columns, each split by rows over the ranks
  // (as tensor parallelism splits them); ranks * 8 rows per tensor at least.
  const int64_t cols = 1024, floats = int64_t(mb * 1e6 / 4);
  const int tensors = 16;
  const int64_t rows = std::max<int64_t>(int64_t(ranks) * 8, floats / tensors / cols / ranks * ranks);
  std::vector<std::vector<float>> data(tensors, std::vector<float>(size_t(rows * cols)));
  for (int t = 0; t < tensors; t++)
    for (size_t i = 0; i < data[t].size(); i++) data[t][i] = float(int64_t(i * 2654435761u + t) % 1000) * 1e-3f;
  const double bytes = double(tensors) * double(rows * cols) * 4;

  std::printf("%s\n", cpu::describe_dispatch().line().c_str());
  std::printf("loom bench checkpoint: %.1f MB of fp32 in %d tensors of [%lld, %lld], each split by rows over %d rank "
              "files, in %s; median of %d\n", bytes / 1e6, tensors, (long long)rows, (long long)cols, ranks,
              dir.c_str(), repeat);
  std::vector<double> t_save, t_copy, t_verify, t_load, t_read;
  for (int r = 0; r < repeat; r++) {
    const std::string root = dir + "/ckpt";
    auto t0 = std::chrono::steady_clock::now();
    CheckpointWriter w(root, 100 + r);
    std::vector<int> writers;
    for (int k = 0; k < ranks; k++) {
      std::vector<CheckpointPiece> pieces;
      for (int t = 0; t < tensors; t++) {
        const int64_t part = rows / ranks;
        pieces.push_back({strprintf("t%d", t), {rows, cols}, {k * part, 0}, {part, cols}, 0, -1,
                          data[t].data() + size_t(k * part * cols), StDType::F32});
      }
      w.write_rank_file(k, pieces);
      writers.push_back(k);
    }
    CheckpointManifest m;
    m.step = 100 + r;
    m.config_toml = "# bench\n";
    m.layout.tp = m.layout.world_size = ranks;  // rows split over the ranks
    std::string saved = w.commit(m, writers, 1).dir;
    t_save.push_back(seconds_since(t0));

    std::vector<std::string> files = files_under(saved);
    for (const auto& f : files) drop_cache(f);
    t_copy.push_back(plain_copy(files, dir + "/copy"));
    for (const auto& f : files) drop_cache(f);
    t0 = std::chrono::steady_clock::now();
    std::vector<char> buf(size_t(8) << 20);
    for (const auto& f : files) {
      int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
      ::close(fd);
    }
    t_read.push_back(seconds_since(t0));

    for (const auto& f : files) drop_cache(f);
    t0 = std::chrono::steady_clock::now();
    verify_checkpoint(saved);
    t_verify.push_back(seconds_since(t0));
    for (const auto& f : files) drop_cache(f);
    t0 = std::chrono::steady_clock::now();
    Checkpoint ckpt = Checkpoint::open(saved);
    double checksum = 0;
    for (int t = 0; t < tensors; t++) checksum += ckpt.tensors().read_global(strprintf("t%d", t))[size_t(t)];
    t_load.push_back(seconds_since(t0));
    LOOM_CHECK(checksum == checksum, "bench: NaN read back");
    remove_tree(dir + "/copy");
  }
  remove_tree(dir);

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto row = [&](const char* what, const std::vector<double>& t, const char* note) {
    std::printf("  %-28s %8.3f s %9.1f MB/s   %s\n", what, median(t), bytes / 1e6 / median(t), note);
  };
  row("save (write+sha256+commit)", t_save, "");
  row("plain copy (read+write+fsync)", t_copy, "of the saved files, cold cache");
  row("plain read", t_read, "cold cache");
  row("verify (read+sha256)", t_verify, "cold cache");
  row("load (assemble tensors)", t_load, "cold cache, no hashing");
  std::printf("  save / plain copy: %.2f   load / plain read: %.2f   verify+load / plain read: %.2f\n",
              median(t_copy) / median(t_save), median(t_read) / median(t_load),
              median(t_read) / (median(t_verify) + median(t_load)));
  if (stall_model != "none") {
    bench_checkpoint_stall(stall_model, dir, repeat);
    remove_tree(dir);
  }
  return 0;
}

}  // namespace loom::cli
