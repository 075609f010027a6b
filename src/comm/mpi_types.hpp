// mpi_types.hpp — what the MPI-based communicators share: the mapping from Comm's element types
// and reductions to MPI's (host MPI comm, host-staged GPU comm), the 16-bit float sums MPI lacks,
// and the split of the world into groups (MPI and NCCL group communicators).
#pragma once

#include <mpi.h>

#include "mnist_ddp/comm/comm.hpp"

namespace mnist_ddp {

// F16/BF16 travel as MPI_UINT16_T (MPI has no 16-bit float type); MpiOps sums them.
MPI_Datatype to_mpi_type(DType t);

// The MPI reduction for an op on a type: MPI's own, or for a 16-bit float sum a user-defined
// reduction (computed in float, rounded back to nearest even, like a 16-bit all-reduce on the
// device), created on first use and freed with this object (before MPI_Finalize, as the
// communicator that owns it is).
class MpiOps {
 public:
  MpiOps() = default;
  ~MpiOps();
  MpiOps(const MpiOps&) = delete;
  MpiOps& operator=(const MpiOps&) = delete;
  MPI_Op op(ReduceOp op, DType type);

 private:
  MPI_Op fp16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
};

// Collective over the world: the ranks passing the same color, in world order, as a new MPI
// communicator (the caller frees it).
MPI_Comm split_world(int color);

}  // namespace mnist_ddp
