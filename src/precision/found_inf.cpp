#include "precision/found_inf.h"

namespace loom {

bool any_rank_found_inf(Communicator& comm, bool local_found_inf) {
  float flag = local_found_inf ? 1.0f : 0.0f;
  comm.all_reduce(&flag, 1, DType::f32, ReduceOp::Max);
  return flag != 0.0f;
}

}  // namespace loom
