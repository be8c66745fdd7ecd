#include "comm/mpi_comm.h"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "comm/flight_recorder.h"
#include "comm/progress_engine.h"
#include "core/check.h"

namespace loom {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// Whether comm's ranks sit on more than one node (collective over comm). If
// my node holds every member, every member's does: one answer for all.
static bool group_spans_nodes(MPI_Comm comm) {
  int size = 1, on_my_node = 1;
  MPI_Comm_size(comm, &size);
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return false;
  MPI_Comm_size(node, &on_my_node);
  MPI_Comm_free(&node);
  return on_my_node < size;
}

// ---------------------------------------------------------------- runtime

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // OpenMPI's large collectives malloc a temporary buffer per call; glibc
  // serves those with fresh mmaps, so every call page-faults its buffer in
  // again (measured: a 64 MiB all_reduce took 5-8x longer). Keep large
  // blocks on the heap and freed memory in the process instead.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // A singleton's MPI sets these itself: look before it starts.
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    launched_ = launched_ || std::getenv(var) != nullptr;
  // OpenMPI's non-blocking all-reduce (coll/libnbc) takes a binomial tree
  // for every in-place call, loom's kind: rank 0 sums the whole buffer and
  // it crosses the root's links log2(P) times each way. Rabenseifner's
  // reduce-scatter + all-gather moves 2(P-1)/P of it per rank, as the
  // planner models, and spreads the sums over the ranks (measured by `loom
  // bench cluster`, dp 4 over 2 nodes at 1 Gb/s: the reduction alone 0.35 s
  // binomial, 0.23 s ring, 0.14 s Rabenseifner). Rooted reduces (ZeRO's
  // reduce-scatter, one per rank, and the hierarchical sum's first stage)
  // take the binomial tree: one message per child, where libnbc's default
  // for small groups, a chain of segments, moves a segment per poll. A value
  // the user set wins; other MPIs ignore the variables.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
  setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", 0);
  int provided = 0;
  // The training thread calls MPI, and (runtime.progress_thread) the
  // progress engine's thread polls beside it: MPI_THREAD_MULTIPLE. OpenMP
  // threads inside a rank never call MPI.
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Errors come back as return codes, which we turn into exceptions that
  // name the rank; the top level then aborts the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  world_spans_nodes_ = group_spans_nodes(MPI_COMM_WORLD);
}

MpiRuntime::~MpiRuntime() {
  engine_.reset();  // its thread out of MPI before MPI ends
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

ProgressEngine* MpiRuntime::progress_engine(int poll_us) {
  if (!multiple_) return nullptr;
  // Across nodes each step of a TCP transfer waits for the engine to get the
  // core from a computing thread: with a 100 us slice its wake-ups preempt
  // (Linux 6.12+), and `loom bench cluster`'s dp 2 across (one rank per node,
  // 1 MiB buckets) left a median 13% of the reduction exposed instead of
  // 27%. On one node (shared memory) the engine is needed less urgently and
  // the short slice measured 1% slower (`loom bench scaling --progress on`,
  // mean efficiency 0.952 against 0.961), so the default slice stays there.
  if (!engine_)
    engine_ = std::make_unique<ProgressEngine>(ProgressEngine::Options{poll_us, world_spans_nodes_ ? 100 : 0});
  return engine_.get();
}

void MpiRuntime::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // not reached
}

// ---------------------------------------------------------------- work

namespace {

// What the flight recorder knows of one operation.
struct FlightEntry {
  FlightRecorder* rec = nullptr;
  int slot = -1;
  uint64_t seq = 0;  // collective #seq, or the transfer's count for its peer and direction
  int peer = -1;     // point-to-point: the peer's group rank
  bool send = false;
};

// One loom operation: one MPI request, or several that all must complete
// (a reduce-scatter made of one rooted reduce per rank).
class MpiWork final : public Work {
 public:
  // engine: completes the requests from now on (test() then reads their flags).
  MpiWork(std::vector<MPI_Request> reqs, std::string what, double timeout_s, std::function<void()> finish,
          FlightEntry flight = {}, ProgressEngine* engine = nullptr)
      : reqs_(std::move(reqs)), what_(std::move(what)), timeout_s_(timeout_s), finish_(std::move(finish)),
        flight_(flight) {
    if (engine)
      for (MPI_Request r : reqs_) engine_done_.push_back(engine->adopt(r));
  }
  MpiWork(MPI_Request req, std::string what, double timeout_s, std::function<void()> finish, FlightEntry flight = {},
          ProgressEngine* engine = nullptr)
      : MpiWork(std::vector<MPI_Request>{req}, std::move(what), timeout_s, std::move(finish), flight, engine) {}
  ~MpiWork() override {
    if (!done_) wait();  // a dropped handle must not leave MPI writing into freed buffers
  }

