// NumPy .npy files (format 1.0, 2.0, 3.0) holding float32 C-order arrays: fixtures, weights
// and outputs that Python can check directly.
#pragma once

#include <string>
#include <vector>

#include "engine/tensor.h"

namespace pb {

struct NpyArray {
  Shape shape;  // empty for a 0-d array (one value)
  std::vector<float> data;
};

// Accepts only dtype '<f4' (or '=f4') in C order; anything else, a malformed header or a data
// size that does not match the shape throws pb::UsageError naming the file. Reads at most the size the header gives (a stream like /dev/zero is refused).
NpyArray read_npy(const std::string& path);
// The same checks on a whole file's bytes; `path` names it in errors.
NpyArray parse_npy(const std::string& bytes, const std::string& path);
// As above, and the shape must equal `expected_shape`.
NpyArray read_npy(const std::string& path, const Shape& expected_shape);

// NaN or infinity in training input or parameters would be hidden (ReLU) or spread silently:
// throws pb::UsageError naming the file and the first such value.
void check_finite(const NpyArray& a, const std::string& path);

// Writes format 1.0, '<f4', C order, byte-identical to numpy.save; atomic (write_file_atomic).
void write_npy(const std::string& path, const Shape& shape, const float* data);

}  // namespace pb
