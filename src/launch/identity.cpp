// identity.cpp — MPI init/teardown and the rank/local-rank derivation with launcher cross-checks.
#include "mnist_ddp/launch/identity.hpp"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <optional>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

constexpr std::array kLaunchVars = {"OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                                    "SLURM_PROCID",
                                    "SLURM_NTASKS",
                                    "SLURM_STEP_NUM_TASKS",
                                    "SLURM_LOCALID",
                                    "SLURM_NODEID",
                                    "SLURM_JOB_ID",
                                    "SLURM_STEP_ID",
                                    "PMIX_RANK",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "PMI_FD",
                                    "MPI_LOCALRANKID",
                                    "MPI_LOCALNRANKS",
                                    "PALS_RANKID",
                                    "PALS_LOCAL_RANKID",
                                    "SLURM_MPI_TYPE"};

std::optional<int> get_int(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  int v = 0;
  const char* b = it->second.data();
  const char* e = b + it->second.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) return std::nullopt;
  return v;
}

// The srun plugin (and mpiexec) that start this binary's MPI, for the launcher advice.
std::string launch_advice(const std::string& library) {
  const std::string family = mpi_family(library);
  if (family == "Cray MPICH") {
    return "`srun --mpi=cray_shasta ./mnist_ddp ...` (or the site's default plugin), or PALS's "
           "mpiexec";
  }
  if (family == "MPICH") {
    return "`srun --mpi=pmi2 ./mnist_ddp ...` (this binary's MPI is MPICH), or its mpiexec";
  }
  return "`srun --mpi=pmix ./mnist_ddp ...` (or set MpiDefault=pmix in slurm.conf)";
}

// A launcher's own rank/size variables against MPI's: the binary's MPI is not the launcher's.
void check_launcher_rank(const std::string& launcher, const std::string& vars,
                         std::optional<int> rank, std::optional<int> size, int mpi_rank,
                         int mpi_world, const std::string& library) {
  if (*rank == mpi_rank && (!size || *size == mpi_world)) return;
  throw UserError(fmt::format(
      "launcher mismatch: {} = {}/{} but MPI says rank {} of {}. The binary was probably built "
      "against a different MPI ({}) than the {} that started it; rebuild with MPICXX pointing at "
      "that MPI's mpicxx (make clean && make MPICXX=...), or launch with the launcher that "
      "matches the build: {}.",
      vars, *rank, size ? std::to_string(*size) : "?", mpi_rank, mpi_world,
      library.empty() ? "unknown" : library, launcher, launch_advice(library)));
}

}  // namespace

std::string mpi_family(const std::string& library) {
  if (library.find("CRAY MPICH") != std::string::npos ||
      library.find("Cray MPICH") != std::string::npos)
    return "Cray MPICH";
  if (library.find("Open MPI") != std::string::npos) return "Open MPI";
  if (library.find("MPICH") != std::string::npos ||
      library.find("Intel(R) MPI") != std::string::npos ||
      library.find("MVAPICH") != std::string::npos)
    return "MPICH";
  return "";
}

EnvMap read_launch_env() {
  EnvMap env;
  for (const char* name : kLaunchVars) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return env;
}