  bool test() override {
    if (done_) return true;
    int flag = 1;
    if (!engine_done_.empty()) {
      for (const ProgressEngine::Done& d : engine_done_) flag = flag && d->load(std::memory_order_acquire);
    } else {
      MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    }
    if (flag) complete();
    return done_;
  }

  void wait() override {
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    for (long polls = 0; !test(); polls++) {
      // Each MPI_Test also drives the transfer, so keep polling; after a
      // short spin, yield between polls so that a waiting rank leaves its core
      // to oversubscribed peers that have work (returns at once if none do).
      // With the engine, the flag is read: spin briefly, then leave the core
      // to the engine's thread.
      if (!engine_done_.empty() && polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(10));
      else if (polls > 1000) sched_yield();
      if (timeout_s_ > 0 && (polls & 63) == 0 &&
          std::chrono::duration<double>(Clock::now() - start).count() > timeout_s_)
        timed_out();
    }
  }

 private:
  void complete() {
    done_ = true;
    if (flight_.rec) {
      if (flight_.peer < 0) flight_.rec->complete(flight_.slot, flight_.seq);
      else flight_.rec->complete_p2p(flight_.slot, flight_.send, flight_.peer);
    }
    if (finish_) finish_();
  }
  [[noreturn]] void timed_out() {
    std::fprintf(stderr, "loom: %s: no completion after %.0f s; aborting the job\n", what_.c_str(), timeout_s_);
    if (flight_.rec && flight_.seq > 0) {
      const HangReport report = flight_.peer < 0 ? flight_.rec->explain_collective(flight_.slot, flight_.seq)
                                                 : flight_.rec->explain_p2p(flight_.slot, flight_.send, flight_.peer,
                                                                            flight_.seq);
      std::fprintf(stderr, "loom: %s\n", report.text.c_str());
      flight_.rec->write_hang(report, what_);
    }
    std::fflush(stderr);
    // Give the other stuck ranks a moment to report what they wait on.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    MpiRuntime::abort_job(3);
  }

  std::vector<MPI_Request> reqs_;
  std::vector<ProgressEngine::Done> engine_done_;  // not empty: the engine owns reqs_
  std::string what_;
  double timeout_s_;
  std::function<void()> finish_;
  FlightEntry flight_;
  bool done_ = false;
};

MPI_Datatype raw_type(DType t) { return t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

int as_int(size_t count) {
  LOOM_CHECK(count <= size_t(INT_MAX), "message of %zu elements exceeds MPI's int count", count);
  return int(count);
}

void to_f32(float* out, const void* in, size_t n, DType t) {
  if (t == DType::bf16) convert_bf16_to_f32(out, static_cast<const bf16*>(in), n);
  else convert_f16_to_f32(out, static_cast<const f16*>(in), n);
}
void from_f32(void* out, const float* in, size_t n, DType t) {
  if (t == DType::bf16) convert_f32_to_bf16(static_cast<bf16*>(out), in, n);
  else convert_f32_to_f16(static_cast<f16*>(out), in, n);
}

}  // namespace

// ---------------------------------------------------------------- comm

MpiComm::MpiComm(MPI_Comm comm, std::string name, std::vector<int> members, const MpiOptions& opts)
    : comm_(comm), name_(std::move(name)), members_(std::move(members)), opts_(opts) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  LOOM_CHECK(size_t(size_) == members_.size(), "group %s: MPI size %d but %zu members", name_.c_str(), size_,
             members_.size());
  spans_nodes_ = group_spans_nodes(comm_);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Op* op : {&sum_bf16_, &sum_f16_})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiComm> MpiComm::split(const std::string& name, int color, const std::vector<int>& members,
                                        const MpiOptions& opts) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (color < 0) {
    MPI_Comm none;
    const int rc = MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none);
    LOOM_CHECK(rc == MPI_SUCCESS && none == MPI_COMM_NULL, "rank %d: MPI_Comm_split outside group %s failed (%d)",
               world_rank, name.c_str(), rc);
    return nullptr;
  }
  int key = -1;
  for (size_t i = 0; i < members.size(); i++)
    if (members[i] == world_rank) key = int(i);
  LOOM_CHECK(key >= 0, "rank %d is not a member of its own %s group", world_rank, name.c_str());
  MPI_Comm comm;
  int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
  LOOM_CHECK(rc == MPI_SUCCESS, "rank %d: MPI_Comm_split for group %s failed (%d)", world_rank, name.c_str(), rc);
  return std::unique_ptr<MpiComm>(new MpiComm(comm, name, members, opts));
}

