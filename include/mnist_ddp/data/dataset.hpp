// dataset.hpp — the in-memory train/test sets loaded from an MNIST-format directory, their
// provenance (which dataset a run used), and the batch gather/normalise step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mnist_ddp {

inline constexpr int kImageSide = 28;
inline constexpr int kImagePixels = kImageSide * kImageSide;
inline constexpr int kClasses = 10;

struct Dataset {
  int count = 0;
  std::vector<std::uint8_t> images;  // [count][28*28]
  std::vector<std::uint8_t> labels;  // [count]
};

struct DataSplit {
  Dataset train;
  Dataset test;
  std::string dir;
  std::string name;         // from DIR/DATASET (written by data/prepare.sh), else "unknown"
  std::string files[4];     // resolved paths: train images, train labels, test images, test labels
  std::uint32_t crc32 = 0;  // of the training labels, to tell datasets apart in logs
  float mean = 0;           // of training pixels scaled to [0,1]
  float std = 1;
};

// Loads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; validates each file and that the
// image and label counts agree. UserError naming the file and the fix otherwise.
DataSplit load_data_dir(const std::string& dir);

// x[n][28*28] = (pixel/255 - mean) / std and y[n] = label for the given dataset indices.
void gather_batch(const Dataset& d, std::span<const std::int64_t> indices, float mean, float std,
                  float* x, std::int32_t* y);

}  // namespace mnist_ddp
