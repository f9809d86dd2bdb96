// Stream-K for a persistent decode grid (w4a16_decode.cuh, w2a8_decode.cuh, and
// w8a16_decode.cuh's 16-warp CTAs): the row sets split by work, not by set, over every CTA
// that fits at once.
//
// Where a decode grid's row sets just outnumber the CTAs that fit (W4A16 8192 x 8704 at M
// = 1: 272 two-strip sets for 264 CTAs), whole sets per CTA take a second turn on about
// one CTA an SM, and the weights stream at half the rate (17.4 us against 10.2 for 8192 x
// 8192 on the H200). Here CTA b of B takes the chunks [b W / B, (b + 1) W / B) of the W =
// sets x chunks, in set-major order, so every CTA streams as many bytes. Each set of that
// range is a unit, its chunks split over the CTA's W warps (8, or W8A16's 16) as
// DecodeSplit's S = 8 split them, and summed through shared memory the same way. The
// ranges are cut in granules of W chunks where a set's chunks are a multiple of W (else
// the largest power of two below W that divides them), so that each part of a set splits
// evenly over the warps: with single chunks a CTA's two or three parts could each leave
// warps a round short, and the busiest warp of 4096 x 14336's grid ran 8 rounds where 6.8
// were its share. With no more CTAs than sets, every range spans at least one set's
// chunks, so a set is shared by at most two CTAs, b - 1 and b across boundary b. CTA b
// works on its part first (its first unit) and publishes its sum in GemmArgs::sync, each
// sum in a 64-bit word with a nonzero tag in its high half (one store, so the word is
// either still zero or complete: no fence, which would stall the weight loads in flight);
// CTA b - 1 reaches its part last, reads those words, waiting for any still zero, adds
// them and stores y, and zeroes them, so that the sync words are zero again when the grid
// completes. A CTA waits only for the next one, which waits for nothing before it
// publishes, so the grid always completes. y is the same whichever CTA is first.
#ifndef QMM_KERNELS_CUDA_DECODE_STREAM_CUH_
#define QMM_KERNELS_CUDA_DECODE_STREAM_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cuda/atomic>
#include <cuda/std/bit>

#include "kernels/cuda/decode_launch.h"
#include "kernels/cuda/decode_plan.h"
#include "kernels/cuda/decode_split.cuh"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/gemm_args.h"

namespace qmm::cuda {

// The most CTAs of a stream-K grid whose reduced tile (one set's outputs) is
// `tile_floats` floats: one tile of 64-bit words per CTA in GemmArgs::sync.
constexpr int StreamMaxCtas(int tile_floats) {
  return static_cast<int>(kSyncBytes / (tile_floats * int64_t{8}));
}

// The CTAs of the stream-K grid of `sets` row sets whose tile is `tile_floats` floats, on
// `slots` CTAs that fit at once: all of them, but no more than the sets (so that a set
// spans at most two CTAs' ranges) nor than GemmArgs::sync holds tiles for.
inline int64_t StreamCtas(int64_t slots, int64_t sets, int tile_floats) {
  return std::min({slots, sets, int64_t{StreamMaxCtas(tile_floats)}});
}

// Enqueues `kernel` (a decode kernel's stream-K instance, `threads` a CTA) with `p` on the
// stream-K grid of `sets` row sets whose tile is `tile_floats` floats (StreamCtas CTAs).
// The sets' shared sums go through args.sync, which the caller has checked is set.
template <typename Params>
cudaError_t LaunchStreamGrid(void (*kernel)(Params), Params p, const GemmArgs& args, int64_t slots,
                             int64_t sets, int tile_floats, int threads, int cc_major) {
  DecodeGrid grid;
  grid.ctas = StreamCtas(slots, sets, tile_floats);
  p.stream_sums = static_cast<uint64_t*>(args.sync);
  p.early_trigger = EarlyTrigger(grid.ctas, slots);
  const DecodeLaunch launch(grid, threads, args.stream, cc_major);
  return launch(kernel, p);
}

// The kernel-side split, with DecodeSplit's interface (one set per unit, all kWarps warps
// of the CTA on it, no cluster).
template <int kWarps>
struct DecodeStreamOf {
  static_assert(kWarps == 8 || kWarps == 16);
  static constexpr int kWarpsLog2 = kWarps == 8 ? 3 : 4;
  static constexpr int sets_per_cta = 1;
  static constexpr int unit_stride = 1;
  using Word = ::cuda::atomic_ref<uint64_t, ::cuda::thread_scope_device>;
  int chunks;
  int warp;
  int64_t range_begin;  // this CTA's first chunk, counted over all sets
  int64_t range_end;
  int first_unit;  // the set of range_begin
  int end_unit;    // one past the set of range_end - 1

