// Every Communicator operation on every group kind of every grid that fits
// the world size, in fp32, bf16 and f16. Inputs are small integers built
// from rank numbers, so every expected result is exact in every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "parallel/grid/parallel_context.h"

namespace {

using loom::DType;
using loom::ReduceOp;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Typed buffer holding small integers in any of our dtypes.
struct Buffer {
  DType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DType t, size_t n) : dtype(t), bytes(n * loom::dtype_size(t)) {}
  size_t size() const { return bytes.size() / loom::dtype_size(dtype); }
  void* data() { return bytes.data(); }
  void set(size_t i, float v) {
    if (dtype == DType::f32) reinterpret_cast<float*>(bytes.data())[i] = v;
    else if (dtype == DType::bf16) reinterpret_cast<loom::bf16*>(bytes.data())[i] = loom::float_to_bf16(v);
    else reinterpret_cast<loom::f16*>(bytes.data())[i] = loom::float_to_f16(v);
  }
  float get(size_t i) const {
    if (dtype == DType::f32) return reinterpret_cast<const float*>(bytes.data())[i];
    if (dtype == DType::bf16) return loom::bf16_to_float(reinterpret_cast<const loom::bf16*>(bytes.data())[i]);
    return loom::f16_to_float(reinterpret_cast<const loom::f16*>(bytes.data())[i]);
  }
};

// The value rank r contributes at element i: small, exact in bf16 and f16.
float value(int r, size_t i) { return float((r + 1) * (1 + int(i % 3))); }

// Runs each collective blocking, or non-blocking then waited on.
struct Ops {
  loom::Communicator& comm;
  bool async;
  void all_reduce(void* b, size_t n, DType t, ReduceOp op) {
    async ? comm.all_reduce_async(b, n, t, op)->wait() : comm.all_reduce(b, n, t, op);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) {
    async ? comm.reduce_scatter_async(s, r, n, t, op)->wait() : comm.reduce_scatter(s, r, n, t, op);
  }
  void all_gather(const void* s, void* r, size_t n, DType t) {
    async ? comm.all_gather_async(s, r, n, t)->wait() : comm.all_gather(s, r, n, t);
  }
  void broadcast(void* b, size_t n, DType t, int root) {
    async ? comm.broadcast_async(b, n, t, root)->wait() : comm.broadcast(b, n, t, root);
  }
};

void check_group(loom::Communicator& group, DType dtype, bool async, const std::string& where) {
  Ops comm{group, async};
  const int n = group.size(), me = group.rank();
  const size_t count = 37;  // not a multiple of anything
  SCOPED_TRACE(where + " group " + group.name() + " dtype " + loom::dtype_name(dtype) + (async ? " async" : ""));

  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    Buffer buf(dtype, count);
    for (size_t i = 0; i < count; i++) buf.set(i, value(me, i));
    comm.all_reduce(buf.data(), count, dtype, op);
    for (size_t i = 0; i < count; i++) {
      float sum = 0, max = 0;
      for (int r = 0; r < n; r++) sum += value(r, i), max = std::max(max, value(r, i));
      float want = op == ReduceOp::Sum ? sum : op == ReduceOp::Max ? max : sum / float(n);
      Buffer expect(dtype, 1);
      expect.set(0, want);  // rounded to the dtype like the result
      ASSERT_EQ(buf.get(i), expect.get(0)) << loom::reduce_op_name(op) << " element " << i;
    }
  }
  {  // reduce_scatter: rank r gets the sum of everyone's block r
    Buffer send(dtype, count * size_t(n)), recv(dtype, count);
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < count; i++) send.set(size_t(j) * count + i, value(me, i) + float(j));
    comm.reduce_scatter(send.data(), recv.data(), count, dtype, ReduceOp::Sum);
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, i) + float(me);
      ASSERT_EQ(recv.get(i), want) << "reduce_scatter element " << i;
    }
  }
  {  // all_gather
    Buffer send(dtype, count), recv(dtype, count * size_t(n));
    for (size_t i = 0; i < count; i++) send.set(i, value(me, i));
    comm.all_gather(send.data(), recv.data(), count, dtype);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) ASSERT_EQ(recv.get(size_t(r) * count + i), value(r, i)) << "all_gather";
  }
  for (int root = 0; root < n; root++) {  // broadcast from every root
    Buffer buf(dtype, count);
    for (size_t i = 0; i < count; i++) buf.set(i, value(me, i));
    comm.broadcast(buf.data(), count, dtype, root);
    for (size_t i = 0; i < count; i++) ASSERT_EQ(buf.get(i), value(root, i)) << "broadcast root " << root;
  }
  if (n > 1) {  // ring: send to the next rank, receive from the previous, non-blocking
    Buffer out(dtype, count), in(dtype, count);
    for (size_t i = 0; i < count; i++) out.set(i, value(me, i));
    auto r = group.recv_async(in.data(), count, dtype, (me + n - 1) % n, 7);
    auto s = group.send_async(out.data(), count, dtype, (me + 1) % n, 7);
    s->wait();
    while (!r->test()) {
    }
    for (size_t i = 0; i < count; i++) ASSERT_EQ(in.get(i), value((me + n - 1) % n, i)) << "send/recv";
  }
  group.barrier();
}

