// mpi_types.cpp — Comm's types and reductions in MPI's terms; the world split into groups.
#include "comm/mpi_types.hpp"

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// MPI user-defined reductions: element-wise sum of 16-bit floats.
extern "C" void sum_fp16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_fp16(from_fp16(a[i]) + from_fp16(b[i]));
}
extern "C" void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

}  // namespace

MPI_Datatype to_mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U64:
      return MPI_UINT64_T;
    case DType::U8:
      return MPI_UINT8_T;
    case DType::F16:
    case DType::BF16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MpiOps::~MpiOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (fp16_sum_ != MPI_OP_NULL) MPI_Op_free(&fp16_sum_);
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
}

MPI_Op MpiOps::op(ReduceOp op, DType type) {
  if (is_half(type)) {
    MNIST_DDP_CHECK(op == ReduceOp::Sum, "16-bit floats are only summed");
    MPI_Op& mine = type == DType::BF16 ? bf16_sum_ : fp16_sum_;
    if (mine == MPI_OP_NULL)
      MPI_CHECK(MPI_Op_create(type == DType::BF16 ? sum_bf16 : sum_fp16, 1, &mine));
    return mine;
  }
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

MPI_Comm split_world(int color) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm group = MPI_COMM_NULL;
  // Collective: every rank of the job names its group; ranks keep their world order inside it.
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &group));
  return group;
}

}  // namespace mnist_ddp
