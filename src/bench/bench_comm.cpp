// `loom bench comm`: bus bandwidth of all_reduce, reduce_scatter,
// all_gather and the non-blocking all-reduce (iall_reduce) over message
// sizes, reported like nccl-tests, beside this machine's memcpy bandwidth
// measured in the same run.
//
// The parent measures memcpy, then for each rank count runs
// `mpirun -np N loom bench comm-child ...`, whose rank 0 prints the rows.
// Bus bandwidth (nccl-tests' definition) makes the figures comparable across
// rank counts: all_reduce moves 2(n-1)/n of the buffer per rank, the other
// two (n-1)/n.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "core/check.h"

namespace loom::cli {
namespace {

size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  LOOM_USER_CHECK(std::isfinite(v), "bench comm: bad size '%s' (like 4K, 256M)", s.c_str());
  std::string unit = end ? end : "";
  double mult = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0
                : unit == "G" ? 1073741824.0 : -1;
  LOOM_USER_CHECK(v > 0 && mult > 0, "bench comm: bad size '%s' (like 4K, 256M)", s.c_str());
  return size_t(v * mult);
}

// Single-thread memcpy of a buffer much larger than the caches.
double memcpy_gbps() {
  const size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 4; i++) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(bytes) / t * 1e-9);
    std::swap(a, b);
  }
  return best;
}

struct Options {
  std::vector<int> ranks = {2, 4, 8};
  size_t min_bytes = 4 << 10, max_bytes = size_t(256) << 20;
};

Options parse(const Args& args, size_t first) {
  Options o;
  for (size_t i = first; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench comm: %s needs a value", args[i].c_str());
      return args[++i];
    };
    if (args[i] == "--ranks") {
      o.ranks.clear();
      std::string list = value();
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        std::string item = list.substr(p, q == std::string::npos ? std::string::npos : q - p);
        char* end = nullptr;
        long n = std::strtol(item.c_str(), &end, 10);
        LOOM_USER_CHECK(!item.empty() && *end == 0 && n >= 1 && n <= 1024,
                        "bench comm: --ranks takes positive integers, got '%s'", list.c_str());
        o.ranks.push_back(int(n));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else if (args[i] == "--min-bytes") o.min_bytes = parse_size(value());
    else if (args[i] == "--max-bytes") o.max_bytes = parse_size(value());
    else throw UserError(strprintf("bench comm: unknown option '%s' (try loom bench --help)", args[i].c_str()));
  }
  LOOM_USER_CHECK(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes && o.max_bytes <= (size_t(1) << 33),
                  "bench comm: sizes must satisfy 4 <= --min-bytes <= --max-bytes <= 8G");
  return o;
}

}  // namespace

int cmd_bench_comm(const Args& args) {
  Options o = parse(args, 1);
  std::printf("loom bench comm: memcpy (1 thread, 256 MiB) %.1f GB/s on this machine\n", memcpy_gbps());
  std::fflush(stdout);
  const std::string exe = self_exe();
  for (int ranks : o.ranks) {
    std::string cmd = mpirun_prefix(ranks, 1) + strprintf("'%s' bench comm-child --min-bytes %zu --max-bytes %zu",
                                                          exe.c_str(), o.min_bytes, o.max_bytes);
    std::fflush(stdout);
    int rc = std::system(cmd.c_str());
    LOOM_USER_CHECK(rc == 0, "bench comm: '%s' failed (status %d)", cmd.c_str(), rc);
  }
  return 0;
}

int cmd_bench_comm_child(const Args& args, MpiRuntime& mpi) {
  Options o = parse(args, 1);
  auto world = MpiComm::world(MpiOptions{600});
  const int n = world->size();
  const bool print = mpi.world_rank() == 0;
  if (print) {
    std::printf("\n%d ranks\n%12s %12s %-15s %10s %10s %10s\n", n, "bytes", "floats", "operation", "time us",
                "algbw GB/s", "busbw GB/s");
  }
  std::vector<float> a(o.max_bytes / 4 + 1, 1.f), b(o.max_bytes / 4 + 1, 0.f);
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    size_t count = bytes / 4;  // floats in the whole buffer
    size_t block = count / size_t(n);
    // op 3: the non-blocking in-place all-reduce the gradient sums start and
    // wait on (MPI_Iallreduce: coll/libnbc's algorithm, not coll/tuned's).
    for (int op = 0; op < 4; op++) {
      auto run = [&]() {
        if (op == 0) world->all_reduce(a.data(), count, DType::f32, ReduceOp::Sum);
        else if (op == 1) world->reduce_scatter(a.data(), b.data(), block, DType::f32, ReduceOp::Sum);
        else if (op == 2) world->all_gather(a.data(), b.data(), block, DType::f32);
        else world->all_reduce_async(a.data(), count, DType::f32, ReduceOp::Sum)->wait();
      };
      run();  // warm-up
      int iters = int(std::max<size_t>(2, std::min<size_t>(20, (size_t(64) << 20) / bytes)));
      world->barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; i++) run();
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      float slowest = float(t);
      world->all_reduce(&slowest, 1, DType::f32, ReduceOp::Max);
      const bool reduce_all = op == 0 || op == 3;
      double moved = reduce_all ? double(count) * 4 : double(block) * n * 4;
      double algbw = moved / slowest * 1e-9;
      double busbw = algbw * (reduce_all ? 2.0 * (n - 1) / n : double(n - 1) / n);
      const char* name = op == 0 ? "all_reduce" : op == 1 ? "reduce_scatter" : op == 2 ? "all_gather" : "iall_reduce";
      if (print) std::printf("%12zu %12zu %-15s %10.1f %10.2f %10.2f\n", bytes, count, name, slowest * 1e6, algbw, busbw);
    }
    if (print) std::fflush(stdout);
  }
  return 0;
}

}  // namespace loom::cli
