-- mnist_ddp 0.1.0 (Lmod). Adjust `root` to the install prefix.
help([[mnist_ddp: data-parallel MNIST ConvNet training over MPI]])
whatis("Name: mnist_ddp")
whatis("Version: 0.1.0")
local root = os.getenv("MNIST_DDP_ROOT") or "/opt/mnist_ddp/0.1.0"
prepend_path("PATH", root)
setenv("MNIST_DDP_ROOT", root)
setenv("OPENBLAS_NUM_THREADS", "1")
