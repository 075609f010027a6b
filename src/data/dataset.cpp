// dataset.cpp — loading and validating the data directory; batch gather + normalisation.
#include "mnist_ddp/data/dataset.hpp"

#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "mnist_ddp/data/idx.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

std::string resolve(const std::string& dir, const std::string& base) {
  for (const std::string& cand : {dir + "/" + base, dir + "/" + base + ".gz"}) {
    std::error_code ec;
    if (fs::is_regular_file(cand, ec)) return cand;
  }
  throw UserError(fmt::format(
      "--data {}: missing {} (or {}.gz). The directory must hold the four MNIST-format files "
      "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
      "t10k-labels-idx1-ubyte (raw or .gz); run data/prepare.sh to create the default one",
      dir, base, base));
}

Dataset load_pair(const std::string& images_path, const std::string& labels_path) {
  IdxImages img = read_idx_images(images_path);
  IdxLabels lab = read_idx_labels(labels_path);
  if (img.count != lab.count) {
    throw UserError(
        fmt::format("{} has {} images but {} has {} labels; the two files must come "
                    "from the same dataset (re-run data/prepare.sh)",
                    images_path, img.count, labels_path, lab.count));
  }
  return Dataset{img.count, std::move(img.pixels), std::move(lab.labels)};
}

}  // namespace

DataSplit load_data_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    throw UserError(
        fmt::format("--data {}: directory does not exist; run data/prepare.sh (or "
                    "`make data`) to fetch the default dataset, or point --data at "
                    "a directory of MNIST-format files",
                    dir));
  }
  if (!fs::is_directory(dir, ec)) {
    throw UserError(fmt::format("--data {}: not a directory", dir));
  }
  DataSplit s;
  s.dir = dir;
  s.files[0] = resolve(dir, "train-images-idx3-ubyte");
  s.files[1] = resolve(dir, "train-labels-idx1-ubyte");
  s.files[2] = resolve(dir, "t10k-images-idx3-ubyte");
  s.files[3] = resolve(dir, "t10k-labels-idx1-ubyte");
  s.train = load_pair(s.files[0], s.files[1]);
  s.test = load_pair(s.files[2], s.files[3]);

  s.name = "unknown (no DATASET file in the data directory)";
  if (std::ifstream f(dir + "/DATASET"); f) {
    std::string line;
    if (std::getline(f, line) && !line.empty()) s.name = line;
  }
  s.crc32 = static_cast<std::uint32_t>(
      crc32(0L, s.train.labels.data(), static_cast<uInt>(s.train.labels.size())));

  // Normalisation constants from the training set itself (MNIST: 0.1307/0.3081).
  double sum = 0, sq = 0;
  for (std::uint8_t p : s.train.images) {
    const double v = p / 255.0;
    sum += v;
    sq += v * v;
  }
  const double n = static_cast<double>(s.train.images.size());
  const double mean = sum / n;
  s.mean = static_cast<float>(mean);
  s.std = static_cast<float>(std::sqrt(std::max(sq / n - mean * mean, 1e-12)));
  return s;
}

void gather_batch(const Dataset& d, std::span<const std::int64_t> indices, float mean, float std,
                  float* x, std::int32_t* y) {
  // (p/255 - mean)/std == p * a + b
  const float a = 1.0f / (255.0f * std);
  const float b = -mean / std;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto idx = static_cast<std::size_t>(indices[i]);
    const std::uint8_t* src = d.images.data() + idx * kImagePixels;
    float* dst = x + i * kImagePixels;
    for (int k = 0; k < kImagePixels; ++k) dst[k] = static_cast<float>(src[k]) * a + b;
    y[i] = d.labels[idx];
  }
}

}  // namespace mnist_ddp
