// idx_test.cpp — the IDX reader on real-format files written by the test: raw and gzip, and every
// malformation the loader must reject with a message naming the file and the problem.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/data/idx.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

Bytes images_file(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28,
                  std::uint8_t ndims = 3, std::uint8_t type = 0x08) {
  Bytes b = {0, 0, type, ndims};
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i)
    b.push_back(static_cast<std::uint8_t>(i * 7));
  return b;
}

Bytes labels_file(std::uint32_t count) {
  Bytes b = {0, 0, 0x08, 1};
  put_be32(b, count);
  for (std::uint32_t i = 0; i < count; ++i) b.push_back(static_cast<std::uint8_t>(i % 10));
  return b;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnist_ddp_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const Bytes& b) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    return p;
  }
  std::string write_gz(const std::string& name, const Bytes& b) {
    const std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
    gzclose(f);
    return p;
  }
  template <class F>
  void expect_error(F&& f, const std::string& file, const std::string& what) {
    testing::expect_user_error(f, file, what);
  }
  void write_dir(std::uint32_t train_n, std::uint32_t test_n) {
    write("train-images-idx3-ubyte", images_file(train_n));
    write("train-labels-idx1-ubyte", labels_file(train_n));
    write_gz("t10k-images-idx3-ubyte.gz", images_file(test_n));
    write_gz("t10k-labels-idx1-ubyte.gz", labels_file(test_n));
  }
  fs::path dir_;
};

TEST_F(IdxFiles, ReadsRawAndGzipIdentically) {
  const Bytes img = images_file(3);
  const auto raw = read_idx_images(write("a", img));
  const auto gz = read_idx_images(write_gz("a.gz", img));
  EXPECT_EQ(raw.count, 3);
  EXPECT_EQ(raw.rows, 28);
  EXPECT_EQ(raw.cols, 28);
  EXPECT_EQ(raw.pixels, gz.pixels);
  EXPECT_EQ(raw.pixels[5], static_cast<std::uint8_t>(35));
  const auto lab = read_idx_labels(write_gz("l.gz", labels_file(12)));
  EXPECT_EQ(lab.count, 12);
  EXPECT_EQ(lab.labels[11], 1);
}

TEST_F(IdxFiles, RejectsBadMagic) {
  Bytes b = images_file(1);
  b[0] = '<';  // an HTML error page saved as the file
  const auto p = write("html", b);
  expect_error([&] { read_idx_images(p); }, p, "not an IDX file");
}

TEST_F(IdxFiles, RejectsWrongElementType) {
  const auto p = write("f32", images_file(1, 28, 28, 3, 0x0D));
  expect_error([&] { read_idx_images(p); }, p, "element type");
}

TEST_F(IdxFiles, RejectsSwappedFiles) {
  const auto p = write("labels_as_images", labels_file(4));
  expect_error([&] { read_idx_images(p); }, p, "1 dimensions, expected 3");
}

TEST_F(IdxFiles, RejectsWrongImageSize) {
  const auto p = write("small", images_file(2, 27, 28));
  expect_error([&] { read_idx_images(p); }, p, "27x28, expected 28x28");
}

TEST_F(IdxFiles, RejectsTruncatedPayload) {
  Bytes b = images_file(3);
  b.resize(b.size() - 100);
  const auto p = write("trunc", b);
  expect_error([&] { read_idx_images(p); }, p, "truncated");
}

TEST_F(IdxFiles, RejectsTrailingBytes) {
  Bytes b = labels_file(3);
  b.push_back(1);
  const auto p = write("trail", b);
  expect_error([&] { read_idx_labels(p); }, p, "unexpected bytes");
}

