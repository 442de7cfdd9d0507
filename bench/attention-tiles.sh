for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp
timeout 150 ./.bin/attention --sweep-tiles --sweep-only --sizes 1024 --dims 128,64 --repeats 5 2>&1
