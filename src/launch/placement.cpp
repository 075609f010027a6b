// placement.cpp — the start-up record of every rank: its encoding for one allgather
// (comm/agree.hpp gathers it), the table rank 0 prints, and NCCL's one-GPU-per-rank check over it.
#include "mnist_ddp/launch/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

void put_string(const std::string& s, std::size_t chars, std::uint64_t* words) {
  std::memcpy(words, s.data(), std::min(s.size(), chars));  // the rest stays NUL
}

// The physical GPU of a device string: "cuda:1 NVIDIA H100 (pci 0000:1a:00.0)" without "cuda:1 "
// (two ranks can see one GPU under different indices); "" for the CPU.
std::string physical_gpu(const std::string& device) {
  if (device.rfind("cuda:", 0) != 0) return "";
  const auto space = device.find(' ');
  return space == std::string::npos ? device : device.substr(space + 1);
}

std::string get_string(const std::uint64_t* words, std::size_t chars) {
  const char* p = reinterpret_cast<const char*>(words);
  return std::string(p, strnlen(p, chars));
}

}  // namespace

std::vector<std::uint64_t> encode_placement(const RankPlacement& p) {
  std::vector<std::uint64_t> w(kPlacementWords, 0);
  w[0] = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.rank)) << 32) |
         static_cast<std::uint32_t>(p.local_rank);
  w[1] = static_cast<std::uint64_t>(p.pid);
  put_string(p.host, kPlacementHostChars, &w[2]);
  put_string(p.device, kPlacementDeviceChars, &w[2 + (kPlacementHostChars + 1) / 8]);
  return w;
}

RankPlacement decode_placement(std::span<const std::uint64_t> w) {
  RankPlacement p;
  p.rank = static_cast<int>(static_cast<std::int32_t>(w[0] >> 32));
  p.local_rank = static_cast<int>(static_cast<std::int32_t>(w[0] & 0xffffffffu));
  p.pid = static_cast<long>(w[1]);
  p.host = get_string(&w[2], kPlacementHostChars);
  p.device = get_string(&w[2 + (kPlacementHostChars + 1) / 8], kPlacementDeviceChars);
  return p;
}

std::vector<std::string> hosts_of(std::span<const RankPlacement> all) {
  std::vector<std::string> hosts;
  hosts.reserve(all.size());
  for (const RankPlacement& p : all) hosts.push_back(p.host);
  return hosts;
}

std::string placement_table(std::span<const RankPlacement> all) {
  std::size_t host_w = 4, pid_w = 3, rank_w = 4;
  for (const auto& p : all) {
    host_w = std::max(host_w, p.host.size());
    pid_w = std::max(pid_w, std::to_string(p.pid).size());
    rank_w = std::max(rank_w, std::to_string(p.rank).size());
  }
  std::string out = fmt::format("# {:>{}}  {:>5}  {:<{}}  {:>{}}  {}\n", "rank", rank_w, "local",
                                "host", host_w, "pid", pid_w, "device");
  for (const auto& p : all)
    out += fmt::format("# {:>{}}  {:>5}  {:<{}}  {:>{}}  {}\n", p.rank, rank_w, p.local_rank,
                       p.host, host_w, p.pid, pid_w, p.device);
  return out;
}

void check_gpus_exclusive(std::span<const RankPlacement> all) {
  for (std::size_t b = 1; b < all.size(); ++b) {
    for (std::size_t a = 0; a < b; ++a) {
      const std::string gpu = physical_gpu(all[a].device);
      if (gpu.empty() || all[a].host != all[b].host || gpu != physical_gpu(all[b].device)) continue;
      throw UserError(fmt::format(
          "--comm nccl: ranks {} and {} would both drive GPU {} on {}; NCCL needs one GPU per "
          "rank. Give each rank its own GPU (srun --gpus-per-task=1, or fewer ranks per node), or "
          "use --comm mpi to let ranks share a GPU",
          a, b, gpu, all[a].host));
    }
  }
}

}  // namespace mnist_ddp