// A gzip "bomb": 10 bytes of header and labels, then 256 MiB of zeros that compress to ~250 KiB.
// The reader stops one byte past what the header declares instead of allocating it all.
TEST_F(IdxFiles, GzipBombStopsAtTheDeclaredSize) {
  const auto p = (dir_ / "bomb.gz").string();
  gzFile f = gzopen(p.c_str(), "wb9");
  ASSERT_NE(f, nullptr);
  const Bytes head = labels_file(2);
  gzwrite(f, head.data(), static_cast<unsigned>(head.size()));
  const Bytes zeros(1 << 20, 0);
  for (int i = 0; i < 256; ++i) gzwrite(f, zeros.data(), static_cast<unsigned>(zeros.size()));
  gzclose(f);
  EXPECT_EQ(read_maybe_gz(p, 1).size(), head.size() + 1);
  expect_error([&] { read_idx_labels(p); }, p, "unexpected bytes after the 2 labels");
  // A bomb whose header is not a labels header (an images file here): the header is enough.
  const auto q = (dir_ / "bomb-images.gz").string();
  gzFile g = gzopen(q.c_str(), "wb9");
  ASSERT_NE(g, nullptr);
  const Bytes img = images_file(1);
  gzwrite(g, img.data(), static_cast<unsigned>(img.size()));
  for (int i = 0; i < 256; ++i) gzwrite(g, zeros.data(), static_cast<unsigned>(zeros.size()));
  gzclose(g);
  EXPECT_EQ(read_maybe_gz(q, 1).size(), 8u + 1);
  expect_error([&] { read_idx_labels(q); }, q, "IDX file has 3 dimensions, expected 1");
  // A header declaring more than the reader accepts (16 GiB of pixels) is refused by size.
  Bytes huge = images_file(1);
  huge[4] = 0x01;  // 2^24 + 1 images... times 784 = 12.3 GiB
  huge[5] = 0x00;
  huge[6] = 0x00;
  huge[7] = 0x01;
  const auto h = write("huge", huge);
  EXPECT_EQ(read_maybe_gz(h, 3).size(), 16u + 1);
  expect_error([&] { read_idx_images(h); }, h, "more than the 8 GiB this reader accepts");
}

TEST_F(IdxFiles, RejectsShortHeader) {
  const auto p = write("short", Bytes{0, 0, 8});
  expect_error([&] { read_idx_images(p); }, p, "too short");
}

TEST_F(IdxFiles, RejectsLabelOutOfRange) {
  Bytes b = labels_file(20);
  b[8 + 13] = 12;
  const auto p = write("lab", b);
  expect_error([&] { read_idx_labels(p); }, p, "label 12 at index 13");
}

TEST_F(IdxFiles, RejectsCorruptAndTruncatedGzip) {
  const auto good = write_gz("g.gz", images_file(4));
  std::ifstream in(good, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  const auto p1 = write("cut.gz", cut);
  expect_error([&] { read_idx_images(p1); }, p1, "");
  Bytes flipped = gz;
  for (std::size_t i = 20; i < 60 && i < flipped.size(); ++i) flipped[i] ^= 0x5a;
  const auto p2 = write("flip.gz", flipped);
  expect_error([&] { read_idx_images(p2); }, p2, "");
}

TEST_F(IdxFiles, MissingFileNamesIt) {
  const std::string p = (dir_ / "nope").string();
  expect_error([&] { read_idx_images(p); }, p, "cannot open");
}

TEST_F(IdxFiles, LoadsADirectoryMixingRawAndGzip) {
  write_dir(5, 3);
  std::ofstream(dir_ / "DATASET") << "unit-test set\n";
  const DataSplit d = load_data_dir(dir_.string());
  EXPECT_EQ(d.train.count, 5);
  EXPECT_EQ(d.test.count, 3);
  EXPECT_EQ(d.name, "unit-test set");
  EXPECT_EQ(d.train.labels[4], 4);
  EXPECT_GT(d.std, 0.0f);
}

TEST_F(IdxFiles, DirectoryCountMismatchNamesBothFiles) {
  write_dir(5, 3);
  write("train-labels-idx1-ubyte", labels_file(4));
  expect_error([&] { load_data_dir(dir_.string()); }, "train-labels-idx1-ubyte", "5 images but");
}

TEST_F(IdxFiles, DirectoryMissingFileOrDirectory) {
  write_dir(2, 2);
  fs::remove(dir_ / "t10k-images-idx3-ubyte.gz");
  expect_error([&] { load_data_dir(dir_.string()); }, dir_.string(),
               "missing t10k-images-idx3-ubyte");
  const std::string none = (dir_ / "absent").string();
  expect_error([&] { load_data_dir(none); }, none, "does not exist");
}

TEST(GatherBatch, NormalisesAndPicksIndices) {
  Dataset d;
  d.count = 2;
  d.images.assign(2 * kImagePixels, 0);
  d.images[kImagePixels + 3] = 255;
  d.labels = {7, 2};
  const std::vector<std::int64_t> idx = {1, 0};
  std::vector<float> x(2 * kImagePixels);
  std::vector<std::int32_t> y(2);
  gather_batch(d, idx, 0.5f, 0.25f, x.data(), y.data());
  EXPECT_EQ(y[0], 2);
  EXPECT_EQ(y[1], 7);
  EXPECT_NEAR(x[3], (1.0f - 0.5f) / 0.25f, 1e-6);
  EXPECT_NEAR(x[0], -2.0f, 1e-6);
}

}  // namespace
}  // namespace mnist_ddp
