// Numbers derived from a launch shape: the kNN coordinates and the regression feature banks.
//
// kNN coordinates are log2(1 + x) of every dimension (grid, block, shared memory, numeric args):
// launch dimensions span decades, and in log space "twice as large in one dimension" is one unit
// whatever the dimension, which is the scale a duration responds to.
//
// The linear bank holds physical drivers of a kernel's time: blocks, waves over the SMs
// (ceil(blocks / sm_count)), the work (product of the numeric args, B*M*N*K for a GEMM), the work
// one wave does (waves * work / blocks), the operand surface (sum over i of work / arg_i, the
// B*(M*N + M*K + N*K)-like bytes term) and waves * arg_i. A kernel with no numeric args uses its
// thread count as work. The log bank holds log2 of blocks, threads per block, shared memory and
// each numeric arg, for the power-law model.
#pragma once

#include <array>
#include <cstdint>

#include "gpuqos/predictor/features.h"

namespace gpuqos::predictor {

inline constexpr int kPointDims = 16;
using Point = std::array<float, kPointDims>;  // dims 15.. are zero

enum BankIndex : int {
  kOne = 0,
  kBlocks,
  kWaves,
  kThreads,
  kWork,
  kWaveWork,
  kSurface,
  kWaveThreadsPerBlock,
  kWaveArg0,  // kWaveArg0 + i: waves * arg_i, i < kMaxArgs
  kBankSize = kWaveArg0 + static_cast<int>(kMaxArgs),
};
using Bank = std::array<double, kBankSize>;

enum LogBankIndex : int {
  kLogOne = 0,
  kLogBlocks,
  kLogThreadsPerBlock,
  kLogShared,
  kLogArg0,  // kLogArg0 + i: log2(1 + arg_i)
  kLogBankSize = kLogArg0 + static_cast<int>(kMaxArgs),
};
using LogBank = std::array<double, kLogBankSize>;

// True when args[i] (i < arg_count) is a size, not a pointer (see kMaxNumericArg).
inline bool numeric_arg(const LaunchShape& shape, std::size_t i) {
  return i < shape.arg_count && shape.args[i] < kMaxNumericArg;
}

// The sizes a kernel's time grows with, in log2: waves over the SMs, threads per block and each
// numeric arg (0 for a pointer). A kernel at most proportionally slower per size it grows by is
// what bounds a regression's extrapolation (kernel_model.h).
inline constexpr int kSizeDims = 2 + static_cast<int>(kMaxArgs);
using SizePoint = std::array<float, kSizeDims>;

Point knn_point(const LaunchShape& shape);
SizePoint size_point(const LaunchShape& shape, std::uint32_t sm_count);
Bank linear_bank(const LaunchShape& shape, std::uint32_t sm_count);
LogBank log_bank(const LaunchShape& shape);

// Hash of every field of the shape (equal shapes hash equal).
std::uint64_t shape_hash(const LaunchShape& shape);

}  // namespace gpuqos::predictor
