-- mnist_ddp 0.1.0 (Lmod). `module use <checkout>/modules; module load mnist_ddp` puts the
-- checkout's mnist_ddp on PATH and sets the *_HOME variables the Makefile reads (each one only
-- if the site has not set it already, so a site's own modules win). MNIST_DDP_ROOT overrides the
-- install root (default: the checkout this modulefile lives in).
help([[mnist_ddp 0.1.0: data-parallel MNIST ConvNet training over MPI (CPU: oneDNN/OpenBLAS;
GPU: cuDNN/cuBLAS/NCCL). Sets PATH, MNIST_DDP_ROOT, CUDA_HOME, CUDNN_HOME, NCCL_HOME, MPI_HOME,
HDF5_HOME, OPENBLAS_HOME, DNNL_HOME and OPENBLAS_NUM_THREADS=1.]])
whatis("Name: mnist_ddp")
whatis("Version: 0.1.0")
whatis("Description: data-parallel MNIST ConvNet training over MPI/NCCL")

-- <root>/modules/mnist_ddp/0.1.0.lua -> <root>
local here = myFileName():match("(.*)/modules/mnist_ddp/[^/]*$")
local root = os.getenv("MNIST_DDP_ROOT") or here or "/opt/mnist_ddp/0.1.0"
prepend_path("PATH", root)
setenv("MNIST_DDP_ROOT", root)

-- The *_HOME knobs of the Makefile, each only when the site has not set it and this machine has
-- a prefix the Makefile can use as is (<prefix>/include/<header>); otherwise the Makefile's own
-- discovery (pkg-config, the compiler's default paths) stays in charge.
local function default_home(name, candidates, probe)
  if (os.getenv(name) or "") ~= "" then return end
  for _, prefix in ipairs(candidates) do
    if prefix ~= "" and isFile(pathJoin(prefix, probe)) then
      setenv(name, prefix)
      return
    end
  end
end
default_home("CUDA_HOME", {"/usr/local/cuda"}, "bin/nvcc")
local cuda = os.getenv("CUDA_HOME") or "/usr/local/cuda"
default_home("CUDNN_HOME", {cuda}, "include/cudnn.h")
default_home("NCCL_HOME", {cuda}, "include/nccl.h")
default_home("MPI_HOME", {"/usr"}, "bin/mpicxx")
default_home("HDF5_HOME", {"/usr"}, "include/hdf5.h")
default_home("OPENBLAS_HOME", {"/usr"}, "include/cblas.h")
default_home("DNNL_HOME", {"/usr"}, "include/dnnl.hpp")
-- One rank per core: BLAS single-threaded unless --threads asks for more.
setenv("OPENBLAS_NUM_THREADS", "1")
