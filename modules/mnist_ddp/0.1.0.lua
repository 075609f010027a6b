-- mnist_ddp 0.1.0 (Lmod) for a built checkout. `module use <checkout>/modules; module load
-- mnist_ddp` puts the checkout's mnist_ddp and its tools/ on PATH; `module unload` takes back
-- everything it set, the user's own OPENBLAS_NUM_THREADS included (pushenv). An installed copy
-- (`make install PREFIX=DIR`) has its own modulefile in DIR/share/modulefiles.
--
-- A site whose MPI, HDF5 or CUDA come from modules adds them here, e.g.:
--   depends_on("openmpi/4.1")
--   depends_on("hdf5/1.10")
--   depends_on("cuda/13.0")
help([[mnist_ddp 0.1.0: data-parallel MNIST ConvNet training over MPI (CPU: oneDNN/OpenBLAS;
GPU: cuDNN/cuBLAS/NCCL). Puts the checkout's mnist_ddp and tools/ on PATH, sets MNIST_DDP_ROOT,
and OPENBLAS_NUM_THREADS=1 while loaded.]])
whatis("Name: mnist_ddp")
whatis("Version: 0.1.0")
whatis("Description: data-parallel MNIST ConvNet training over MPI/NCCL")

-- <root>/modules/mnist_ddp/0.1.0.lua -> <root>. Values from locals only (never os.getenv):
-- unloading then undoes exactly what loading did.
local root = myFileName():match("(.*)/modules/mnist_ddp/[^/]*$") or "/opt/mnist_ddp/0.1.0"
prepend_path("PATH", root)
prepend_path("PATH", pathJoin(root, "tools"))
setenv("MNIST_DDP_ROOT", root)
-- One rank per core: BLAS single-threaded unless --threads asks for more.
pushenv("OPENBLAS_NUM_THREADS", "1")
