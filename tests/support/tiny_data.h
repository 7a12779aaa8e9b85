// The tiny IDX data set most tests train on (unit and integration tiers alike).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace amptune::testing {

namespace tiny_detail {
inline void put_be32(std::ofstream& out, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

inline void write_split(const std::string& dir, const std::string& split, int n, int side,
                        int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(0, 60);
  std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
  put_be32(images, 2051);
  put_be32(images, static_cast<uint32_t>(n));
  put_be32(images, static_cast<uint32_t>(side));
  put_be32(images, static_cast<uint32_t>(side));
  put_be32(labels, 2049);
  put_be32(labels, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    const int label = i % classes;
    const int row = 1 + label * (side - 2) / classes;
    for (int y = 0; y < side; ++y) {
      for (int x = 0; x < side; ++x) {
        int v = noise(rng);
        if (y == row || y == row + 1) v += 180;
        images.put(static_cast<char>(std::min(v, 255)));
      }
    }
    labels.put(static_cast<char>(label));
  }
}
}  // namespace tiny_detail

// Writes DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte: `classes` classes of side x side grey
// images whose class is visible (a bright bar at a class-dependent row) plus seeded noise.
inline void write_tiny_idx(const std::string& dir, int train_n, int test_n, int side = 12,
                           int classes = 4) {
  std::filesystem::create_directories(dir);
  tiny_detail::write_split(dir, "train", train_n, side, classes, 1);
  tiny_detail::write_split(dir, "t10k", test_n, side, classes, 2);
}

}  // namespace amptune::testing
