# cudnn-env.sh - sourced by GPU scripts: makes libcudnn.so.9 findable for
# DTRAIN_CUDA_ATTN=cudnn (worker/cuda/attention_cudnn.cpp dlopens it at first
# use), and the same cuDNN PyTorch runs: the lib directory of its wheel
# (nvidia-cudnn-cu13, through ${PYTHON:-python3}) goes first on
# LD_LIBRARY_PATH, so cuDNN's own sub-libraries are found next to it.  With
# DTRAIN_CUDNN_LIB set, or no such wheel, nothing changes (the loader's path
# and cache then decide).  Not an installer: without any cuDNN the cudnn path
# says it cannot load.
dt_cudnn_dir() { # the wheels' layout: site-packages/nvidia/cudnn/lib (or nvidia/<cuda>/lib)
  "${PYTHON:-python3}" - 2>/dev/null <<'PY'
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
libs = [p for d in dirs for p in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudnn.so.9")))]
print(os.path.dirname(libs[0]) if libs else "")
PY
}
if [ -z "${DTRAIN_CUDNN_LIB:-}" ]; then
  dt_dir=$(dt_cudnn_dir)
  if [ -n "$dt_dir" ] && [ -e "$dt_dir/libcudnn.so.9" ]; then
    export LD_LIBRARY_PATH="$dt_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  unset dt_dir
fi
