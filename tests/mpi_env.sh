# mpi_env.sh — Open MPI settings that keep launches reliable on a 2-core test machine (measured:
# ../shared/notes/local-slurm-and-openmpi.md). Sourced by the tests and `make run`; NOT used by
# the slurm/ scripts (a real cluster has its own settings).
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle=1
# MNIST_DDP_MPI_PML=ob1: Open MPI's own PML over shared memory (vader) instead of UCX. The
# ThreadSanitizer runs need it: TSan's spin-lock interceptors crash inside UCX (libuct).
if [[ "${MNIST_DDP_MPI_PML:-ucx}" == ob1 ]]; then
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
else
  export OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any OMPI_MCA_btl=self
  export UCX_NET_DEVICES=lo
fi
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
# Open MPI 4.1 refuses to start even a local job when neither ssh nor rsh exists (a bare GPU image):
# its isolated launcher starts this machine's ranks without them. These tests launch on one machine.
if [[ -z "${OMPI_MCA_plm:-}" ]] && ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
  export OMPI_MCA_plm=isolated
fi
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# On a machine where the driver lists a GPU, the GPU tests must run: with MNIST_DDP_REQUIRE_GPU=1
# the C++ tests and tests/e2e/gpu_test.sh turn "no GPU, skipping" into a failure. Set only when
# unset (MNIST_DDP_REQUIRE_GPU=0 opts out).
if [[ -z "${MNIST_DDP_REQUIRE_GPU+set}" ]] && command -v nvidia-smi >/dev/null 2>&1 &&
   timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  export MNIST_DDP_REQUIRE_GPU=1
fi