Identity derive_identity(int mpi_rank, int mpi_world, const MpiLocality& mpi, const EnvMap& env,
                         const std::string& host, long pid) {
  Identity id;
  id.rank = mpi_rank;
  id.world = mpi_world;
  id.host = host;
  id.pid = pid;
  id.node = mpi.node;
  id.num_nodes = mpi.num_nodes;
  id.derivation.push_back(
      fmt::format("rank/world: MPI_Comm_rank/size = {}/{} (authoritative)", mpi_rank, mpi_world));

  const auto ompi_rank = get_int(env, "OMPI_COMM_WORLD_RANK");
  const auto ompi_size = get_int(env, "OMPI_COMM_WORLD_SIZE");
  const auto slurm_procid = get_int(env, "SLURM_PROCID");
  const auto pmix_rank = get_int(env, "PMIX_RANK");
  // SLURM_STEP_NUM_TASKS describes the step this task belongs to; SLURM_NTASKS the allocation.
  auto slurm_ntasks = get_int(env, "SLURM_STEP_NUM_TASKS");
  if (!slurm_ntasks) slurm_ntasks = get_int(env, "SLURM_NTASKS");

  const auto pmi_rank = get_int(env, "PMI_RANK");
  const auto hydra_local = get_int(env, "MPI_LOCALRANKID");
  const auto pals_rank = get_int(env, "PALS_RANKID");
  if (!mpi.library.empty()) id.derivation.push_back("mpi: " + mpi.library);

  if (ompi_rank) {
    // Started by Open MPI's mpirun. Inside a Slurm allocation, SLURM_PROCID/SLURM_LOCALID then
    // describe the mpirun step, not this rank, so they are deliberately not compared.
    id.launcher = "mpirun";
    check_launcher_rank("mpirun", "OMPI_COMM_WORLD_RANK/SIZE", ompi_rank, ompi_size, mpi_rank,
                        mpi_world, mpi.library);
    id.derivation.push_back(
        fmt::format("launcher: mpirun (OMPI_COMM_WORLD_RANK={} agrees)", *ompi_rank));
  } else if (pmi_rank && hydra_local) {
    // MPICH's mpiexec (Hydra) sets MPI_LOCALRANKID beside PMI_RANK/PMI_SIZE; inside an
    // allocation its proxies run as srun tasks, so SLURM_PROCID is the proxy's, not this rank's.
    id.launcher = "mpiexec (Hydra)";
    check_launcher_rank("mpiexec (Hydra)", "PMI_RANK/PMI_SIZE", pmi_rank, get_int(env, "PMI_SIZE"),
                        mpi_rank, mpi_world, mpi.library);
    id.derivation.push_back(
        fmt::format("launcher: mpiexec (Hydra) (PMI_RANK={} agrees)", *pmi_rank));
  } else if (pals_rank) {
    // HPE Cray's PALS mpiexec (PBS clusters): PALS_RANKID, PALS_LOCAL_RANKID.
    id.launcher = "mpiexec (PALS)";
    check_launcher_rank("mpiexec (PALS)", "PALS_RANKID", pals_rank, std::nullopt, mpi_rank,
                        mpi_world, mpi.library);
    id.derivation.push_back(
        fmt::format("launcher: mpiexec (PALS) (PALS_RANKID={} agrees)", *pals_rank));
  } else if (slurm_procid) {
    id.launcher = "srun";
    if (*slurm_procid != mpi_rank || (slurm_ntasks && *slurm_ntasks != mpi_world)) {
      throw UserError(fmt::format(
          "launcher mismatch: Slurm started this task as SLURM_PROCID={} of {} tasks, but MPI "
          "says rank {} of {}. srun started the tasks without an MPI bootstrap this binary's MPI "
          "({}) speaks, so each one became its own world of 1. Launch with {}; `srun --mpi=list` "
          "shows what this cluster supports.",
          *slurm_procid, slurm_ntasks ? std::to_string(*slurm_ntasks) : "?", mpi_rank, mpi_world,
          mpi.library.empty() ? "unknown" : mpi.library, launch_advice(mpi.library)));
    }
    // srun --mpi=pmi2 (MPICH): its PMI rank must be MPI's too.
    if (pmi_rank) {
      check_launcher_rank("srun", "PMI_RANK/PMI_SIZE", pmi_rank, get_int(env, "PMI_SIZE"), mpi_rank,
                          mpi_world, mpi.library);
    }
    id.derivation.push_back(fmt::format("launcher: srun (SLURM_PROCID={} agrees)", *slurm_procid));
  } else {
    id.launcher = mpi_world == 1 ? "none" : "other";
    id.derivation.push_back(mpi_world == 1
                                ? "launcher: none (singleton MPI, world size 1)"
                                : "launcher: unknown (no OMPI_*/PMI_*/SLURM_* rank variables)");
  }
  if (pmix_rank && *pmix_rank != mpi_rank) {
    throw UserError(fmt::format(
        "launcher mismatch: PMIX_RANK={} but MPI says rank {} of {}. The PMIx server and the MPI "
        "library disagree; check that the MPI the binary was built with matches the launcher "
        "(`srun --mpi=pmix`, or this MPI's own mpirun).",
        *pmix_rank, mpi_rank, mpi_world));
  }

  // local rank: OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID (srun only), else MPI's shared-
  // memory split.
  const auto ompi_local = get_int(env, "OMPI_COMM_WORLD_LOCAL_RANK");
  const auto slurm_local = get_int(env, "SLURM_LOCALID");
  const auto pals_local = get_int(env, "PALS_LOCAL_RANKID");
  // The launcher's own local rank first (under mpirun or mpiexec inside an allocation,
  // SLURM_LOCALID is the launcher step's).
  const char* launcher_local_name = ompi_local ? "OMPI_COMM_WORLD_LOCAL_RANK"
                                    : id.launcher == "mpiexec (Hydra)" ? "MPI_LOCALRANKID"
                                    : id.launcher == "mpiexec (PALS)" && pals_local
                                        ? "PALS_LOCAL_RANKID"
                                        : nullptr;
  const std::optional<int> launcher_local = ompi_local                         ? ompi_local
                                            : id.launcher == "mpiexec (Hydra)" ? hydra_local
                                                                               : pals_local;
  if (launcher_local_name != nullptr) {
    id.local_rank = *launcher_local;
    id.local_rank_source = launcher_local_name;
    id.derivation.push_back(
        fmt::format("local_rank: {} = {}", launcher_local_name, *launcher_local));
  } else if (!ompi_rank && id.launcher.rfind("mpiexec", 0) != 0 && slurm_local) {
    id.local_rank = *slurm_local;
    id.local_rank_source = "SLURM_LOCALID";
    id.derivation.push_back(fmt::format("local_rank: SLURM_LOCALID = {}", *slurm_local));
  } else {
    id.local_rank = mpi.local_rank;
    id.derivation.push_back(
        fmt::format("local_rank: MPI_Comm_split_type(SHARED) = {}", mpi.local_rank));
  }
  id.local_size = mpi.local_size;
  if (id.local_rank != mpi.local_rank) {
    id.derivation.push_back(fmt::format(
        "note: MPI_Comm_split_type(SHARED) gives local rank {}; the launcher's value {} is used",
        mpi.local_rank, id.local_rank));
  }
  id.derivation.push_back(
      fmt::format("local_size: MPI_Comm_split_type(SHARED) = {}", mpi.local_size));
  id.derivation.push_back(
      fmt::format("node: {} of {} (MPI: ranks with local rank 0)", mpi.node, mpi.num_nodes));
  return id;
}

