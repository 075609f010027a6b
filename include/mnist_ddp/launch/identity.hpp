// identity.hpp — who this process is: MPI init, rank/world (MPI is authoritative), local rank and
// node derived from OMPI_* / SLURM_* / MPI_Comm_split_type, and the launcher cross-check that
// catches `srun` without an MPI bootstrap. Teardown is explicit in main (MPI_Finalize last).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mnist_ddp {

// A snapshot of the launcher-related environment variables (a plain map so tests can build one).
using EnvMap = std::map<std::string, std::string>;

// Reads the variables the derivation looks at (OMPI_*, SLURM_*, PMIX_*, PMI_*, MPICH Hydra's
// MPI_LOCALRANKID, HPE Cray PALS's PALS_*) from the environment.
EnvMap read_launch_env();

// Everything that identifies this rank. `derivation` records where each value came from, for
// --print-env and for error messages.
struct Identity {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_size = 1;
  int node = 0;  // index of this rank's node among the job's nodes
  int num_nodes = 1;
  std::string host;
  long pid = 0;
  // "mpirun" (Open MPI), "mpiexec (Hydra)" (MPICH's), "mpiexec (PALS)" (HPE Cray's), "srun",
  // "none" (singleton), "other"
  std::string launcher;
  // Where local_rank came from: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI's split.
  std::string local_rank_source = "MPI_Comm_split_type(SHARED)";
  std::vector<std::string> derivation;
};

// MPI's view of the node-local group (from MPI_Comm_split_type(SHARED)) and of the node index.
struct MpiLocality {
  int local_rank = 0;
  int local_size = 1;
  int node = 0;
  int num_nodes = 1;
  // The MPI library this binary runs (MPI_Get_library_version's first line: "Open MPI v4.1.4 ...",
  // "MPICH Version: 4.0.2", "MPI VERSION : CRAY MPICH version 8.1.28 ..."): the launcher advice
  // names the srun plugin it speaks.
  std::string library;
};

// The MPI family of a library line (MpiLocality::library): "Open MPI", "Cray MPICH", "MPICH"
// (MPICH and its derivatives: Intel MPI, MVAPICH), or "" when unknown.
std::string mpi_family(const std::string& library);

// Cross-checks the launcher's variables against MPI and derives local rank. Pure function so it
// is unit-tested with hand-made environments. Throws UserError when the launcher and MPI disagree
// (message explains the likely cause and the fix).
Identity derive_identity(int mpi_rank, int mpi_world, const MpiLocality& mpi, const EnvMap& env,
                         const std::string& host, long pid);

// A launcher local rank outside [0, local_size) of MPI's node group (it picks the GPU) is a
// UserError naming the variable. Separate from derive_identity so that main runs it inside an
// agreement: the group size differs from node to node, so it can fail on some ranks only.
void check_local_rank(const Identity& id);

// MPI_Init_thread + MPI_ERRORS_RETURN on MPI_COMM_WORLD. Call first thing in main.
void mpi_init(int* argc, char*** argv);
// Before MPI_Init: a task that srun started without an MPI bootstrap (an srun step, but no PMIx,
// PMI or mpirun variables) cannot initialise MPI at all (Open MPI aborts inside MPI_Init with
// its own message); this returns the explanation and the fix instead, or nullopt.
std::optional<std::string> launch_problem_before_mpi(const EnvMap& env,
                                                     const std::string& library = "");
// The MPI library's version line (MPI_Get_library_version, allowed before MPI_Init): "Open MPI
// v4.1.4, package: ...", "MPICH Version: 4.0.2"; "" when it cannot say.
std::string mpi_library();
// Whether the MPI library granted MPI_THREAD_MULTIPLE (needed by --overlap-engine thread).
bool mpi_thread_multiple();

// Asks MPI for rank, world, node-local group and node index.
void mpi_query(int* rank, int* world, MpiLocality* locality);

// This machine's hostname.
std::string host_name();

// MPI_Finalize (last step of the explicit teardown in main). together: every rank agreed to stop
// at the same point (an agreed refusal), so all are alive and on their way here; a barrier first
// makes none leave MPI, and exit, before every other has decided its exit (signals.hpp
// decide_exit): the launcher's SIGTERM to a slower rank then finds it leaving, not running.
void mpi_finalize(bool together = false);

// Number of CPU cores this process may run on (sched_getaffinity).
int usable_cores();

}  // namespace mnist_ddp
