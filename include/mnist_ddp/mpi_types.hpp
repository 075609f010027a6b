// mpi_types.hpp — the mapping from Comm's element types and reductions to MPI's, shared by the
// host MPI comm and the host-staged GPU comm.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "mnist_ddp/comm.hpp"

namespace mnist_ddp {

MPI_Datatype to_mpi_type(DType t);
MPI_Op to_mpi_op(ReduceOp op);
std::size_t dtype_size(DType t);

}  // namespace mnist_ddp
