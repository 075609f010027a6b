// replicas.cpp — broadcasts, gradient averaging and the replica check.
#include "mnist_ddp/comm/replicas.hpp"

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {
std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
}  // namespace

void broadcast_model(Comm& comm, ConvNet& model, Comm& host_comm) {
  // Collective: every replica starts from rank 0's initial weights.
  comm.broadcast(model.params(), 0);
  broadcast_buffers(comm, model, host_comm);
}

void broadcast_buffers(Comm& comm, ConvNet& model, Comm& host_comm) {
  // Collective: BN running statistics follow rank 0 (DDP's default), so every replica and every
  // evaluation agree.
  comm.broadcast(model.buffers(), 0);
  host_comm.broadcast(model.num_batches_tracked(), 0);
}

void average_gradients(Comm& comm, ConvNet& model) {
  // Collective: the averaged gradient is identical on every rank, so identical SGD updates keep
  // the replicas bitwise equal.
  comm.allreduce_avg(model.grads());
}

void unscale_and_agree(GradScaler& scaler, Comm& comm, std::span<float> grads) {
  scaler.unscale_and_check(grads);
  // Collective: every rank skips the step or none does (max of the 0/1 flags), so the replicas
  // stay identical even where only one rank's gradients overflowed (e.g. under a hook that
  // does not carry inf through the sum).
  comm.allreduce(std::span<float>(scaler.found_inf(), 1), ReduceOp::Max);
}

BnSync make_sync_bn(Comm& comm) {
  BnSync s;
  s.stats = [&comm](int c, double* mean, double* var, double* count) {
    const auto cs = static_cast<std::size_t>(c);
    const auto ranks = static_cast<std::size_t>(comm.size());
    std::vector<double> mine(3 * cs), all(3 * cs * ranks);
    for (std::size_t ch = 0; ch < cs; ++ch) {
      mine[ch] = mean[ch];
      mine[cs + ch] = var[ch];
      mine[2 * cs + ch] = *count;
    }
    // Collective: every rank's per-channel statistics and count, combined exactly below (in
    // the same order on every rank, so every rank gets bitwise the same result).
    comm.allgather(std::span<const double>(mine), all);
    for (std::size_t ch = 0; ch < cs; ++ch) {
      double n = 0, sum = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        const double* b = all.data() + 3 * cs * r;
        n += b[2 * cs + ch];
        sum += b[2 * cs + ch] * b[ch];
      }
      const double mu = sum / n;
      double m2 = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        const double* b = all.data() + 3 * cs * r;
        const double d = b[ch] - mu;
        m2 += b[2 * cs + ch] * (b[cs + ch] + d * d);
      }
      mean[ch] = mu;
      var[ch] = m2 / n;
      if (ch == 0) *count = n;
    }
  };
  s.grad_sums = [&comm](int c, double* sums, double* count) {
    const auto cs = static_cast<std::size_t>(c);
    std::vector<double> buf(sums, sums + 2 * cs);
    buf.push_back(*count);
    // Collective: the BN backward's two reductions and the count, summed over ranks.
    comm.allreduce(std::span<double>(buf), ReduceOp::Sum);
    std::copy(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(2 * cs), sums);
    *count = buf[2 * cs];
  };
  return s;
}

std::uint64_t replica_hash(ConvNet& model) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  // Parameters only: BN running statistics are rank-local between DDP's broadcasts (each rank's
  // last forward updated them from its own batch), exactly as in PyTorch.
  std::vector<float> host(model.params().size());
  model.ops().download(model.params().data(), host.data(), host.size() * sizeof(float));
  return fnv1a(h, host.data(), host.size() * sizeof(float));
}

void check_replicas(Comm& comm, ConvNet& model, std::int64_t step) {  // comm: host memory
  const std::uint64_t mine = replica_hash(model);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  // Collective: every rank sees every hash, so all ranks reach the same verdict together.
  comm.allgather(std::span<const std::uint64_t>(&mine, 1), all);
  std::string bad;
  for (int r = 1; r < comm.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != all[0])
      bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!bad.empty()) {
    throw UserError(
        fmt::format("--check-replicas: after step {} the parameters of rank(s) {} differ from "
                    "rank 0 (hash {:016x} on rank 0). The replicas diverged: this points at "
                    "non-deterministic reductions or a hardware fault on those ranks' nodes",
                    step, bad, all[0]),
        kExitReplicaDiverged);
  }
}

}  // namespace mnist_ddp
