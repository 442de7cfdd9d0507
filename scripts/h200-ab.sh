for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp WGTILE_COOPERATIVE_MATRIX=1 WGTILE_AUTOTUNE=off
for round in 1 2; do
for v in mk_a66315a mk_a49fc51 mk_852e59d mk_v3; do
  echo "== $v f16 ($round)"; ./.bin/$v --sizes 4096,2048 --dtype f16 --tiles 128x128x8 --coop 2x2x32x4,4x4x32x2 2>&1 | grep coop
  echo "== $v f32 ($round)"; ./.bin/$v --sizes 4096 --dtype f32 --tiles 128x128x8 2>&1 | grep tiled
done; done
echo "== v3 odd"; ./.bin/mk_v3 --sizes 1792,1793,4096,4097 --dtype f16 --tiles 128x128x8 --coop 2x2x32x4,4x4x32x2 2>&1 | grep coop
./.bin/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f16 --repeats 10 2>&1 | grep -E "^ +[0-9]+ "
./.bin/matmul_sweep --sizes 1792,1793,4096,4097 --dtype f32 --repeats 10 2>&1 | grep -E "^ +[0-9]+ "
