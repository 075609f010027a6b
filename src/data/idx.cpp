// idx.cpp — IDX parsing and validation; gzip through zlib.
#include "mnist_ddp/data/idx.hpp"

#include <fcntl.h>
#include <zlib.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>
#include <optional>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Validates the 4-byte magic and returns the dims.
std::vector<std::uint32_t> parse_header(const std::vector<std::uint8_t>& b, const std::string& path,
                                        int want_ndims, const char* what) {
  if (b.size() < 4) {
    throw UserError(
        fmt::format("{}: file is {} bytes, too short for an IDX header; re-download "
                    "or re-run data/prepare.sh",
                    path, b.size()));
  }
  if (b[0] != 0 || b[1] != 0) {
    throw UserError(fmt::format(
        "{}: not an IDX file (magic {:02x}{:02x}{:02x}{:02x}, expected 0000080{}); is it an "
        "HTML error page or another format? Re-download or re-run data/prepare.sh",
        path, b[0], b[1], b[2], b[3], want_ndims));
  }
  if (b[2] != 0x08) {
    throw UserError(
        fmt::format("{}: IDX element type 0x{:02x}, expected 0x08 (unsigned byte) for "
                    "MNIST {}",
                    path, b[2], what));
  }
  if (b[3] != want_ndims) {
    throw UserError(
        fmt::format("{}: IDX file has {} dimensions, expected {} for MNIST {} (magic "
                    "0000080{}); are the images and labels files swapped?",
                    path, b[3], want_ndims, what, want_ndims));
  }
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(want_ndims);
  if (b.size() < header) {
    throw UserError(fmt::format("{}: file ends inside the IDX header ({} of {} bytes)", path,
                                b.size(), header));
  }
  std::vector<std::uint32_t> dims;
  for (int i = 0; i < want_ndims; ++i) dims.push_back(be32(&b[4 + 4 * i]));
  return dims;
}

void check_length(const std::vector<std::uint8_t>& b, const std::string& path, std::size_t header,
                  std::uint64_t payload, const char* unit, std::uint64_t count) {
  const std::uint64_t have = b.size() - header;
  if (have < payload) {
    throw UserError(
        fmt::format("{}: truncated: the header declares {} {} ({} bytes of data) but "
                    "only {} bytes follow; re-download or re-run data/prepare.sh",
                    path, count, unit, payload, have));
  }
  if (have > payload) {
    throw UserError(
        fmt::format("{}: unexpected bytes after the {} {} the header declares ({} bytes of "
                    "data); the file is corrupt or not MNIST-format",
                    path, count, unit, payload));
  }
}

}  // namespace

namespace {

// More IDX data than any MNIST-format set needs (EMNIST byclass, the largest, is 0.6 GiB).
constexpr std::uint64_t kMaxIdxPayload = std::uint64_t{8} << 30;

// The most bytes worth reading from an IDX file of `ndims` dims: the header + the product of its
// dims; or only the header when it is not a valid one (magic, element type, dims, 28x28 images,
// the size cap), since the parser then names what is wrong; nullopt while the header is incomplete.
std::optional<std::uint64_t> idx_size_bound(const std::vector<std::uint8_t>& b, int ndims) {
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (ndims <= 0 || b.size() < header) return std::nullopt;
  if (b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] != ndims) return header;
  std::uint64_t payload = 1;
  for (int i = 0; i < ndims; ++i) {
    const std::uint32_t d = be32(&b[4 + 4 * static_cast<std::size_t>(i)]);
    if (ndims == 3 && i > 0 && d != 28) return header;
    payload *= d;  // < 2^32 * 28 * 28: no overflow
  }
  if (payload > kMaxIdxPayload) return header;
  return header + payload;
}

}  // namespace

