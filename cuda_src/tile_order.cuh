// tile_order.cuh - the order in which the GEMM kernels (matmul.cu, gemm_sm90.cu) take their
// output tiles. Plain integer arithmetic: it also compiles as host C++ (the kernels' emulators).
#pragma once

#include "ignis_types.cuh"

namespace ignis {

// Output tile `id` of a tiles_m x tiles_n grid, in groups of 8 tile rows (the last group may
// be shorter), down the rows of a group first: the tiles computed at the same time then share
// A and B panels in L2.
IGNIS_HD void grouped_tile(int id, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int group_rows = 8;
  const int per_group = group_rows * tiles_n;
  const int group = id / per_group;
  const int first_m = group * group_rows;
  const int rows = (tiles_m - first_m) < group_rows ? (tiles_m - first_m) : group_rows;
  const int in_group = id - group * per_group;
  tile_m = first_m + in_group % rows;
  tile_n = in_group / rows;
}

}  // namespace ignis
