# mpi_env.sh — Open MPI settings that keep launches reliable on a 2-core test machine (measured:
# ../shared/notes/local-slurm-and-openmpi.md). Sourced by the tests and `make run`; NOT used by
# the slurm/ scripts (a real cluster has its own settings).
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any OMPI_MCA_btl=self
export UCX_NET_DEVICES=lo
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