std::vector<std::uint8_t> read_maybe_gz(const std::string& path, int idx_ndims) {
  // gzopen reads plain files transparently, so one path handles raw and .gz.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw UserError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  std::vector<std::uint8_t> out;
  std::optional<std::uint64_t> limit;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      // zlib prefixes the message with the path; the path is already at the front of ours.
      if (msg.rfind(path + ": ", 0) == 0) msg = msg.substr(path.size() + 2);
      gzclose(f);
      throw UserError(
          fmt::format("{}: cannot decompress: {} (corrupt gzip stream); "
                      "re-download or re-run data/prepare.sh",
                      path, errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
    // Never more than the header declares (+1 byte, for the "unexpected bytes" error), and only
    // the header of an invalid one: a gzip bomb or a wrong file cannot allocate without bound.
    if (!limit) limit = idx_size_bound(out, idx_ndims);
    if (limit && out.size() > *limit) {
      out.resize(static_cast<std::size_t>(*limit) + 1);
      gzclose(f);  // mid-stream on purpose: its status says nothing about the file
      return out;
    }
  }
  // A gzip stream cut short reads as EOF; gzclose_r then reports Z_BUF_ERROR.
  const int rc = gzclose(f);
  if (rc == Z_BUF_ERROR) {
    throw UserError(
        fmt::format("{}: gzip stream ends early (truncated download?); re-download "
                    "or re-run data/prepare.sh",
                    path));
  }
  if (rc != Z_OK) {
    throw UserError(fmt::format("{}: error closing the gzip stream (code {})", path, rc));
  }
  return out;
}

IdxImages parse_idx_images(const std::vector<std::uint8_t>& b, const std::string& path) {
  const auto dims = parse_header(b, path, 3, "images");
  if (dims[1] != 28 || dims[2] != 28) {
    throw UserError(
        fmt::format("{}: images are {}x{}, expected 28x28 (MNIST format)", path, dims[1], dims[2]));
  }
  if (dims[0] == 0 || dims[0] > 0x7fffffffu) {
    throw UserError(fmt::format("{}: the header declares {} images", path, dims[0]));
  }
  const std::uint64_t payload = std::uint64_t{dims[0]} * dims[1] * dims[2];
  if (payload > kMaxIdxPayload) {
    throw UserError(fmt::format(
        "{}: the header declares {} images ({:.1f} GiB), more than the {} GiB this reader "
        "accepts; the file is corrupt or not MNIST-format",
        path, dims[0], static_cast<double>(payload) / (1 << 30), kMaxIdxPayload >> 30));
  }
  check_length(b, path, 16, payload, "images", dims[0]);
  IdxImages img;
  img.count = static_cast<int>(dims[0]);
  img.rows = static_cast<int>(dims[1]);
  img.cols = static_cast<int>(dims[2]);
  img.pixels.assign(b.begin() + 16, b.end());
  return img;
}

IdxLabels parse_idx_labels(const std::vector<std::uint8_t>& b, const std::string& path) {
  const auto dims = parse_header(b, path, 1, "labels");
  if (dims[0] == 0 || dims[0] > 0x7fffffffu) {
    throw UserError(fmt::format("{}: the header declares {} labels", path, dims[0]));
  }
  check_length(b, path, 8, dims[0], "labels", dims[0]);
  IdxLabels lab;
  lab.count = static_cast<int>(dims[0]);
  lab.labels.assign(b.begin() + 8, b.end());
  for (std::size_t i = 0; i < lab.labels.size(); ++i) {
    if (lab.labels[i] > 9) {
      throw UserError(
          fmt::format("{}: label {} at index {} is outside 0..9; the file is corrupt "
                      "or not a 10-class MNIST-format label file",
                      path, lab.labels[i], i));
    }
  }
  return lab;
}

IdxImages read_idx_images(const std::string& path) {
  return parse_idx_images(read_maybe_gz(path, 3), path);
}
IdxLabels read_idx_labels(const std::string& path) {
  return parse_idx_labels(read_maybe_gz(path, 1), path);
}

}  // namespace mnist_ddp