std::unique_ptr<MpiComm> MpiComm::world(const MpiOptions& opts) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> all(size);
  for (int i = 0; i < size; i++) all[i] = i;
  return split("world", 0, all, opts);
}

void MpiComm::check(int rc, const char* what) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(strprintf("rank %d: MPI error in %s on group %s: %s", members_.at(rank_), what, name_.c_str(), text));
}

std::string MpiComm::describe(const char* op, size_t count, DType dtype) const {
  std::string ranks;
  for (size_t i = 0; i < members_.size(); i++) {
    if (i) ranks += ',';
    ranks += std::to_string(members_[i]);
  }
  return strprintf("rank %d waiting for %s of %zu %s elements on group %s (ranks %s)", members_.at(rank_), op,
                   count, dtype_name(dtype), name_.c_str(), ranks.c_str());
}

namespace {

// What MPI reduces: fp32 always. 16-bit data is widened into scratch first
// and narrowed back by finish(), which also applies the 1/n of an average.
struct ReduceBuffers {
  const void* send;  // MPI_IN_PLACE for in-place all_reduce
  void* recv;
  std::function<void()> finish;
};

ReduceBuffers prepare_reduce(const void* send, void* recv, size_t send_count, size_t recv_count, DType dtype,
                             ReduceOp op, int group_size) {
  const float scale = op == ReduceOp::Avg ? 1.0f / float(group_size) : 1.0f;
  const bool in_place = send == nullptr;
  if (dtype == DType::f32) {
    auto finish = [recv, recv_count, scale] {
      if (scale == 1.0f) return;
      float* p = static_cast<float*>(recv);
      for (size_t i = 0; i < recv_count; i++) p[i] *= scale;
    };
    return {in_place ? MPI_IN_PLACE : send, recv, finish};
  }
  auto wide_out = std::make_shared<std::vector<float>>(recv_count);
  std::shared_ptr<std::vector<float>> wide_in;
  if (in_place) {
    to_f32(wide_out->data(), recv, recv_count, dtype);
  } else {
    wide_in = std::make_shared<std::vector<float>>(send_count);
    to_f32(wide_in->data(), send, send_count, dtype);
  }
  auto finish = [wide_in, wide_out, recv, recv_count, dtype, scale] {
    if (scale != 1.0f)
      for (float& x : *wide_out) x *= scale;
    from_f32(recv, wide_out->data(), recv_count, dtype);
  };
  return {in_place ? MPI_IN_PLACE : wide_in->data(), wide_out->data(), finish};
}

}  // namespace

namespace {

// MPI user reductions on 16-bit payloads (MPI_UINT16_T): inout = round(in + inout),
// the addition in fp32. Commutative; the rounding makes them non-associative,
// which MPI allows for user operations.
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; i++) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  const f16* a = static_cast<const f16*>(in);
  f16* b = static_cast<f16*>(inout);
  for (int i = 0; i < *len; i++) b[i] = float_to_f16(f16_to_float(a[i]) + f16_to_float(b[i]));
}

}  // namespace

MPI_Op MpiComm::sum_16bit_op(DType dtype) {
  LOOM_CHECK(dtype == DType::bf16 || dtype == DType::f16, "a 16-bit sum of %s data", dtype_name(dtype));
  MPI_Op& op = dtype == DType::bf16 ? sum_bf16_ : sum_f16_;
  if (op == MPI_OP_NULL) check(MPI_Op_create(dtype == DType::bf16 ? sum_bf16 : sum_f16, 1, &op), "MPI_Op_create");
  return op;
}