  // The host launches at most `sets` CTAs, so the range is never empty.
  __device__ DecodeStreamOf(int sets, int chunks, int warp)
      : chunks(chunks),
        warp(warp),
        range_begin(Cut(sets, chunks, blockIdx.x)),
        range_end(Cut(sets, chunks, blockIdx.x + 1)),
        first_unit(static_cast<int>(range_begin / chunks)),
        end_unit(static_cast<int>((range_end - 1) / chunks) + 1) {}

  // The first chunk of CTA b's range: granule b G / B of the G granules (granules of
  // min(kWarps, the lowest set bit of chunks) chunks, a power of two, so shifts).
  static __device__ int64_t Cut(int sets, int chunks, unsigned b) {
    const int shift = min(__ffs(chunks) - 1, kWarpsLog2);
    return (int64_t{sets} * chunks >> shift) * b / gridDim.x << shift;
  }

  __device__ int Units(int /*sets*/) const { return end_unit; }
  __device__ int SetOf(int unit) const { return unit; }

  // This warp's chunks of set `unit`: its 1/kWarps of the part of the set in this CTA's
  // range.
  __device__ WarpSpan Span(int unit) const {
    const int64_t base = int64_t{unit} * chunks;
    const int lo = static_cast<int>(max(range_begin, base) - base);
    const int hi = static_cast<int>(min(range_end, base + chunks) - base);
    const int per_warp = (hi - lo + (1 << kWarpsLog2) - 1) >> kWarpsLog2;
    const int begin = min(lo + warp * per_warp, hi);
    return {begin, min(per_warp, hi - begin), per_warp};
  }

  __device__ void SyncPartials() const { __syncthreads(); }
  __device__ void Finish() const {}
  __device__ int First(int /*total*/) const { return static_cast<int>(threadIdx.x); }
  __device__ int End(int total) const { return total; }
  template <typename V>
  __device__ V SumPartials(const V* red, int q, int f, int warp_elems) const {
    V sum = 0;
#pragma unroll
    for (int s = 0; s < 1 << kWarpsLog2; ++s) sum += red[(q << kWarpsLog2 | s) * warp_elems + f];
    return sum;
  }

  // Whether CTA b - 1 has the first chunks of set `unit` (this CTA publishes its part) /
  // CTA b + 1 has its last ones (this CTA stores the set, with b + 1's part added).
  __device__ bool Head(int unit) const { return range_begin > int64_t{unit} * chunks; }
  __device__ bool Tail(int unit) const { return range_end < int64_t{unit} * chunks + chunks; }

  // Where this CTA stores set `unit` with CTA b + 1's part (its last set), starts reading
  // b + 1's words of it into `words` (this thread's kPer of the tile; zero-initialized by
  // the caller). Called as the set's last round starts, by which time b + 1, which does
  // that set first, has mostly published: the reduction then finds the words in registers
  // instead of waiting a round trip to L2 at the CTA's very end. On the H200 that took
  // W2A8's one-tile, one-unit kernel 3-7% faster at M = 1 - 8 (8192 x 10240 at M = 1:
  // 12.25 -> 11.40 us), but W4A16's kernels 5-9% slower and W2A8's two-unit one 1%
  // (their registers), so only that kernel calls it; the others read at the end (Reduce).
  template <int kThreads, int kPer>
  __device__ void Prefetch(int unit, uint64_t* sums, uint64_t (&words)[kPer]) const {
    if (Head(unit) || !Tail(unit)) return;
    constexpr int kTile = kPer * kThreads;
    uint64_t* other = sums + (int64_t{blockIdx.x} + 1) * kTile + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      words[i] = Word(other[i * kThreads]).load(::cuda::memory_order_relaxed);
    }
  }