void check_local_rank(const Identity& id) {
  if (id.local_rank >= 0 && id.local_rank < id.local_size) return;
  // The local rank chooses this rank's GPU: one outside the node's group would pick a GPU that
  // another rank (or no rank) is meant to use.
  throw UserError(fmt::format(
      "launcher mismatch: {} = {} but MPI finds {} rank(s) on this node "
      "(MPI_Comm_split_type(SHARED)), so a local rank must be 0..{}. The job script sets or "
      "exports the launcher's variables by hand, or the binary's MPI is not the launcher's; "
      "unset them and launch with this MPI's mpirun or `srun --mpi=pmix`.",
      id.local_rank_source, id.local_rank, id.local_size, id.local_size - 1));
}

std::optional<std::string> launch_problem_before_mpi(const EnvMap& env,
                                                     const std::string& library) {
  const bool srun_step = env.count("SLURM_STEP_ID") != 0;
  const bool bootstrap = env.count("PMIX_RANK") != 0 || env.count("PMI_RANK") != 0 ||
                         env.count("PMI_FD") != 0 || env.count("OMPI_COMM_WORLD_RANK") != 0;
  if (!srun_step || bootstrap) return std::nullopt;
  const auto procid = get_int(env, "SLURM_PROCID");
  const auto tasks = get_int(env, "SLURM_STEP_NUM_TASKS");
  const auto mpi = env.find("SLURM_MPI_TYPE");
  return fmt::format(
      "launcher: srun started this task (SLURM_PROCID={} of {} tasks) without an MPI bootstrap "
      "(--mpi={}: no PMIx/PMI variables), so MPI cannot start. Launch with {}; `srun --mpi=list` "
      "shows what this cluster supports.",
      procid ? std::to_string(*procid) : "?", tasks ? std::to_string(*tasks) : "?",
      mpi != env.end() ? mpi->second : "none", launch_advice(library));
}

std::string mpi_library() {
  // Allowed before MPI_Init (MPI-3), so the launch check before it can name the library too.
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(version, &len) != MPI_SUCCESS) return "";
  std::string v(version,
                static_cast<std::size_t>(std::clamp(len, 0, MPI_MAX_LIBRARY_VERSION_STRING)));
  // The first line, its trailing blanks and commas cut (MPICH's is a multi-line report).
  v = v.substr(0, v.find('\n'));
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == ',' ||
                        v.back() == '\r' || v.back() == '\0'))
    v.pop_back();
  return v;
}

namespace {
int g_thread_level = MPI_THREAD_SINGLE;  // written once by mpi_init
}  // namespace

void mpi_init(int* argc, char*** argv) {
  // MULTIPLE: --overlap-engine thread all-reduces buckets from a communication thread (on its
  // own communicator) while the main thread goes on; everything else calls MPI from main only.
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &g_thread_level));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

bool mpi_thread_multiple() {
  return g_thread_level >= MPI_THREAD_MULTIPLE;
}

void mpi_query(int* rank, int* world, MpiLocality* locality) {
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world));
  locality->library = mpi_library();
  MPI_Comm local = MPI_COMM_NULL;
  // Collective: every rank learns its node-local group (ranks sharing memory).
  MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &locality->local_rank));
  MPI_CHECK(MPI_Comm_size(local, &locality->local_size));
  // Collective: the local leaders number the nodes; each leader tells its node its index.
  MPI_Comm leaders = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, locality->local_rank == 0 ? 0 : MPI_UNDEFINED, *rank,
                           &leaders));
  int node_info[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_rank(leaders, &node_info[0]));
    MPI_CHECK(MPI_Comm_size(leaders, &node_info[1]));
    MPI_CHECK(MPI_Comm_free(&leaders));
  }
  // Collective within the node: only the leader knows the node's index.
  MPI_CHECK(MPI_Bcast(node_info, 2, MPI_INT, 0, local));
  locality->node = node_info[0];
  locality->num_nodes = node_info[1];
  MPI_CHECK(MPI_Comm_free(&local));
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

void mpi_finalize(bool together) {
  // Collective (agreed exits only): no rank exits before every rank has decided its exit.
  if (together) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  MPI_CHECK(MPI_Finalize());
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

}  // namespace mnist_ddp
