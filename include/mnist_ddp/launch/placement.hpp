// placement.hpp — where every rank runs, gathered once at start-up (comm/agree.hpp): rank, local
// rank, host, pid and device (a GPU with its PCI bus id). Rank 0 prints it as one table in rank
// order (as nccl-tests does), and the same records feed NCCL's one-GPU-per-rank check.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mnist_ddp {

struct RankPlacement {
  int rank = 0;
  int local_rank = 0;
  std::string host;  // at most kPlacementHostChars bytes travel
  long pid = 0;
  std::string
      device;  // "cpu", or "cuda:1 NVIDIA H100 ... (pci 0000:1a:00.0)"; kPlacementDeviceChars
};

inline constexpr std::size_t kPlacementHostChars = 63;
inline constexpr std::size_t kPlacementDeviceChars = 127;
// One rank's record as fixed-size words for one allgather (strings NUL-padded, cut to the limits).
inline constexpr std::size_t kPlacementWords =
    2 + (kPlacementHostChars + 1) / 8 + (kPlacementDeviceChars + 1) / 8;
std::vector<std::uint64_t> encode_placement(const RankPlacement& p);
RankPlacement decode_placement(std::span<const std::uint64_t> words);

// The table rank 0 prints, one "# "-prefixed line per rank under a header:
//   # rank  local  host   pid    device
//   #    0      0  node1  4242   cpu
std::string placement_table(std::span<const RankPlacement> all);

// Every rank's host, in rank order (the timeline's process names).
std::vector<std::string> hosts_of(std::span<const RankPlacement> all);

// NCCL needs each rank on its own GPU, which only a comparison across ranks can establish (two
// ranks may each see "GPU 0" and still be one device): the first two ranks on the same host with
// the same device (PCI bus id) are a UserError naming them and the fix.
void check_gpus_exclusive(std::span<const RankPlacement> all);

}  // namespace mnist_ddp