TEST(Communicator, EveryOperationOnEveryGroupOfEveryGrid) {
  const int world = world_size();
  for (int tp = 1; tp <= world; tp++) {
    for (int pp = 1; pp <= world; pp++) {
      if (world % (tp * pp) != 0) continue;
      for (const char* order : {"tp-dp-pp", "pp-dp-tp"}) {
        auto grid = loom::ParallelGrid::for_world(world, 0, tp, pp, order);
        auto ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60});
        for (loom::GroupKind kind : loom::kAllGroupKinds) {
          auto& comm = ctx->group(kind);
          ASSERT_EQ(comm.size(), int(grid.group(kind, ctx->rank()).size()));
          ASSERT_EQ(comm.world_ranks()[size_t(comm.rank())], ctx->rank());
          for (DType dt : {DType::f32, DType::bf16, DType::f16})
            for (bool async : {false, true}) check_group(comm, dt, async, grid.describe());
        }
      }
    }
  }
}

TEST(Communicator, NonBlockingOperationsOverlap) {
  // Several collectives in flight at once on different groups, waited in reverse order.
  auto grid = loom::ParallelGrid::for_world(world_size(), 0, 1, 1);
  auto ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60});
  std::vector<std::vector<float>> bufs(4, std::vector<float>(1000, float(ctx->rank() + 1)));
  std::vector<std::unique_ptr<loom::Work>> work;
  for (auto& b : bufs) work.push_back(ctx->dp().all_reduce_async(b.data(), b.size(), DType::f32, ReduceOp::Sum));
  for (auto it = work.rbegin(); it != work.rend(); ++it) (*it)->wait();
  float want = float(world_size() * (world_size() + 1) / 2);
  for (auto& b : bufs) EXPECT_EQ(b[999], want);
}

// Sums on a 16-bit wire (precision.grad_reduce = "bf16"): integers whose
// partial sums all fit bf16's 8-bit significand come out exact; random data
// lands within one bf16 rounding per partial sum of the exact sum of the
// inputs; all-reduce and reduce-scatter agree in shape with the fp32 path.
TEST(Communicator, SixteenBitWireSums) {
  auto grid = loom::ParallelGrid::for_world(world_size(), 0, 1, 1);
  auto ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60});
  loom::Communicator& dp = ctx->dp();
  const int n = dp.size(), r = dp.rank();
  const size_t count = 1000;
  for (DType dt : {DType::bf16, DType::f16}) {
    auto narrow = [&](float x) {
      return dt == DType::bf16 ? loom::float_to_bf16(x).bits : loom::float_to_f16(x).bits;
    };
    auto widen = [&](uint16_t b) {
      return dt == DType::bf16 ? loom::bf16_to_float(loom::bf16{b}) : loom::f16_to_float(loom::f16{b});
    };
    std::vector<uint16_t> ints(count);
    for (size_t i = 0; i < count; i++) ints[i] = narrow(float((i + size_t(r)) % 16));
    dp.all_reduce_sum_16bit_async(ints.data(), count, dt)->wait();
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int k = 0; k < n; k++) want += float((i + size_t(k)) % 16);
      ASSERT_EQ(widen(ints[i]), want) << loom::dtype_name(dt) << " element " << i;
    }
    // Random values: every rank's inputs are known to every rank (same seed).
    auto inputs = [&](int rank) {
      std::mt19937 gen(uint32_t(1234 + rank));
      std::normal_distribution<float> d(0.f, 1.f);
      std::vector<uint16_t> v(count * size_t(n));
      for (auto& x : v) x = narrow(d(gen));
      return v;
    };
    std::vector<std::vector<uint16_t>> every;
    for (int k = 0; k < n; k++) every.push_back(inputs(k));
    std::vector<uint16_t> send = every[size_t(r)], all = send, shard(count);
    dp.all_reduce_sum_16bit_async(all.data(), all.size(), dt)->wait();
    dp.reduce_scatter_sum_16bit_async(send.data(), shard.data(), count, dt)->wait();
    const double unit = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;  // one rounding, relative
    for (size_t i = 0; i < all.size(); i++) {
      double exact = 0, magnitude = 0;
      for (int k = 0; k < n; k++) {
        const double x = widen(every[size_t(k)][i]);
        exact += x, magnitude += std::abs(x);
      }
      const double bound = (n - 1) * unit * magnitude + 1e-30;
      ASSERT_LE(std::abs(widen(all[i]) - exact), bound) << loom::dtype_name(dt) << " element " << i;
      if (i / count == size_t(r)) {
        ASSERT_LE(std::abs(widen(shard[i % count]) - exact), bound) << loom::dtype_name(dt) << " shard element " << i;
      }
    }
  }
}


