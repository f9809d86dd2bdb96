// The W2A8 device layout (what RepackW2A8 writes and the kernel reads) and the layout of
// its launch workspace. Shared by the host repack, the launcher and the kernels.
//
// Weights. Rows of W are grouped 32 at a time (a "row group": two 16-row blocks, the M
// side of mma.m16n8k32) and K 128 at a time (a "k block"). One (row group, k block) pair
// is a "unit" of 1024 bytes: for each 16-row block r in {0, 1}, 32 lanes x 16 bytes, lane
// L = 4g + t holding the four A-fragment registers (words w = 0..3) of four MMAs at once:
// word w, byte b, bits 2j..2j+1 hold the code c = t + 1 of
//   row = row_group*32 + r*16 + g + 8*(w & 1),
//   k   = k_block*128 + (w >> 1)*64 + t*16 + j*4 + b.
// So field j of the four words is, after one AND with 0x03030303 << 2j, the A fragment
// of MMA j (scaled by 4^j; MMA column h*16 + t*4 + b is k h*64 + t*16 + j*4 + b), and a
// lane's B fragments for the whole k block are two 16-byte runs of its token's
// activations, k_block*128 + t*16 and 64 bytes further (word j of each feeds MMA j), so
// the four lanes of a token read whole 32-byte sectors. Units are stored
// row group by row group, k blocks in order, so any run of consecutive units is one
// contiguous byte range (each 16-byte load is coalesced and each byte is read once).
// Rows past N (padding of the last group) hold code 0 and are never written out.
// After the codes come padded_rows() fp32 row scales (0 past N).
#ifndef QMM_KERNELS_CUDA_W2A8_LAYOUT_H_
#define QMM_KERNELS_CUDA_W2A8_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace qmm::cuda::w2a8 {

inline constexpr int kRowsPerBlock = 16;
inline constexpr int kBlocksPerGroup = 2;
inline constexpr int kRowsPerGroup = kRowsPerBlock * kBlocksPerGroup;
inline constexpr int kKPerBlock = 128;
inline constexpr int kBytesPerRowBlock = kRowsPerBlock * kKPerBlock / 4;  // 512
inline constexpr int kUnitBytes = kBytesPerRowBlock * kBlocksPerGroup;    // 1024
// Tokens of one n8 MMA tile.
inline constexpr int kTokensPerTile = 8;

struct Geometry {
  int64_t n = 0;
  int64_t k = 0;
  int64_t row_groups = 0;
  int64_t k_blocks = 0;

  constexpr Geometry(int64_t n_rows, int64_t k_cols)
      : n(n_rows),
        k(k_cols),
        row_groups((n_rows + kRowsPerGroup - 1) / kRowsPerGroup),
        k_blocks(k_cols / kKPerBlock) {}
  constexpr int64_t units() const { return row_groups * k_blocks; }
  constexpr int64_t padded_rows() const { return row_groups * kRowsPerGroup; }
  constexpr int64_t code_bytes() const { return units() * kUnitBytes; }
  constexpr int64_t device_bytes() const { return code_bytes() + padded_rows() * 4; }
};

// Launch workspace for m activation rows, each region 256-byte aligned:
//   acc       int32 [m, padded_rows]  split-K partial sums (zeroed by the prologue)
//   counters  uint32 [ceil(m / 8), row_groups]  k blocks summed so far per (token group,
//                                     row group); a launch whose token groups are larger
//                                     uses only the first rows
//   x_scale   fp32 [m]                per-row activation scale
//   x_sum     int32 [m]               sum of the row's int8 values (the w + 1 correction)
//   xq        int8 [m, k]             the quantized activations
// acc and counters are adjacent, so that one pass of 16-byte stores zeroes both.
struct Workspace {
  int64_t acc = 0;
  int64_t counters = 0;
  int64_t zero_end = 0;  // end of the zeroed region (acc + counters, 16-byte multiple)
  int64_t x_scale = 0;
  int64_t x_sum = 0;
  int64_t xq = 0;
  int64_t total = 0;

  static constexpr int64_t Align(int64_t v) { return (v + 255) / 256 * 256; }

  constexpr Workspace(const Geometry& g, int64_t m) {
    const int64_t groups = (m + kTokensPerTile - 1) / kTokensPerTile;
    counters = acc + m * g.padded_rows() * 4;
    zero_end = counters + (groups * g.row_groups * 4 + 15) / 16 * 16;
    x_scale = Align(zero_end);
    x_sum = Align(x_scale + m * 4);
    xq = Align(x_sum + m * 4);
    total = Align(xq + m * g.k);
  }
};

}  // namespace qmm::cuda::w2a8

#endif  // QMM_KERNELS_CUDA_W2A8_LAYOUT_H_