  // Whether this CTA stores set `unit`'s outputs. v[i] (float or int32) is this CTA's sum
  // of element threadIdx.x + i * kThreads of the set's tile. A set that CTA b shares with
  // b - 1 (its first) is CTA b - 1's to store: CTA b publishes its sum in tile b of
  // `sums`. A set it shares with b + 1 (its last) it stores, with tile b + 1 added into v:
  // `words` are those of Prefetch, or with kRead read now, and any still zero is read
  // again until it is not.
  template <int kPer, int kThreads, bool kRead, typename V>
  __device__ bool Combine(int unit, V (&v)[kPer], uint64_t* sums, uint64_t (&words)[kPer]) const {
    static_assert(sizeof(V) == 4);
    const bool head = Head(unit);
    const bool tail = Tail(unit);
    if (!head && !tail) return true;
    constexpr int kTile = kPer * kThreads;
    constexpr uint64_t kTag = uint64_t{1} << 32;
    const int64_t b = blockIdx.x;
    if (head) {
      uint64_t* mine = sums + b * kTile + threadIdx.x;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        Word(mine[i * kThreads])
            .store(kTag | ::cuda::std::bit_cast<uint32_t>(v[i]), ::cuda::memory_order_relaxed);
      }
      return false;
    }
    uint64_t* other = sums + (b + 1) * kTile + threadIdx.x;
    if constexpr (kRead) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        words[i] = Word(other[i * kThreads]).load(::cuda::memory_order_relaxed);
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      Word word(other[i * kThreads]);
      while (words[i] == 0) words[i] = word.load(::cuda::memory_order_relaxed);
      v[i] += ::cuda::std::bit_cast<V>(static_cast<uint32_t>(words[i]));
      word.store(0, ::cuda::memory_order_relaxed);
    }
    return true;
  }

  // The end of unit `unit`: this thread's elements e = threadIdx.x + i * kThreads of the
  // set's tile (kTile elements) summed over the kWarps warps' partial tiles in `red`,
  // combined with the other CTA's sums where two CTAs share the set (Combine; `words` from
  // Prefetch), and store(e, sum) for each where this CTA stores the set. Every thread
  // below kThreads calls it (all of the CTA's, or, where the tile has fewer elements than
  // the CTA threads, one thread an element).
  template <int kTile, int kThreads, typename V, typename Store>
  __device__ void Reduce(int unit, const V* red, uint64_t* sums,
                         uint64_t (&words)[kTile / kThreads], Store&& store) const {
    ReduceWith<kTile, kThreads, false>(unit, red, sums, words, store);
  }
  // The same, with the other CTA's words read only now.
  template <int kTile, int kThreads, typename V, typename Store>
  __device__ void Reduce(int unit, const V* red, uint64_t* sums, Store&& store) const {
    uint64_t words[kTile / kThreads];  // filled by Combine
    ReduceWith<kTile, kThreads, true>(unit, red, sums, words, store);
  }

 private:
  template <int kTile, int kThreads, bool kRead, typename V, typename Store>
  __device__ void ReduceWith(int unit, const V* red, uint64_t* sums,
                             uint64_t (&words)[kTile / kThreads], Store&& store) const {
    static_assert(kTile % kThreads == 0);
    constexpr int kPer = kTile / kThreads;
    V v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[i] = SumPartials(red, 0, static_cast<int>(threadIdx.x) + i * kThreads, kTile);
    }
    if (!Combine<kPer, kThreads, kRead>(unit, v, sums, words)) return;
#pragma unroll
    for (int i = 0; i < kPer; ++i) store(static_cast<int>(threadIdx.x) + i * kThreads, v[i]);
  }
};

using DecodeStream = DecodeStreamOf<8>;

}  // namespace qmm::cuda

#endif  // QMM_KERNELS_CUDA_DECODE_STREAM_CUH_
