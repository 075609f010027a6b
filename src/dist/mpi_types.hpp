// mpi_types.hpp — what the MPI-based communicators share: the mapping from Comm's element types
// and reductions to MPI's (host MPI comm, host-staged GPU comm) and the split of the world into
// groups (MPI and NCCL group communicators).
#pragma once

#include <mpi.h>

#include <cstddef>

#include "mnist_ddp/dist/comm.hpp"

namespace mnist_ddp {

MPI_Datatype to_mpi_type(DType t);
MPI_Op to_mpi_op(ReduceOp op);
std::size_t dtype_size(DType t);
// Collective over the world: the ranks passing the same color, in world order, as a new MPI
// communicator (the caller frees it).
MPI_Comm split_world(int color);

}  // namespace mnist_ddp
