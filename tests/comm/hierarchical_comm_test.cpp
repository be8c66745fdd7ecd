// The hierarchical data-parallel sum (comm/hierarchical_comm.h): reduce in
// each node, all-reduce between nodes, broadcast in each node. On one
// machine the nodes are pretended (every 2 consecutive ranks; at 2 ranks one
// each), which exercises the same stage groups and ordering as real nodes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "comm/hierarchical_comm.h"
#include "comm/layout_check.h"
#include "comm/progress_engine.h"
#include "core/dtype.h"
#include "parallel/grid/dp_hierarchy.h"

namespace {

using loom::test::world_size;

loom::NodeMap pretend_nodes(int world) {
  std::vector<int> keys;
  for (int r = 0; r < world; r++) keys.push_back(world <= 2 ? r : r / 2);
  return loom::NodeMap::from_keys(keys, std::vector<std::string>(size_t(world), "pretend"));
}

struct Groups {
  std::unique_ptr<loom::MpiComm> flat;
  std::unique_ptr<loom::HierarchicalComm> hier;
};

Groups make_groups(loom::ProgressEngine* engine) {
  Groups g;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  g.flat = loom::MpiComm::world(loom::MpiOptions{60, engine});
  g.hier = loom::make_hierarchical_dp(loom::ParallelGrid::for_world(world_size(), 0, 1, 1), pretend_nodes(world_size()),
                                      rank, *g.flat, loom::MpiOptions{60, engine});
  return g;
}

// Integer-valued data: every order of summation gives the same floats, so
// the hierarchical sums must equal the flat ones exactly.
std::vector<float> rank_data(size_t n, int rank, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = float(int((i * 7 + size_t(rank) * 13 + size_t(salt)) % 23) - 11);
  return v;
}

void check_many_sums_in_flight(Groups& g) {
  const int rank = g.flat->rank();
  // Sizes above and below the hierarchy's threshold, started together and
  // finished out of order, as gradient buckets are.
  const std::vector<size_t> sizes = {40000, 100, loom::HierarchicalComm::kMinElements, 70001, 20000};
  std::vector<std::vector<float>> hier, flat;
  std::vector<std::unique_ptr<loom::Work>> works;
  for (size_t k = 0; k < sizes.size(); k++) {
    hier.push_back(rank_data(sizes[k], rank, int(k)));
    flat.push_back(hier.back());
    const loom::ReduceOp op = k == 3 ? loom::ReduceOp::Max : loom::ReduceOp::Sum;
    works.push_back(g.hier->all_reduce_async(hier[k].data(), sizes[k], loom::DType::f32, op));
    g.flat->all_reduce(flat[k].data(), sizes[k], loom::DType::f32, op);
  }
  works[1]->test();
  for (size_t k = sizes.size(); k-- > 0;) works[k]->wait();
  for (size_t k = 0; k < sizes.size(); k++) EXPECT_EQ(hier[k], flat[k]) << "buffer " << k;
  // The 16-bit wire: small integers are exact in bf16.
  std::vector<loom::bf16> h16(30000), f16(30000);
  for (size_t i = 0; i < h16.size(); i++) h16[i] = f16[i] = loom::float_to_bf16(float(int(i % 5) + rank));
  auto w16 = g.hier->all_reduce_sum_16bit_async(h16.data(), h16.size(), loom::DType::bf16);
  g.flat->all_reduce_sum_16bit_async(f16.data(), f16.size(), loom::DType::bf16)->wait();
  w16->wait();
  for (size_t i = 0; i < h16.size(); i++) ASSERT_EQ(h16[i].bits, f16[i].bits) << "element " << i;
  g.flat->barrier();
}

TEST(HierarchicalComm, SumsInFlightTogetherEqualTheFlatSums) {
  Groups g = make_groups(nullptr);
  check_many_sums_in_flight(g);
}

TEST(HierarchicalComm, SumsEqualTheFlatSumsWithAProgressEngine) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI gives no MPI_THREAD_MULTIPLE";
  loom::ProgressEngine engine({20});
  Groups g = make_groups(&engine);
  check_many_sums_in_flight(g);
}

