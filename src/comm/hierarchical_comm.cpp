#include "comm/hierarchical_comm.h"

#include "core/check.h"

namespace loom {

struct HierarchicalComm::Chain {
  void* buf = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::Sum;
  bool wire16 = false;
  uint64_t seq = 0;   // start order
  int stage = 0;      // the next stage to issue (3: all issued)
  bool done = false;  // every stage complete
  std::unique_ptr<Work> current;  // the stage in flight (none: a stage with nothing to do on this rank)
};

namespace {

class ChainWork final : public Work {
 public:
  ChainWork(HierarchicalComm& comm, std::shared_ptr<HierarchicalComm::Chain> chain)
      : comm_(comm), chain_(std::move(chain)) {}
  ~ChainWork() override { wait(); }  // MPI must not write into a buffer its owner has let go
  bool test() override { return comm_.poll(*chain_); }
  void wait() override { comm_.wait_for(*chain_); }

 private:
  HierarchicalComm& comm_;
  std::shared_ptr<HierarchicalComm::Chain> chain_;
};

}  // namespace

HierarchicalComm::HierarchicalComm(Communicator& flat, std::unique_ptr<Communicator> node,
                                   std::unique_ptr<Communicator> nodes, std::unique_ptr<Communicator> bcast,
                                   std::string description, ProgressEngine* engine)
    : flat_(flat),
      node_(std::move(node)),
      nodes_(std::move(nodes)),
      bcast_(std::move(bcast)),
      description_(std::move(description)),
      engine_(engine) {
  LOOM_CHECK(node_ && bcast_ && node_->size() == bcast_->size(),
             "hierarchical group %s needs two node groups of one size", flat_.name().c_str());
  LOOM_CHECK((node_->rank() == 0) == (nodes_ != nullptr), "group %s: rank %d leads its node but has no leaders' group",
             flat_.name().c_str(), flat_.rank());
  if (engine_) driver_ = engine_->add_driver([this] { return drive(); });
}

HierarchicalComm::~HierarchicalComm() {
  if (driver_ >= 0) engine_->remove_driver(driver_);  // waits out a drive() in progress
}

std::unique_ptr<Work> HierarchicalComm::all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) {
  if (dtype != DType::f32 || op == ReduceOp::Avg || count < kMinElements)
    return flat_.all_reduce_async(buf, count, dtype, op);
  return start(buf, count, dtype, op, false);
}

std::unique_ptr<Work> HierarchicalComm::all_reduce_sum_16bit_async(void* buf, size_t count, DType dtype) {
  if (count < kMinElements) return flat_.all_reduce_sum_16bit_async(buf, count, dtype);
  return start(buf, count, dtype, ReduceOp::Sum, true);
}

std::unique_ptr<Work> HierarchicalComm::start(void* buf, size_t count, DType dtype, ReduceOp op, bool wire16) {
  auto chain = std::make_shared<Chain>();
  chain->buf = buf, chain->count = count, chain->dtype = dtype, chain->op = op, chain->wire16 = wire16;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    chain->seq = started_++;
    live_.push_back(chain);
    advance();
  }
  return std::make_unique<ChainWork>(*this, std::move(chain));
}

std::unique_ptr<Work> HierarchicalComm::issue(Chain& c, int stage) {
  switch (stage) {
    case 0:  // the node's sum onto its leader
      if (node_->size() == 1) return nullptr;
      return c.wire16 ? node_->reduce_sum_16bit_async(c.buf, c.count, c.dtype, 0)
                      : node_->reduce_async(c.buf, c.count, c.dtype, c.op, 0);
    case 1:  // the leaders' sum over the network
      if (!nodes_ || nodes_->size() == 1) return nullptr;
      return c.wire16 ? nodes_->all_reduce_sum_16bit_async(c.buf, c.count, c.dtype)
                      : nodes_->all_reduce_async(c.buf, c.count, c.dtype, c.op);
    default:  // the total back to the node
      if (bcast_->size() == 1) return nullptr;
      return bcast_->broadcast_async(c.buf, c.count, c.dtype, 0);
  }
}

void HierarchicalComm::advance() {
  for (const std::shared_ptr<Chain>& c : live_) {
    while (!c->done) {
      if (c->current && !c->current->test()) break;
      c->current.reset();
      if (c->stage == 3) {
        c->done = true;
        break;
      }
      if (issued_[c->stage] != c->seq) break;  // an earlier operation has not issued this stage yet
      c->current = issue(*c, c->stage);
      issued_[c->stage]++;
      c->stage++;
    }
  }
  while (!live_.empty() && live_.front()->done) live_.pop_front();
}

bool HierarchicalComm::poll(const Chain& chain) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!chain.done) advance();
  return chain.done;
}

bool HierarchicalComm::drive() {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock) return true;  // the caller is polling or waiting: it moves them
  advance();
  return !live_.empty();
}

void HierarchicalComm::wait_for(const Chain& chain) {
  // The oldest unfinished operation is never held back by another, so its
  // stage in flight always moves things on (under that stage's deadline).
  // The lock stays held: the engine's driver leaves the chains to us.
  std::lock_guard<std::mutex> lock(mutex_);
  for (advance(); !chain.done; advance()) live_.front()->current->wait();
}

void HierarchicalComm::set_flight_recorder(FlightRecorder* recorder) {
  for (Communicator* c : {&flat_, node_.get(), nodes_.get(), bcast_.get()})
    if (c) c->set_flight_recorder(recorder);
}

}  // namespace loom