std::unique_ptr<Work> MpiComm::all_reduce_sum_16bit_async(void* buf, size_t count, DType dtype) {
  MPI_Op op = sum_16bit_op(dtype);
  MPI_Request req;
  const uint64_t seq = enter_collective("all_reduce(sum, 16-bit)", count, dtype);
  check(MPI_Iallreduce(MPI_IN_PLACE, buf, as_int(count), MPI_UINT16_T, op, comm_, &req), "all_reduce");
  return std::make_unique<MpiWork>(req, describe("all_reduce(sum, 16-bit wire)", count, dtype), opts_.timeout_s,
                                   nullptr, FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

std::unique_ptr<Work> MpiComm::reduce_scatter_sum_16bit_async(const void* send, void* recv, size_t count,
                                                              DType dtype) {
  MPI_Op op = sum_16bit_op(dtype);
  const uint64_t seq = enter_collective("reduce_scatter(sum, 16-bit)", count, dtype);
  return std::make_unique<MpiWork>(rooted_reduces(send, recv, count, MPI_UINT16_T, op),
                                   describe("reduce_scatter(sum, 16-bit wire)", count, dtype), opts_.timeout_s,
                                   nullptr, FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

std::unique_ptr<Work> MpiComm::reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, int root) {
  ReduceBuffers rb = prepare_reduce(nullptr, buf, count, count, dtype, op, size_);
  // In place at the root; elsewhere the (widened) data is only sent.
  const void* send = rank_ == root ? MPI_IN_PLACE : static_cast<const void*>(rb.recv);
  MPI_Request req;
  const std::string name = strprintf("reduce(%s, root %d)", reduce_op_name(op), root);
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  check(MPI_Ireduce(send, rb.recv, as_int(count), MPI_FLOAT, mpi_op(op), root, comm_, &req), "reduce");
  return std::make_unique<MpiWork>(req, describe(name.c_str(), count, dtype), opts_.timeout_s, rb.finish,
                                   FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

std::unique_ptr<Work> MpiComm::reduce_sum_16bit_async(void* buf, size_t count, DType dtype, int root) {
  MPI_Op op = sum_16bit_op(dtype);
  const void* send = rank_ == root ? MPI_IN_PLACE : buf;
  MPI_Request req;
  const uint64_t seq = enter_collective("reduce(sum, 16-bit)", count, dtype);
  check(MPI_Ireduce(send, buf, as_int(count), MPI_UINT16_T, op, root, comm_, &req), "reduce");
  return std::make_unique<MpiWork>(req, describe("reduce(sum, 16-bit wire)", count, dtype), opts_.timeout_s,
                                   nullptr, FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

Watchdog& MpiComm::watchdog() {
  if (!watchdog_) watchdog_ = std::make_unique<Watchdog>(opts_.timeout_s);
  return *watchdog_;
}

std::unique_ptr<Work> MpiComm::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) {
  ReduceBuffers rb = prepare_reduce(nullptr, buf, count, count, dtype, op, size_);
  MPI_Request req;
  const std::string name = strprintf("all_reduce(%s)", reduce_op_name(op));
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  check(MPI_Iallreduce(rb.send, rb.recv, as_int(count), MPI_FLOAT, mpi_op(op), comm_, &req), "all_reduce");
  return std::make_unique<MpiWork>(req, describe(name.c_str(), count, dtype), opts_.timeout_s, rb.finish,
                                   FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

void MpiComm::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  // A large sum across nodes waits on the non-blocking all-reduce
  // (coll/libnbc, Rabenseifner, set in MpiRuntime): between 2 emulated nodes
  // at 1 Gb/s OpenMPI's blocking MPI_Allreduce (coll/tuned, whichever of its
  // algorithms) reached 50-60% of the link where the non-blocking one reached
  // 88% (`loom bench comm-child`'s all_reduce and iall_reduce rows under
  // scripts/cluster/emulate.sh). So every large sum that crosses a link runs
  // one algorithm, the one the planner's link figure is measured with. On
  // one node the two measure alike and tuned stays; small sums keep tuned's
  // latency-bound algorithms.
  if (spans_nodes_ && count * dtype_size(dtype) >= kNonBlockingAllReduceBytes) {
    all_reduce_async(buf, count, dtype, op)->wait();
    return;
  }
  ReduceBuffers rb = prepare_reduce(nullptr, buf, count, count, dtype, op, size_);
  const std::string name = strprintf("all_reduce(%s)", reduce_op_name(op));
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  {
    WatchdogScope guard(watchdog(), describe(name.c_str(), count, dtype), explain_collective(seq));
    check(MPI_Allreduce(rb.send, rb.recv, as_int(count), MPI_FLOAT, mpi_op(op), comm_), "all_reduce");
  }
  if (flight_) flight_->complete(flight_slot_, seq);
  rb.finish();
}

std::unique_ptr<Work> MpiComm::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                    ReduceOp op) {
  ReduceBuffers rb = prepare_reduce(send, recv, count * size_t(size_), count, dtype, op, size_);
  const std::string name = strprintf("reduce_scatter(%s)", reduce_op_name(op));
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  return std::make_unique<MpiWork>(rooted_reduces(rb.send, rb.recv, count, MPI_FLOAT, mpi_op(op)),
                                   describe(name.c_str(), count, dtype), opts_.timeout_s, rb.finish,
                                   FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

// A non-blocking reduce-scatter as one rooted reduce per rank, block r onto
// rank r, issued in rank order on every rank. OpenMPI's own (coll/libnbc)
// reduces the whole buffer onto rank 0 and scatters it from there: rank 0
// sums everything and the whole buffer crosses its links. Here each rank sums
// its own block and sends (P-1)/P of the buffer, as the planner models.
std::vector<MPI_Request> MpiComm::rooted_reduces(const void* send, void* recv, size_t count, MPI_Datatype type,
                                                 MPI_Op op) {
  int bytes = 0;
  MPI_Type_size(type, &bytes);
  std::vector<MPI_Request> reqs(size_t(size_), MPI_REQUEST_NULL);
  for (int r = 0; r < size_; r++) {
    const void* block = static_cast<const char*>(send) + size_t(r) * count * size_t(bytes);
    check(MPI_Ireduce(block, r == rank_ ? recv : nullptr, as_int(count), type, op, r, comm_, &reqs[size_t(r)]),
          "reduce_scatter");
  }
  return reqs;
}

void MpiComm::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  ReduceBuffers rb = prepare_reduce(send, recv, count * size_t(size_), count, dtype, op, size_);
  const std::string name = strprintf("reduce_scatter(%s)", reduce_op_name(op));
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  {
    WatchdogScope guard(watchdog(), describe(name.c_str(), count, dtype), explain_collective(seq));
    check(MPI_Reduce_scatter_block(rb.send, rb.recv, as_int(count), MPI_FLOAT, mpi_op(op), comm_), "reduce_scatter");
  }
  if (flight_) flight_->complete(flight_slot_, seq);
  rb.finish();
}

// In place when `send` is this rank's own block of `recv` (MPI forbids
// aliased buffers and wants MPI_IN_PLACE instead).
static const void* gather_source(const void* send, void* recv, size_t count, DType dtype, int rank) {
  return send == static_cast<char*>(recv) + size_t(rank) * count * dtype_size(dtype) ? MPI_IN_PLACE : send;
}

std::unique_ptr<Work> MpiComm::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  MPI_Request req;
  send = gather_source(send, recv, count, dtype, rank_);
  const uint64_t seq = enter_collective("all_gather", count, dtype);
  check(MPI_Iallgather(send, as_int(count), raw_type(dtype), recv, as_int(count), raw_type(dtype), comm_, &req),
        "all_gather");
  return std::make_unique<MpiWork>(req, describe("all_gather", count, dtype), opts_.timeout_s, nullptr,
                                   FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

void MpiComm::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  const uint64_t seq = enter_collective("all_gather", count, dtype);
  {
    WatchdogScope guard(watchdog(), describe("all_gather", count, dtype), explain_collective(seq));
    send = gather_source(send, recv, count, dtype, rank_);
    check(MPI_Allgather(send, as_int(count), raw_type(dtype), recv, as_int(count), raw_type(dtype), comm_),
          "all_gather");
  }
  if (flight_) flight_->complete(flight_slot_, seq);
}

std::unique_ptr<Work> MpiComm::broadcast_async(void* buf, size_t count, DType dtype, int root) {
  MPI_Request req;
  const std::string name = strprintf("broadcast(root %d)", root);
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  check(MPI_Ibcast(buf, as_int(count), raw_type(dtype), root, comm_, &req), "broadcast");
  return std::make_unique<MpiWork>(req, describe(name.c_str(), count, dtype), opts_.timeout_s, nullptr,
                                   FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

void MpiComm::broadcast(void* buf, size_t count, DType dtype, int root) {
  const std::string name = strprintf("broadcast(root %d)", root);
  const uint64_t seq = enter_collective(name.c_str(), count, dtype);
  {
    WatchdogScope guard(watchdog(), describe(name.c_str(), count, dtype), explain_collective(seq));
    check(MPI_Bcast(buf, as_int(count), raw_type(dtype), root, comm_), "broadcast");
  }
  if (flight_) flight_->complete(flight_slot_, seq);
}

std::unique_ptr<Work> MpiComm::send_async(const void* buf, size_t count, DType dtype, int peer, int tag) {
  MPI_Request req;
  const std::string name = strprintf("send(to %d, tag %d)", peer, tag);
  const uint64_t n = flight_ ? flight_->enter_p2p(flight_slot_, true, peer, name.c_str()) : 0;
  check(MPI_Isend(buf, as_int(count), raw_type(dtype), peer, tag, comm_, &req), "send");
  return std::make_unique<MpiWork>(req, describe(name.c_str(), count, dtype), opts_.timeout_s, nullptr,
                                   FlightEntry{flight_, flight_slot_, n, peer, true}, opts_.engine);
}

std::unique_ptr<Work> MpiComm::recv_async(void* buf, size_t count, DType dtype, int peer, int tag) {
  MPI_Request req;
  const std::string name = strprintf("recv(from %d, tag %d)", peer, tag);
  const uint64_t n = flight_ ? flight_->enter_p2p(flight_slot_, false, peer, name.c_str()) : 0;
  check(MPI_Irecv(buf, as_int(count), raw_type(dtype), peer, tag, comm_, &req), "recv");
  return std::make_unique<MpiWork>(req, describe(name.c_str(), count, dtype), opts_.timeout_s, nullptr,
                                   FlightEntry{flight_, flight_slot_, n, peer, false}, opts_.engine);
}

std::unique_ptr<Work> MpiComm::all_to_all_rows_async(const void* send, const int* send_rows, const int* send_first,
                                                     void* recv, const int* recv_rows, const int* recv_first,
                                                     size_t row, DType dtype) {
  const size_t n = size_t(size_);
  // MPI reads the count arrays until the exchange completes: the work keeps a copy.
  auto counts = std::make_shared<std::vector<int>>(4 * n);
  std::copy(send_rows, send_rows + n, counts->begin());
  std::copy(send_first, send_first + n, counts->begin() + long(n));
  std::copy(recv_rows, recv_rows + n, counts->begin() + long(2 * n));
  std::copy(recv_first, recv_first + n, counts->begin() + long(3 * n));
  size_t rows = 0;
  for (size_t r = 0; r < n; r++) rows += size_t(send_rows[r]);
  MPI_Datatype row_type;
  check(MPI_Type_contiguous(as_int(row * dtype_size(dtype)), MPI_BYTE, &row_type), "all_to_all");
  check(MPI_Type_commit(&row_type), "all_to_all");
  const uint64_t seq = enter_collective("all_to_all", rows * row, dtype);
  MPI_Request req;
  int* c = counts->data();
  check(MPI_Ialltoallv(send, c, c + n, row_type, recv, c + 2 * n, c + 3 * n, row_type, comm_, &req), "all_to_all");
  MPI_Type_free(&row_type);  // freed once the pending exchange no longer needs it
  return std::make_unique<MpiWork>(req, describe("all_to_all", rows * row, dtype), opts_.timeout_s,
                                   [counts] {}, FlightEntry{flight_, flight_slot_, seq}, opts_.engine);
}

void MpiComm::barrier() {
  const uint64_t seq = enter_collective("barrier", 0, DType::f32);
  {
    WatchdogScope guard(watchdog(), describe("barrier", 0, DType::f32), explain_collective(seq));
    check(MPI_Barrier(comm_), "barrier");
  }
  if (flight_) flight_->complete(flight_slot_, seq);
}

void MpiComm::set_flight_recorder(FlightRecorder* recorder) {
  flight_ = recorder;
  flight_slot_ = recorder ? recorder->add_group(name_, members_, rank_) : -1;
}

uint64_t MpiComm::enter_collective(const char* op, size_t count, DType dtype) {
  if (!flight_) return 0;
  char text[64];
  std::snprintf(text, sizeof text, "%s of %zu %s", op, count, dtype_name(dtype));
  return flight_->enter(flight_slot_, text);
}

std::function<std::string(const std::string&)> MpiComm::explain_collective(uint64_t seq) {
  if (!flight_ || seq == 0) return {};
  return [this, seq](const std::string& what) {
    const HangReport report = flight_->explain_collective(flight_slot_, seq);
    flight_->write_hang(report, what);
    return report.text;
  };
}

}  // namespace loom