// With a progress engine the stages move on by themselves: a sum started
// and then left alone (the caller "computes", making no call) is done at
// the first test() afterwards, all three stages issued by the engine.
TEST(HierarchicalComm, TheEngineIssuesTheStagesWhileTheCallerComputes) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI gives no MPI_THREAD_MULTIPLE";
  if (world_size() < 3) GTEST_SKIP() << "pretended nodes of 2 give a hierarchy from 3 ranks";
  loom::ProgressEngine engine({20});
  Groups g = make_groups(&engine);
  const int rank = g.flat->rank();
  std::vector<float> hier = rank_data(1 << 20, rank, 5), flat = hier;
  g.flat->barrier();
  auto work = g.hier->all_reduce_async(hier.data(), hier.size(), loom::DType::f32, loom::ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(work->test()) << "the stages did not move while the caller computed";
  work->wait();
  g.flat->all_reduce(flat.data(), flat.size(), loom::DType::f32, loom::ReduceOp::Sum);
  EXPECT_EQ(hier, flat);
  g.flat->barrier();
}

// The choice at start-up: forced, measured, and on one real node (flat,
// saying why). Every rank reaches the same choice.
TEST(HierarchicalComm, TheChoiceIsTheSameOnEveryRank) {
  const int world = world_size();
  const auto grid = loom::ParallelGrid::for_world(world, 0, 1, 1);
  auto one_node = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60}, {"hierarchical"});
  EXPECT_FALSE(one_node->dp_reduce().hierarchical);
  EXPECT_NE(one_node->dp_reduce().line().find("flat"), std::string::npos);
  if (world < 3) return;  // pretended nodes of 2 give a hierarchy from 3 ranks
  auto forced = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60}, {"hierarchical", 4 << 20, 2});
  EXPECT_TRUE(forced->dp_reduce().hierarchical);
  EXPECT_EQ(&forced->dp(), &forced->group(loom::GroupKind::data));
  auto measured = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{60}, {"auto", 1 << 20, 2});
  const loom::DpReduceChoice& c = measured->dp_reduce();
  EXPECT_TRUE(c.applies && c.measured);
  EXPECT_GT(c.flat_ms, 0);
  EXPECT_GT(c.hierarchical_ms, 0);
  int mine = c.hierarchical, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_TRUE(all == 0 || all == world) << c.line();
  EXPECT_NE(c.line().find("measured at start-up"), std::string::npos) << c.line();
}

// Training with the hierarchical reduction gives the flat run's losses (the
// sums differ only in their order), fp32 and bf16 on the wire.
TEST(HierarchicalComm, DataParallelTrainingGivesTheFlatLosses) {
  const int world = world_size();
  if (world < 3) GTEST_SKIP() << "pretended nodes of 2 give a hierarchy from 3 ranks";
  for (const char* wire : {"fp32", "bf16"}) {
    auto cfg = loom::load_run_config(
        LOOM_SOURCE_DIR "/configs/tiny.toml",
        {"train.batch_size=" + std::to_string(2 * world), "train.steps=4", "train.eval_every=0", "runtime.threads=1",
         "parallel.bucket_mb=0.1", std::string("precision.grad_reduce=\"") + wire + "\"",
         "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""});
    const auto grid = loom::ParallelGrid::for_world(world, 0, 1, 1);
    auto flat_ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{120});
    auto hier_ctx = loom::ParallelContext::create_mpi(grid, loom::MpiOptions{120}, {"hierarchical", 4 << 20, 2});
    ASSERT_TRUE(hier_ctx->dp_reduce().hierarchical);
    const auto flat = loom::train(cfg, *flat_ctx, nullptr);
    const auto hier = loom::train(cfg, *hier_ctx, nullptr);
    ASSERT_EQ(flat.train_losses.size(), hier.train_losses.size());
    const double tol = std::string(wire) == "bf16" ? 2e-3 : 1e-5;
    for (size_t i = 0; i < flat.train_losses.size(); i++)
      EXPECT_NEAR(hier.train_losses[i], flat.train_losses[i], tol * std::abs(flat.train_losses[i]))
          << wire << " step " << i;
  }
}

}  // namespace
