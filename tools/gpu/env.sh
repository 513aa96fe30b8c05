# Sourced on the GPU machine: `. .gpu/env.sh` (tools/gpu/bundle.sh puts it
# there). Puts the bundled binaries and libraries first, then finds the CUDA
# runtime, cuBLAS and NCCL wherever that machine keeps them, and prints
# what it found.
_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dirs="$_here/lib"
for _name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  _hit=$(find -H /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib /opt \
    /usr/local/lib -name "$_name" 2>/dev/null | head -n 1)
  if [ -n "$_hit" ]; then
    case ":$_dirs:" in *":$(dirname "$_hit"):"*) ;; *) _dirs="$_dirs:$(dirname "$_hit")" ;; esac
    echo "gpu-env: $_name -> $_hit"
  else
    echo "gpu-env: $_name not found" >&2
  fi
done
export LD_LIBRARY_PATH="$_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$_here/bin:$PATH"
unset _here _dirs _name _hit
