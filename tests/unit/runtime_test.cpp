// runtime_test.cpp — rank/local-rank derivation and the launcher cross-checks, with hand-made
// environments for mpirun, MPICH's mpiexec (Hydra), HPE Cray's PALS mpiexec, srun with and
// without PMIx or PMI-2, and no launcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <string>

#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"
#include "mnist_ddp/launch/identity.hpp"
#include "mnist_ddp/launch/placement.hpp"
#include "mnist_ddp/process/requeue.hpp"

namespace mnist_ddp {
namespace {

MpiLocality loc(int lr, int ls) {
  MpiLocality m;
  m.local_rank = lr;
  m.local_size = ls;
  return m;
}

std::string error_of(int rank, int world, const EnvMap& env) {
  try {
    check_local_rank(derive_identity(rank, world, loc(0, 1), env, "h", 1));
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Runtime, NoLauncherIsWorldOfOne) {
  const Identity id = derive_identity(0, 1, loc(0, 1), {}, "host", 42);
  EXPECT_EQ(id.world, 1);
  EXPECT_EQ(id.launcher, "none");
  EXPECT_EQ(id.local_rank, 0);
  EXPECT_EQ(id.pid, 42);
}

TEST(Runtime, MpirunAgreesAndGivesLocalRank) {
  const EnvMap env = {{"OMPI_COMM_WORLD_RANK", "5"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      // Inside an allocation these describe the mpirun step, not the rank:
                      {"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "1"},
                      {"SLURM_LOCALID", "0"}};
  const Identity id = derive_identity(5, 8, loc(1, 4), env, "h", 1);
  EXPECT_EQ(id.launcher, "mpirun");
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.local_size, 4);
}

TEST(Runtime, SrunWithPmixUsesSlurmLocalId) {
  const EnvMap env = {
      {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"PMIX_RANK", "3"}};
  const Identity id = derive_identity(3, 4, loc(1, 2), env, "h", 1);
  EXPECT_EQ(id.launcher, "srun");
  EXPECT_EQ(id.local_rank, 1);
}

TEST(Runtime, SrunWithoutMpiBootstrapIsExplained) {
  // Classic: srun --mpi=none -> every task is rank 0 of a world of 1.
  const std::string m = error_of(0, 1, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(m.find("SLURM_PROCID=1 of 2"), std::string::npos) << m;
  EXPECT_NE(m.find("--mpi=pmix"), std::string::npos) << m;
  // Task 0 of such a launch also sees the wrong world size.
  EXPECT_NE(error_of(0, 1, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).find("world of 1"),
            std::string::npos);
}

TEST(Runtime, StepTaskCountWinsOverAllocation) {
  // salloc -n4 then srun -n2: SLURM_NTASKS=4 (allocation) but the step has 2 tasks.
  const EnvMap env = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "2"}};
  EXPECT_EQ(derive_identity(1, 2, loc(1, 2), env, "h", 1).launcher, "srun");
}

TEST(Runtime, OmpiMismatchIsExplained) {
  const std::string m =
      error_of(0, 1, {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(m.find("OMPI_COMM_WORLD_RANK/SIZE = 2/4"), std::string::npos) << m;
  EXPECT_NE(m.find("different MPI"), std::string::npos) << m;
}

TEST(Runtime, PmixMismatchIsExplained) {
  const std::string m = error_of(1, 2, {{"PMIX_RANK", "0"}});
  EXPECT_NE(m.find("PMIX_RANK=0"), std::string::npos) << m;
}

// Found by tests/fuzz (fuzz_env): a launcher local rank outside the node's MPI group (it picks
// the GPU) is a mismatch, named with the variable, not a silent identity.
TEST(Runtime, LauncherLocalRankOutsideTheNodeIsExplained) {
  const std::string m = error_of(0, 4, {{"SLURM_LOCALID", "1"}});  // MPI: 1 rank on the node
  EXPECT_NE(m.find("SLURM_LOCALID = 1 but MPI finds 1 rank(s) on this node"), std::string::npos)
      << m;
  const std::string o =
      error_of(0, 2, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}});
  EXPECT_NE(o.find("OMPI_COMM_WORLD_LOCAL_RANK = -1"), std::string::npos) << o;
}

TEST(Runtime, SplitTypeIsTheFallbackForLocalRank) {
  const Identity id = derive_identity(3, 4, loc(1, 2), {}, "h", 1);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_FALSE(id.derivation.empty());
}

TEST(GpuChoice, FollowsTheDesignRule) {
  // One visible GPU (Slurm bound one per task, or ranks share it): use it.
  EXPECT_EQ(choose_gpu(3, 4, 1, true), 0);
  // Enough GPUs: local rank.
  EXPECT_EQ(choose_gpu(0, 4, 4, true), 0);
  EXPECT_EQ(choose_gpu(3, 4, 8, true), 3);
  // Fewer GPUs than local ranks: NCCL refuses, MPI shares in blocks (not rank % n).
  EXPECT_THROW(choose_gpu(0, 8, 4, true), UserError);
  EXPECT_EQ(choose_gpu(0, 8, 4, false), 0);
  EXPECT_EQ(choose_gpu(1, 8, 4, false), 0);
  EXPECT_EQ(choose_gpu(2, 8, 4, false), 1);
  EXPECT_EQ(choose_gpu(7, 8, 4, false), 3);
  EXPECT_THROW(choose_gpu(0, 1, 0, false), UserError);
  try {
    choose_gpu(0, 8, 4, true);
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--comm mpi"), std::string::npos) << e.what();
  }
}

TEST(Device, NcclRefusesTwoRanksOnOneGpu) {
  // Ranks 1 and 3 are one device on one host, although they see it under other indices.
  auto at = [](int r, const char* host, const char* dev) {
    RankPlacement p;
    p.rank = r;
    p.host = host;
    p.device = dev;
    return p;
  };
  const std::vector<RankPlacement> ok = {at(0, "n1", "cuda:0 H100 (pci 0000:1a:00.0)"),
                                         at(1, "n2", "cuda:0 H100 (pci 0000:1a:00.0)"),
                                         at(2, "n1", "cuda:1 H100 (pci 0000:2b:00.0)")};
  EXPECT_NO_THROW(check_gpus_exclusive(ok));
  std::vector<RankPlacement> bad = ok;
  bad.push_back(at(3, "n2", "cuda:1 H100 (pci 0000:1a:00.0)"));
  try {
    check_gpus_exclusive(bad);
    ADD_FAILURE() << "two ranks on one GPU were accepted";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ranks 1 and 3"), std::string::npos) << m;
    EXPECT_NE(m.find("GPU H100 (pci 0000:1a:00.0) on n2"), std::string::npos) << m;
    EXPECT_NE(m.find("--comm mpi"), std::string::npos) << m;
  }
  // CPU ranks never share "a GPU".
  EXPECT_NO_THROW(
      check_gpus_exclusive(std::vector<RankPlacement>{at(0, "n1", "cpu"), at(1, "n1", "cpu")}));
}

// The start-up record survives the allgather encoding (strings cut at their limits), and the
// table lists every rank in rank order under one header.
TEST(Placement, EncodingRoundTripsAndTheTableIsInRankOrder) {
  RankPlacement p;
  p.rank = 1234567;
  p.local_rank = 7;
  p.host = "node-with-a-long-name";
  p.pid = 4194303;
  p.device = "cuda:3 NVIDIA H100 80GB HBM3 (pci 0000:1a:00.0)";
  const RankPlacement q = decode_placement(encode_placement(p));
  EXPECT_EQ(q.rank, p.rank);
  EXPECT_EQ(q.local_rank, p.local_rank);
  EXPECT_EQ(q.host, p.host);
  EXPECT_EQ(q.pid, p.pid);
  EXPECT_EQ(q.device, p.device);
  p.host = std::string(100, 'h');
  EXPECT_EQ(decode_placement(encode_placement(p)).host, std::string(kPlacementHostChars, 'h'));
  std::vector<RankPlacement> all(2);
  all[0].host = all[1].host = "n1";
  all[0].pid = 42;
  all[1].rank = all[1].local_rank = 1;
  all[1].pid = 43;
  all[0].device = all[1].device = "cpu";
  EXPECT_EQ(placement_table(all),
            "# rank  local  host  pid  device\n"
            "#    0      0  n1     42  cpu\n"
            "#    1      1  n1     43  cpu\n");
}

TEST(Runtime, SrunWithoutBootstrapIsCaughtBeforeMpiInit) {
  // srun --mpi=none: a step, no PMIx/PMI/mpirun variables.
  const EnvMap none = {{"SLURM_STEP_ID", "0"},
                       {"SLURM_PROCID", "1"},
                       {"SLURM_STEP_NUM_TASKS", "2"},
                       {"SLURM_MPI_TYPE", "none"}};
  const auto msg = launch_problem_before_mpi(none);
  ASSERT_TRUE(msg.has_value());
  EXPECT_NE(msg->find("SLURM_PROCID=1 of 2 tasks"), std::string::npos) << *msg;
  EXPECT_NE(msg->find("srun --mpi=pmix"), std::string::npos) << *msg;
  // With PMIx (srun --mpi=pmix), under mpirun, or outside an srun step (batch script, login
  // shell): nothing to say.
  EnvMap pmix = none;
  pmix["PMIX_RANK"] = "1";
  EXPECT_FALSE(launch_problem_before_mpi(pmix).has_value());
  EnvMap mpirun = none;
  mpirun["OMPI_COMM_WORLD_RANK"] = "1";
  EXPECT_FALSE(launch_problem_before_mpi(mpirun).has_value());
  EXPECT_FALSE(
      launch_problem_before_mpi({{"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "7"}}).has_value());
  EXPECT_FALSE(launch_problem_before_mpi({}).has_value());
}

// Only the requeue signal requeues (with --requeue): SIGTERM is scancel's, and a requeue then
// would turn the user's cancel into a restart; a user who names TERM as the requeue signal gets it.
TEST(Requeue, OnlyTheRequeueSignalRequeues) {
  EXPECT_TRUE(decide_stop(SIGUSR1, true, SIGUSR1).requeue);
  EXPECT_FALSE(decide_stop(SIGTERM, true, SIGUSR1).requeue);
  EXPECT_FALSE(decide_stop(SIGINT, true, SIGUSR1).requeue);
  EXPECT_FALSE(decide_stop(SIGUSR1, false, SIGUSR1).requeue);
  EXPECT_FALSE(decide_stop(0, true, SIGUSR1).requeue);
  EXPECT_TRUE(decide_stop(SIGTERM, true, SIGTERM).requeue);
  EXPECT_TRUE(decide_stop(SIGUSR2, true, SIGUSR2).requeue);
  // The rolling preemption checkpoint: the requeue signal or SIGTERM, requeue or not; not SIGINT.
  EXPECT_TRUE(decide_stop(SIGUSR1, false, SIGUSR1).preemption);
  EXPECT_TRUE(decide_stop(SIGTERM, false, SIGUSR1).preemption);
  EXPECT_FALSE(decide_stop(SIGINT, true, SIGUSR1).preemption);
  EXPECT_FALSE(decide_stop(0, true, SIGUSR1).preemption);
}

}  // namespace
}  // namespace mnist_ddp

namespace mnist_ddp {
namespace {

// The CUDA seam is one list (app/cuda_backend.hpp): the plugin's table has exactly one pointer
// per entry of it, and the ABI number both sides compare is that list's hash, so an entry added
// to the list changes the number a stale plugin carries.
TEST(CudaSeam, TheTableAndTheAbiComeFromTheOneList) {
  const std::string text = kCudaSeamText;
  const auto entries = static_cast<std::size_t>(std::count(text.begin(), text.end(), ';'));
  EXPECT_EQ(entries, 12u) << text;
  EXPECT_EQ(sizeof(CudaBackend),
            sizeof(std::uint64_t) + 2 * sizeof(std::size_t) + entries * sizeof(void (*)()));
  for (const char* entry : {"make_cuda_ops", "make_nccl_comm", "use_cuda_device", "cuda_alloc"})
    EXPECT_NE(text.find(entry), std::string::npos) << entry;
  EXPECT_EQ(kCudaBackendAbi, cuda_seam_hash(kCudaSeamText) ^ kCudaBackendRevision);
  const std::string one_more = text + "CALL extra extra int ();";
  EXPECT_NE(cuda_seam_hash(one_more.c_str()), cuda_seam_hash(kCudaSeamText));
}

}  // namespace
}  // namespace mnist_ddp

namespace mnist_ddp {
namespace {

MpiLocality with_library(int lr, int ls, const std::string& library) {
  MpiLocality m = loc(lr, ls);
  m.library = library;
  return m;
}

std::string mismatch_of(int rank, int world, const MpiLocality& mpi, const EnvMap& env) {
  try {
    derive_identity(rank, world, mpi, env, "h", 1);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Runtime, MpiFamiliesFromTheLibraryLine) {
  EXPECT_EQ(mpi_family("Open MPI v4.1.4, package: Debian OpenMPI"), "Open MPI");
  EXPECT_EQ(mpi_family("MPICH Version:      4.0.2"), "MPICH");
  EXPECT_EQ(mpi_family("MPI VERSION    : CRAY MPICH version 8.1.28.15 (ANL base 3.4a2)"),
            "Cray MPICH");
  EXPECT_EQ(mpi_family("Intel(R) MPI Library 2021.10 for Linux* OS"), "MPICH");
  EXPECT_EQ(mpi_family("MVAPICH2 Version      :   2.3.7"), "MPICH");
  EXPECT_EQ(mpi_family(""), "");
}

// mpiexec.hydra: PMI_RANK/PMI_SIZE and MPI_LOCALRANKID; inside an allocation its proxies are srun
// tasks, so SLURM_PROCID/SLURM_LOCALID describe the proxy and are not compared.
TEST(Runtime, HydraAgreesAndGivesLocalRank) {
  const EnvMap env = {{"PMI_RANK", "3"},        {"PMI_SIZE", "4"},        {"PMI_FD", "7"},
                      {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"SLURM_PROCID", "0"},
                      {"SLURM_LOCALID", "0"},   {"SLURM_NTASKS", "1"}};
  const Identity id =
      derive_identity(3, 4, with_library(1, 2, "MPICH Version: 4.0.2"), env, "h", 1);
  EXPECT_EQ(id.launcher, "mpiexec (Hydra)");
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.local_rank_source, "MPI_LOCALRANKID");
  const auto has = [&](const std::string& line) {
    return std::find(id.derivation.begin(), id.derivation.end(), line) != id.derivation.end();
  };
  EXPECT_TRUE(has("launcher: mpiexec (Hydra) (PMI_RANK=3 agrees)"));
  EXPECT_TRUE(has("local_rank: MPI_LOCALRANKID = 1"));
  EXPECT_TRUE(has("mpi: MPICH Version: 4.0.2"));
  // An Open MPI binary started by Hydra: each process is a singleton of its own MPI.
  const std::string e = mismatch_of(0, 1, with_library(0, 1, "Open MPI v4.1.4"), env);
  EXPECT_NE(e.find("launcher mismatch: PMI_RANK/PMI_SIZE = 3/4 but MPI says rank 0 of 1"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("different MPI (Open MPI v4.1.4) than the mpiexec (Hydra)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("srun --mpi=pmix"), std::string::npos) << e;
}

// An MPICH binary started by Open MPI's mpirun: the advice names MPICH's own launchers.
TEST(Runtime, MpirunStartingAnMpichBinaryIsNamed) {
  const EnvMap env = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  const std::string e = mismatch_of(0, 1, with_library(0, 1, "MPICH Version: 4.0.2"), env);
  EXPECT_NE(e.find("OMPI_COMM_WORLD_RANK/SIZE = 1/2 but MPI says rank 0 of 1"), std::string::npos)
      << e;
  EXPECT_NE(e.find("srun --mpi=pmi2"), std::string::npos) << e;
}

// srun --mpi=pmi2 (MPICH): Slurm's and PMI's ranks both checked; srun without a plugin the
// binary's MPI speaks names that MPI's plugin (MPICH: pmi2, Cray MPICH: cray_shasta).
TEST(Runtime, SrunWithPmi2ChecksBothRanksAndNamesThePluginOfTheBinarysMpi) {
  const EnvMap env = {{"SLURM_PROCID", "1"},  {"SLURM_STEP_NUM_TASKS", "2"},
                      {"SLURM_LOCALID", "1"}, {"PMI_RANK", "1"},
                      {"PMI_SIZE", "2"},      {"PMI_FD", "5"}};
  const Identity id =
      derive_identity(1, 2, with_library(1, 2, "MPICH Version: 4.0.2"), env, "h", 1);
  EXPECT_EQ(id.launcher, "srun");
  EXPECT_EQ(id.local_rank_source, "SLURM_LOCALID");
  EnvMap off = env;
  off["PMI_RANK"] = "0";
  EXPECT_NE(mismatch_of(1, 2, with_library(1, 2, "MPICH"), off).find("PMI_RANK/PMI_SIZE = 0/2"),
            std::string::npos);
  const EnvMap srun_only = {{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}};
  EXPECT_NE(mismatch_of(0, 1, with_library(0, 1, "MPICH Version: 4.0.2"), srun_only)
                .find("srun --mpi=pmi2"),
            std::string::npos);
  EXPECT_NE(mismatch_of(0, 1, with_library(0, 1, "MPI VERSION : CRAY MPICH version 8.1"), srun_only)
                .find("srun --mpi=cray_shasta"),
            std::string::npos);
  const EnvMap none = {
      {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}};
  EXPECT_NE(launch_problem_before_mpi(none, "MPICH Version: 4.0.2")->find("srun --mpi=pmi2"),
            std::string::npos);
}

// HPE Cray's PALS mpiexec (PBS Pro clusters): PALS_RANKID and PALS_LOCAL_RANKID.
TEST(Runtime, PalsAgreesAndGivesLocalRank) {
  const EnvMap env = {{"PALS_RANKID", "5"}, {"PALS_LOCAL_RANKID", "1"}};
  const Identity id = derive_identity(
      5, 8, with_library(1, 4, "MPI VERSION : CRAY MPICH version 8.1"), env, "h", 1);
  EXPECT_EQ(id.launcher, "mpiexec (PALS)");
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_NE(mismatch_of(0, 1, with_library(0, 1, ""), env).find("PALS_RANKID = 5/? but MPI says"),
            std::string::npos);
}

}  // namespace
}  // namespace mnist_ddp