// OpenMPI's non-blocking collectives (coll/libnbc) are asked for
// Rabenseifner's all-reduce and binomial rooted reduces by the runtime
// (MpiRuntime, before MPI starts), not the binomial all-reduce and chained
// reduces it picks itself: read back through MPI's tool interface.
TEST(Communicator, NonBlockingAlgorithmsAreSetBeforeMpiStarts) {
  // The tool interface asks for the level MPI runs at (OpenMPI lowers what
  // MPI_Query_thread reports to the level asked here).
  int level = MPI_THREAD_SINGLE, provided = 0;
  MPI_Query_thread(&level);
  ASSERT_EQ(MPI_T_init_thread(level, &provided), MPI_SUCCESS);
  for (const char* name : {"coll_libnbc_iallreduce_algorithm", "coll_libnbc_ireduce_algorithm"}) {
    SCOPED_TRACE(name);
    int index = -1;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) {
      MPI_T_finalize();
      GTEST_SKIP() << "not OpenMPI's libnbc";
    }
    MPI_T_cvar_handle handle;
    int count = 0, algorithm = -1;
    ASSERT_EQ(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count), MPI_SUCCESS);
    ASSERT_EQ(MPI_T_cvar_read(handle, &algorithm), MPI_SUCCESS);
    MPI_T_cvar_handle_free(&handle);
    const char* env = std::getenv((std::string("OMPI_MCA_") + name).c_str());
    ASSERT_NE(env, nullptr);
    EXPECT_EQ(algorithm, std::atoi(env));  // 3 and 2 unless the user chose others
  }
  MPI_T_finalize();
}

// A group knows whether it spans nodes (the same answer on every member, as
// the host names say), and a large blocking sum, which across nodes runs as
// the non-blocking all-reduce waited on, is exact either way. Under plain
// mpirun every rank shares one host; tests/cluster/emulated_cluster_test.sh
// runs this test again with one rank on each of 2 emulated nodes.
TEST(Communicator, LargeSumsKnowWhetherTheyCrossNodes) {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  const int n = world_size();
  std::vector<char> hosts(size_t(n) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  bool several_hosts = false;
  for (int r = 1; r < n; r++)
    several_hosts = several_hosts || std::string(&hosts[size_t(r) * MPI_MAX_PROCESSOR_NAME]) != std::string(hosts.data());
  auto world = loom::MpiComm::world(loom::MpiOptions{60});
  EXPECT_EQ(world->spans_nodes(), several_hosts);
  if (world->rank() == 0) std::printf("the world spans %s\n", several_hosts ? "several nodes" : "one node");
  // A group of one never spans nodes.
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<std::unique_ptr<loom::MpiComm>> alone;
  for (int r = 0; r < n; r++) alone.push_back(loom::MpiComm::split("alone", r == me ? 0 : -1, {r}, loom::MpiOptions{60}));
  EXPECT_FALSE(alone[size_t(me)]->spans_nodes());

  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(loom::dtype_name(t));
    for (size_t count : {size_t(1000), loom::MpiComm::kNonBlockingAllReduceBytes, size_t(3) << 20}) {
      Buffer b(t, count);
      for (size_t i = 0; i < count; i++) b.set(i, value(world->rank(), i));
      world->all_reduce(b.data(), count, t, ReduceOp::Sum);
      size_t wrong = 0;
      for (size_t i = 0; i < count; i++) wrong += b.get(i) != float(n * (n + 1) / 2 * (1 + int(i % 3)));
      EXPECT_EQ(wrong, 0u) << count << " elements";
    }
  }
}

}  // namespace
