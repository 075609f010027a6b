// comm.cpp — the typed front of Comm (dtype dispatch, byte accounting, averaging).
#include "mnist_ddp/comm.hpp"

#include "mnist_ddp/check.hpp"

namespace mnist_ddp {

void Comm::allreduce(std::span<float> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  allreduce_raw(d.data(), d.size(), DType::F32, op);
}
void Comm::allreduce(std::span<double> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  allreduce_raw(d.data(), d.size(), DType::F64, op);
}
void Comm::allreduce(std::span<std::int32_t> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  allreduce_raw(d.data(), d.size(), DType::I32, op);
}
void Comm::allreduce(std::span<std::int64_t> d, ReduceOp op) {
  count_bytes(d.size_bytes());
  allreduce_raw(d.data(), d.size(), DType::I64, op);
}
void Comm::allreduce_avg(std::span<float> d) {
  allreduce(d, ReduceOp::Sum);
  // Divide (not multiply by 1/size) so the result matches "sum, then divide" bit for bit.
  const float n = static_cast<float>(size());
  for (float& x : d) x /= n;
}
int Comm::start_allreduce_sum(std::span<float> d) {
  allreduce(d, ReduceOp::Sum);
  return -1;
}
int Comm::start_allreduce_sum16(std::span<std::uint16_t>, bool) {
  throw UserError(
      "--compression fp16/bf16: this communicator has no 16-bit all-reduce (CPU/MPI only)");
}
bool Comm::test(int) {
  return true;
}
void Comm::wait(int) {}
void Comm::bind_stream(void*) {}
bool Comm::capturable() const {
  return false;
}

void Comm::broadcast(std::span<float> d, int root) {
  count_bytes(d.size_bytes());
  broadcast_raw(d.data(), d.size(), DType::F32, root);
}
void Comm::broadcast(std::span<std::int64_t> d, int root) {
  count_bytes(d.size_bytes());
  broadcast_raw(d.data(), d.size(), DType::I64, root);
}
void Comm::broadcast(std::span<std::uint64_t> d, int root) {
  count_bytes(d.size_bytes());
  broadcast_raw(d.data(), d.size(), DType::U64, root);
}
void Comm::allgather(std::span<const std::uint64_t> send, std::span<std::uint64_t> recv) {
  count_bytes(send.size_bytes());
  allgather_raw(send.data(), recv.data(), send.size(), DType::U64);
}
void Comm::allgather(std::span<const float> send, std::span<float> recv) {
  count_bytes(send.size_bytes());
  allgather_raw(send.data(), recv.data(), send.size(), DType::F32);
}
void Comm::allgather(std::span<const double> send, std::span<double> recv) {
  count_bytes(send.size_bytes());
  allgather_raw(send.data(), recv.data(), send.size(), DType::F64);
}

}  // namespace mnist_ddp
