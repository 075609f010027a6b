// checkpoint.cpp — the checkpoint file format: HDF5 writing (atomic), validated reading, the
// payload and file CRCs. All HDF5 calls go through HDF5_CHECK; failures become UserErrors naming
// the file. The directory (names, retention, resume discovery) is store.cpp; moving a state
// between ranks is broadcast.cpp.
#include "mnist_ddp/checkpoint/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>

#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/runtime/check.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

// Closes an HDF5 handle at scope exit (files, groups, datasets, dataspaces, property lists).
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  // Closes now and reports failure (a close can be where buffered data hits a full disk).
  void close_checked() {
    const hid_t id = id_;
    id_ = -1;
    HDF5_CHECK(close_(id));
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// The HDF5 file type and memory type of each scalar attribute type we store.
template <class T>
struct H5Types;
template <>
struct H5Types<std::int64_t> {
  static hid_t file() { return H5T_STD_I64LE; }
  static hid_t mem() { return H5T_NATIVE_INT64; }
};
template <>
struct H5Types<std::uint64_t> {
  static hid_t file() { return H5T_STD_U64LE; }
  static hid_t mem() { return H5T_NATIVE_UINT64; }
};
template <>
struct H5Types<double> {
  static hid_t file() { return H5T_IEEE_F64LE; }
  static hid_t mem() { return H5T_NATIVE_DOUBLE; }
};

template <class T>
void attr(hid_t obj, const char* name, T v) {
  H5Handle space(HDF5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(
      HDF5_CHECK(H5Acreate2(obj, name, H5Types<T>::file(), space.get(), H5P_DEFAULT, H5P_DEFAULT)),
      H5Aclose);
  HDF5_CHECK(H5Awrite(a.get(), H5Types<T>::mem(), &v));
}
void attr_i64(hid_t obj, const char* name, std::int64_t v) {
  attr(obj, name, v);
}
void attr_u64(hid_t obj, const char* name, std::uint64_t v) {
  attr(obj, name, v);
}
void attr_f64(hid_t obj, const char* name, double v) {
  attr(obj, name, v);
}

void attr_str(hid_t obj, const char* name, const std::string& v) {
  H5Handle type(HDF5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  HDF5_CHECK(H5Tset_size(type.get(), std::max<std::size_t>(1, v.size())));
  HDF5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  H5Handle space(HDF5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle a(HDF5_CHECK(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)),
             H5Aclose);
  HDF5_CHECK(H5Awrite(a.get(), type.get(), v.empty() ? " " : v.c_str()));
}

void attr_i64_array(hid_t obj, const char* name, std::initializer_list<std::int64_t> v) {
  const hsize_t n = v.size();
  H5Handle space(HDF5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
  H5Handle a(
      HDF5_CHECK(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT)),
      H5Aclose);
  HDF5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, std::data(v)));
}

std::vector<std::int64_t> read_i64_array(hid_t obj, const char* name) {
  H5Handle a(HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
  H5Handle space(HDF5_CHECK(H5Aget_space(a.get())), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0 || n > 16) throw Hdf5Error(std::string("attribute ") + name + " has a bad size");
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  HDF5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, v.data()));
  return v;
}

bool has_attr(hid_t obj, const char* name) {
  return H5Aexists(obj, name) > 0;
}

template <class T>
T read_attr(hid_t obj, const char* name) {
  H5Handle a(HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
  T v{};
  HDF5_CHECK(H5Aread(a.get(), H5Types<T>::mem(), &v));
  return v;
}
std::int64_t read_i64(hid_t obj, const char* name) {
  return read_attr<std::int64_t>(obj, name);
}
std::uint64_t read_u64(hid_t obj, const char* name) {
  return read_attr<std::uint64_t>(obj, name);
}
double read_f64(hid_t obj, const char* name) {
  return read_attr<double>(obj, name);
}

std::string read_str(hid_t obj, const char* name) {
  H5Handle a(HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
  H5Handle type(HDF5_CHECK(H5Aget_type(a.get())), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0) {
    throw Hdf5Error(std::string("attribute ") + name + " is not a fixed-length string");
  }
  std::string v(H5Tget_size(type.get()), '\0');
  HDF5_CHECK(H5Aread(a.get(), type.get(), v.data()));
  while (!v.empty() && (v.back() == '\0' || v.back() == ' ')) v.pop_back();
  return v;
}

// /data of a version-2 file (a file without it is damaged), validated.
InputRecord read_input_record(hid_t f) {
  if (H5Lexists(f, "data", H5P_DEFAULT) <= 0) {
    throw UserError("no /data group (the input transform): the file is damaged");
  }
  H5Handle g(HDF5_CHECK(H5Gopen2(f, "data", H5P_DEFAULT)), H5Gclose);
  InputRecord in;
  in.recorded = true;
  in.name = read_str(g.get(), "name");
  in.mean = read_f64(g.get(), "mean");
  in.std = read_f64(g.get(), "std");
  in.labels_crc32 = static_cast<std::uint32_t>(read_u64(g.get(), "labels_crc32"));
  in.train_count = read_i64(g.get(), "train_count");
  in.transform = read_str(g.get(), "transform");
  if (read_i64_array(g.get(), "image_shape") !=
      std::vector<std::int64_t>{1, kImageSide, kImageSide}) {
    throw UserError("/data image_shape is not (1, 28, 28): this model takes 28x28 images");
  }
  if (!(std::isfinite(in.mean) && std::isfinite(in.std) && in.std > 0)) {
    throw UserError(
        fmt::format("/data mean {} / std {} are not a usable normalisation", in.mean, in.std));
  }
  return in;
}

// A float32 dataset of the given PyTorch shape, chunked as one chunk so Fletcher32 applies.
void write_f32(hid_t group, const std::string& name, const std::vector<int>& shape,
               const float* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space(HDF5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)),
                 H5Sclose);
  H5Handle dcpl(HDF5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  HDF5_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(dims.size()), dims.data()));
  HDF5_CHECK(H5Pset_fletcher32(dcpl.get()));
  H5Handle ds(HDF5_CHECK(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                    dcpl.get(), H5P_DEFAULT)),
              H5Dclose);
  HDF5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

// An int64 scalar dataset (PyTorch's 0-d num_batches_tracked). HDF5 cannot filter scalar
// datasets; the file-level payload CRC32 covers it.
void write_i64_scalar(hid_t group, const std::string& name, std::int64_t v) {
  H5Handle space(HDF5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle ds(HDF5_CHECK(H5Dcreate2(group, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT)),
              H5Dclose);
  HDF5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
}

// Defence in depth behind the file CRC: a dataset must be stored the way write_f32 /
// write_i64_scalar store it (float32 in one Fletcher32-checked chunk; int64 contiguous, 8 bytes)
// before HDF5 reads it. HDF5 1.10 reads past its own buffers on other, crafted storage layouts
// (found by tests/fuzz in its hostile-file mode).
void require_storage(hid_t ds, bool f32_chunked, const std::string& where,
                     const std::string& name) {
  H5Handle dcpl(HDF5_CHECK(H5Dget_create_plist(ds)), H5Pclose);
  H5Handle type(HDF5_CHECK(H5Dget_type(ds)), H5Tclose);
  H5Handle space(HDF5_CHECK(H5Dget_space(ds)), H5Sclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  bool ok = false;
  if (f32_chunked) {
    // float32 little-endian, Fletcher32 the only filter, one chunk the shape of the dataset.
    const int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
    std::vector<hsize_t> chunk(dims.size());
    ok = layout == H5D_CHUNKED && rank > 0 && H5Tequal(type.get(), H5T_IEEE_F32LE) > 0 &&
         H5Pget_nfilters(dcpl.get()) == 1 &&
         H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, nullptr, nullptr, nullptr, 0,
                              nullptr, nullptr) >= 0 &&
         H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) == rank &&
         H5Pget_chunk(dcpl.get(), rank, chunk.data()) == rank && chunk == dims;
  } else {
    // One int64 little-endian in 8 contiguous bytes, a scalar dataspace.
    ok = layout == H5D_CONTIGUOUS && H5Tequal(type.get(), H5T_STD_I64LE) > 0 &&
         H5Sget_simple_extent_type(space.get()) == H5S_SCALAR && H5Dget_storage_size(ds) == 8;
  }
  H5Eclear2(H5E_DEFAULT);
  if (!ok) {
    throw UserError(fmt::format(
        "{}/{} is not stored as mnist_ddp writes it ({}): the file is "
        "damaged",
        where, name,
        f32_chunked ? "float32, one Fletcher32-checked chunk" : "one contiguous int64"));
  }
}

void read_f32(hid_t group, const std::string& name, const std::vector<int>& shape, float* out,
              const std::string& where) {
  if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) {
    throw UserError(
        fmt::format("missing dataset {}/{} (not a checkpoint of this model)", where, name));
  }
  H5Handle ds(HDF5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT)), H5Dclose);
  require_storage(ds.get(), true, where, name);
  H5Handle space(HDF5_CHECK(H5Dget_space(ds.get())), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  const std::vector<hsize_t> want(shape.begin(), shape.end());
  if (dims != want) {
    auto str = [](const auto& v) {
      std::string s = "(";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + ")";
    };
    throw UserError(
        fmt::format("{}/{} has shape {}, this model needs {}: the checkpoint is from an "
                    "incompatible model",
                    where, name, str(dims), str(want)));
  }
  if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    throw UserError(fmt::format("{}/{} cannot be read ({}): the file is corrupt (checksum)", where,
                                name, hdf5_error_text()));
  }
}

std::int64_t read_i64_scalar(hid_t group, const std::string& name, const std::string& where) {
  if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) {
    throw UserError(fmt::format("missing dataset {}/{}", where, name));
  }
  H5Handle ds(HDF5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT)), H5Dclose);
  require_storage(ds.get(), false, where, name);
  std::int64_t v = 0;
  HDF5_CHECK(H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
  return v;
}

// /model: every parameter and BN statistic in the layout's shapes (arenas already sized), and the
// num_batches_tracked counters, as full and weights-only files both hold them.
void read_model_group(hid_t f, const CheckpointLayout& layout, std::vector<float>& params,
                      std::vector<float>& buffers, std::vector<std::int64_t>& tracked) {
  H5Handle g(HDF5_CHECK(H5Gopen2(f, "model", H5P_DEFAULT)), H5Gclose);
  for (const auto& e : layout.params)
    read_f32(g.get(), e.name, e.shape, params.data() + e.offset, "/model");
  for (const auto& e : layout.buffers)
    read_f32(g.get(), e.name, e.shape, buffers.data() + e.offset, "/model");
  for (const auto& k : layout.num_batches_tracked)
    tracked.push_back(read_i64_scalar(g.get(), k, "/model"));
}

// CRC32 over every array and scalar of the payload, in schema order.
std::uint32_t payload_crc(const TrainingState& s) {
  uLong c = crc32(0L, Z_NULL, 0);
  auto add = [&c](const void* p, std::size_t n) {
    c = crc32(c, static_cast<const Bytef*>(p), static_cast<uInt>(n));
  };
  add(s.params.data(), s.params.size() * sizeof(float));
  add(s.buffers.data(), s.buffers.size() * sizeof(float));
  add(s.num_batches_tracked.data(), s.num_batches_tracked.size() * sizeof(std::int64_t));
  add(s.momentum.data(), s.momentum.size() * sizeof(float));
  const std::int64_t scalars[] = {s.step, s.epoch, s.sample_offset, s.world_size,
                                  s.optimizer_steps};
  add(scalars, sizeof scalars);
  for (const auto& arrays : s.rank_arrays) {
    for (const auto& [name, data] : arrays) {
      add(name.data(), name.size());
      add(data.data(), data.size() * sizeof(float));
    }
  }
  if (!s.rank_arrays.empty()) {
    const std::int64_t hook[] = {s.hook_iter, s.hook_rng};
    add(hook, sizeof hook);
  }
  if (s.loss_scale > 0) {
    add(&s.loss_scale, sizeof s.loss_scale);
    add(&s.loss_scale_growth_tracker, sizeof s.loss_scale_growth_tracker);
  }
  if (s.format_version >= 2) {
    // Version 2 covers every value the loader reads (a changed byte anywhere either fails a
    // check or this sum): seed, configuration, versions, optimizer settings, hook and scaler
    // state, each string with its length.
    const auto add_str = [&add](const std::string& v) {
      const std::uint64_t n = v.size();
      add(&n, sizeof n);
      add(v.data(), v.size());
    };
    add(&s.seed, sizeof s.seed);
    add_str(s.config_json);
    add_str(s.program_version);
    add_str(s.lr_schedule);
    const double opt[] = {s.base_lr,   s.last_lr,      s.momentum_factor,
                          s.dampening, s.weight_decay, s.loss_scale};
    add(opt, sizeof opt);
    const std::int64_t ints[] = {s.nesterov ? 1 : 0, s.hook_iter, s.hook_rng,
                                 static_cast<std::int64_t>(s.rank_arrays.size()),
                                 s.loss_scale_growth_tracker};
    add(ints, sizeof ints);
  }
  if (s.input.recorded) {
    const double stats[] = {s.input.mean, s.input.std};
    add(stats, sizeof stats);
    const std::int64_t ints[] = {static_cast<std::int64_t>(s.input.labels_crc32),
                                 s.input.train_count, 1, kImageSide, kImageSide};
    add(ints, sizeof ints);
    add(s.input.name.data(), s.input.name.size());
    add(s.input.transform.data(), s.input.transform.size());
  }
  return static_cast<std::uint32_t>(c);
}

}  // namespace

std::uint32_t payload_crc32(const TrainingState& state) {
  return payload_crc(state);
}

std::string first_non_finite(const TrainingState& s, const CheckpointLayout& layout) {
  const auto scan = [](const std::vector<float>& arena, const std::vector<ArenaEntry>& entries,
                       const std::string& group) -> std::string {
    for (const auto& e : entries) {
      if (e.offset + e.numel > arena.size()) continue;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < e.numel; ++i) bad += std::isfinite(arena[e.offset + i]) ? 0 : 1;
      if (bad > 0) {
        return fmt::format("{}/{} ({} of {} values non-finite)", group, e.name, bad, e.numel);
      }
    }
    return "";
  };
  for (const auto& found :
       {scan(s.params, layout.params, "/model"), scan(s.buffers, layout.buffers, "/model"),
        scan(s.momentum, layout.params, "/optimizer/momentum_buffer")}) {
    if (!found.empty()) return found;
  }
  return "";
}

namespace {

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The file's first 512 bytes are an HDF5 user block (HDF5, h5py and h5dump skip it) holding one
// line: "mnist_ddp-file-crc32 XXXXXXXX size N" — the CRC32 of every byte after the block. A load
// checks it before HDF5 parses anything, so a damaged file never reaches HDF5's own parser (which
// in Debian's HDF5 1.10 reads out of bounds on some corrupt metadata).
constexpr std::size_t kUserBlock = 512;
constexpr const char* kFileCrcTag = "mnist_ddp-file-crc32 ";

std::uint32_t crc_of_file_after(const std::string& path, std::size_t from, std::uint64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot be read: {}", path, std::strerror(errno)));
  in.seekg(static_cast<std::streamoff>(from));
  uLong c = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 16);
  std::uint64_t n = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    c = crc32(c, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    n += got;
  }
  *size = n;
  return static_cast<std::uint32_t>(c);
}

void stamp_file_crc(const std::string& path) {
  std::uint64_t size = 0;
  const std::uint32_t crc = crc_of_file_after(path, kUserBlock, &size);
  std::string line = fmt::format("{}{:08x} size {}\n", kFileCrcTag, crc, size);
  line.resize(kUserBlock, '\0');
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.write(line.data(), static_cast<std::streamsize>(line.size()));
  f.flush();
  if (!f) throw UserError(fmt::format("{}: writing its file CRC failed", path));
}

// Checks the user block's file CRC line before HDF5 parses a byte of the file. A file without
// one is refused too: HDF5 would otherwise parse unverified bytes (HDF5 1.10 reads out of bounds
// and leaks on damaged metadata). UserError when anything does not match.
void verify_file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot be read: {}", std::strerror(errno)));
  std::string head(kUserBlock, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (in.gcount() != static_cast<std::streamsize>(kUserBlock)) {
    throw UserError(
        fmt::format("the file is {} bytes, shorter than a checkpoint's {}-byte header: "
                    "truncated or not a checkpoint",
                    std::max<std::streamsize>(in.gcount(), 0), kUserBlock));
  }
  if (head.rfind(kFileCrcTag, 0) != 0) {
    throw UserError(
        "no file CRC line at its start (every checkpoint and weights file mnist_ddp writes "
        "begins with one): damaged, not written by mnist_ddp, or written before the line existed; "
        "unverified bytes are not handed to HDF5. For a file you trust: "
        "tools/stamp_file_crc.py FILE");
  }
  unsigned crc = 0;
  unsigned long long size = 0;
  if (std::sscanf(head.c_str() + std::strlen(kFileCrcTag), "%8x size %llu", &crc, &size) != 2) {
    throw UserError("its file CRC line is damaged: the file is corrupt");
  }
  std::uint64_t actual_size = 0;
  const std::uint32_t actual = crc_of_file_after(path, kUserBlock, &actual_size);
  if (actual_size != size) {
    throw UserError(
        fmt::format("{} bytes after the header where {} were written: truncated or "
                    "damaged",
                    actual_size, size));
  }
  if (actual != crc) throw UserError("file CRC32 mismatch: the file is corrupt");
}

void write_file(const std::string& tmp, const TrainingState& s, const CheckpointLayout& layout) {
  H5Handle fcpl(HDF5_CHECK(H5Pcreate(H5P_FILE_CREATE)), H5Pclose);
  HDF5_CHECK(H5Pset_userblock(fcpl.get(), kUserBlock));
  H5Handle file(HDF5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT)),
                H5Fclose);
  const hid_t f = file.get();
  attr_str(f, "format", kCheckpointFormat);
  attr_i64(f, "format_version", kCheckpointVersion);
  attr_str(f, "model", kCheckpointModel);
  attr_i64(f, "step", s.step);
  attr_i64(f, "epoch", s.epoch);
  attr_i64(f, "sample_offset", s.sample_offset);
  attr_i64(f, "world_size", s.world_size);
  attr_u64(f, "seed", s.seed);
  attr_str(f, "program_version", s.program_version);
  attr_str(f, "config", s.config_json);
  attr_str(f, "created", iso_now());
  if (!s.run_id.empty()) attr_str(f, "run_id", s.run_id);
  {
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    for (const auto& e : layout.params)
      write_f32(g.get(), e.name, e.shape, s.params.data() + e.offset);
    for (const auto& e : layout.buffers)
      write_f32(g.get(), e.name, e.shape, s.buffers.data() + e.offset);
    for (std::size_t i = 0; i < layout.num_batches_tracked.size(); ++i)
      write_i64_scalar(g.get(), layout.num_batches_tracked[i], s.num_batches_tracked[i]);
  }
  {
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
               H5Gclose);
    attr_i64(g.get(), "step_count", s.optimizer_steps);
    attr_str(g.get(), "lr_schedule", s.lr_schedule);
    attr_f64(g.get(), "base_lr", s.base_lr);
    attr_f64(g.get(), "last_lr", s.last_lr);
    attr_f64(g.get(), "momentum", s.momentum_factor);
    attr_f64(g.get(), "dampening", s.dampening);
    attr_f64(g.get(), "weight_decay", s.weight_decay);
    attr_i64(g.get(), "nesterov", s.nesterov ? 1 : 0);
    H5Handle m(
        HDF5_CHECK(H5Gcreate2(g.get(), "momentum_buffer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
        H5Gclose);
    for (const auto& e : layout.params)
      write_f32(m.get(), e.name, e.shape, s.momentum.data() + e.offset);
  }
  {
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "rng", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    attr_u64(g.get(), "init_seed", s.seed);
    attr_u64(g.get(), "sampler_seed", s.seed);
    attr_i64(g.get(), "sampler_epoch", s.epoch);
  }
  {
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "rank", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    attr_i64(g.get(), "hook_iter", s.hook_iter);
    attr_i64(g.get(), "hook_rng", s.hook_rng);
    for (std::int64_t r = 0; r < s.world_size; ++r) {
      H5Handle rg(HDF5_CHECK(H5Gcreate2(g.get(), std::to_string(r).c_str(), H5P_DEFAULT,
                                        H5P_DEFAULT, H5P_DEFAULT)),
                  H5Gclose);
      if (static_cast<std::size_t>(r) >= s.rank_arrays.size()) continue;
      for (const auto& [name, data] : s.rank_arrays[static_cast<std::size_t>(r)])
        write_f32(rg.get(), name, {static_cast<int>(data.size())}, data.data());
    }
  }
  {
    // Always (version 2): loss_scale 0 says "trained without --amp fp16", so a missing group is
    // damage, never a silent default.
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "amp", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    attr_f64(g.get(), "loss_scale", s.loss_scale);
    attr_i64(g.get(), "growth_tracker", s.loss_scale_growth_tracker);
  }
  MNIST_DDP_CHECK(s.input.recorded, "a checkpoint records its input (/data)");
  {
    H5Handle g(HDF5_CHECK(H5Gcreate2(f, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
    attr_str(g.get(), "name", s.input.name);
    attr_f64(g.get(), "mean", s.input.mean);
    attr_f64(g.get(), "std", s.input.std);
    attr_u64(g.get(), "labels_crc32", s.input.labels_crc32);
    attr_i64(g.get(), "train_count", s.input.train_count);
    attr_i64_array(g.get(), "image_shape", {1, kImageSide, kImageSide});
    attr_str(g.get(), "transform", s.input.transform);
  }
  attr_u64(f, "payload_crc32", payload_crc(s));
  HDF5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));
  // Last: the completeness marker. A reader that does not find it rejects the file.
  attr_i64(f, "complete", 1);
  file.close_checked();
}

// A failed write leaves nothing behind but the earlier, complete checkpoints.
[[noreturn]] void discard_and_throw(const std::string& tmp, const std::string& final_path,
                                    const std::string& dir, const std::string& why) {
  std::error_code ec;
  fs::remove(tmp, ec);
  throw UserError(
      fmt::format("checkpoint {} not written: {}. Existing checkpoints in {} are "
                  "untouched; free space or pass another --checkpoint-dir",
                  final_path, why, dir));
}

}  // namespace

CheckpointLayout checkpoint_layout(const ConvNet& model) {
  CheckpointLayout l;
  l.params = model.param_entries();
  l.buffers = model.buffer_entries();
  l.num_batches_tracked = {"layer1.1.num_batches_tracked", "layer2.1.num_batches_tracked"};
  return l;
}

std::string save_checkpoint(const std::string& dir, const TrainingState& s,
                            const CheckpointLayout& layout) {
  const std::string final_path = dir + "/" + checkpoint_name(s.step);
  // A diverged model is never written: --keep would rotate the good checkpoints away.
  if (const std::string bad = first_non_finite(s, layout); !bad.empty()) {
    throw UserError(fmt::format("refusing to write {}: {} holds NaN or infinity: the model has "
                                "diverged; nothing was written",
                                final_path, bad),
                    kExitTrainingDiverged);
  }
  const std::string tmp =
      dir + "/." + checkpoint_name(s.step) + ".tmp-" + std::to_string(::getpid());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  try {
    write_file(tmp, s, layout);
    stamp_file_crc(tmp);  // after HDF5 has closed the file: its final bytes
    // Test seam: MNIST_DDP_TEST_FAIL_CHECKPOINT=enospc makes the write fail as a full disk would
    // when no small filesystem can be mounted for the test.
    if (const char* f = std::getenv("MNIST_DDP_TEST_FAIL_CHECKPOINT"); f != nullptr) {
      if (std::string(f) != "enospc") {
        throw UserError(
            fmt::format("MNIST_DDP_TEST_FAIL_CHECKPOINT={}: this test seam only "
                        "understands 'enospc'; unset it for normal runs",
                        f));
      }
      throw UserError(fmt::format("{}: write failed: {} (injected)", tmp, std::strerror(ENOSPC)));
    }
    fsync_path(tmp, false);
  } catch (const std::exception& e) {  // Hdf5Error (full disk, I/O) or UserError (fsync, seam)
    discard_and_throw(tmp, final_path, dir, e.what());
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    discard_and_throw(tmp, final_path, dir,
                      std::string("rename to the final name failed: ") + std::strerror(errno));
  }
  // The rename itself must reach the disk, or a crash could lose the new name.
  fsync_path(dir, true);
  return final_path;
}

namespace {
// The file opened read-only, or -1 (HDF5's error stack cleared) when it is not HDF5 or will not
// open. For the quiet questions asked of a file (who wrote it, what it holds).
hid_t open_quietly(const std::string& path) {
  const hid_t fid = H5Fis_hdf5(path.c_str()) > 0
                        ? H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)
                        : static_cast<hid_t>(-1);
  if (fid < 0) H5Eclear2(H5E_DEFAULT);
  return fid;
}
}  // namespace

CheckpointOwner checkpoint_owner(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  CheckpointOwner o;
  try {
    verify_file_crc(path);  // before HDF5 parses a byte of it
    const hid_t fid = open_quietly(path);
    if (fid < 0) return o;
    H5Handle file(fid, H5Fclose);
    if (!has_attr(file.get(), "format") || read_str(file.get(), "format") != kCheckpointFormat)
      return o;
    o.run_id = has_attr(file.get(), "run_id") ? read_str(file.get(), "run_id") : "";
    o.readable = true;
  } catch (const UserError&) {
  } catch (const Hdf5Error&) {
  }
  return o;
}

std::string checkpoint_run_id(const std::string& path) {
  return checkpoint_owner(path).run_id;
}

void refresh_file_crc(const std::string& path) {
  stamp_file_crc(path);
}

namespace {

// /optimizer: SGD's settings and step count, and a momentum buffer per parameter.
void read_optimizer_group(hid_t f, const CheckpointLayout& layout, TrainingState& s) {
  H5Handle g(HDF5_CHECK(H5Gopen2(f, "optimizer", H5P_DEFAULT)), H5Gclose);
  s.optimizer_steps = read_i64(g.get(), "step_count");
  s.lr_schedule = read_str(g.get(), "lr_schedule");
  s.base_lr = read_f64(g.get(), "base_lr");
  s.last_lr = read_f64(g.get(), "last_lr");
  s.momentum_factor = read_f64(g.get(), "momentum");
  s.dampening = read_f64(g.get(), "dampening");
  s.weight_decay = read_f64(g.get(), "weight_decay");
  s.nesterov = read_i64(g.get(), "nesterov") != 0;
  H5Handle m(HDF5_CHECK(H5Gopen2(g.get(), "momentum_buffer", H5P_DEFAULT)), H5Gclose);
  for (const auto& e : layout.params)
    read_f32(m.get(), e.name, e.shape, s.momentum.data() + e.offset, "/optimizer/momentum_buffer");
}

// /rank: the communication hook's counters, and each rank's own arrays (PowerSGD's error
// feedback and Q) under /rank/<r>; strict (version 2): every rank's group must be there.
void read_rank_group(hid_t f, bool strict, TrainingState& s) {
  H5Handle g(HDF5_CHECK(H5Gopen2(f, "rank", H5P_DEFAULT)), H5Gclose);
  if (strict || has_attr(g.get(), "hook_iter")) {
    s.hook_iter = read_i64(g.get(), "hook_iter");
    s.hook_rng = read_i64(g.get(), "hook_rng");
  }
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> ranks;
  bool any = false;
  for (std::int64_t r = 0; r < s.world_size; ++r) {
    ranks.emplace_back();
    const std::string rn = std::to_string(r);
    if (H5Lexists(g.get(), rn.c_str(), H5P_DEFAULT) <= 0) {
      if (strict) throw UserError(fmt::format("/rank/{} is missing: the file is damaged", rn));
      continue;
    }
    H5Handle rg(HDF5_CHECK(H5Gopen2(g.get(), rn.c_str(), H5P_DEFAULT)), H5Gclose);
    H5G_info_t info{};
    HDF5_CHECK(H5Gget_info(rg.get(), &info));
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char name[256] = {0};
      HDF5_CHECK(H5Lget_name_by_idx(rg.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                                    H5P_DEFAULT));
      H5Handle ds(HDF5_CHECK(H5Dopen2(rg.get(), name, H5P_DEFAULT)), H5Dclose);
      H5Handle space(HDF5_CHECK(H5Dget_space(ds.get())), H5Sclose);
      const hssize_t n = H5Sget_simple_extent_npoints(space.get());
      std::vector<float> data(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
      read_f32(rg.get(), name, {static_cast<int>(data.size())}, data.data(), "/rank/" + rn);
      ranks.back().emplace_back(name, std::move(data));
      any = true;
    }
  }
  if (any) s.rank_arrays = std::move(ranks);
}

}  // namespace

TrainingState load_checkpoint(const std::string& path, const CheckpointLayout& layout) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  try {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      throw UserError("no such file; pass an existing checkpoint to --resume, or --resume auto");
    }
    verify_file_crc(path);  // before HDF5 parses a byte of it
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw UserError("not an HDF5 file (truncated, or not a checkpoint)");
    }
    const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid < 0)
      throw UserError("cannot open as HDF5 (" + hdf5_error_text() + "): truncated or corrupt");
    H5Handle file(fid, H5Fclose);
    const hid_t f = file.get();
    if (!has_attr(f, "format") || read_str(f, "format") != kCheckpointFormat) {
      throw UserError(
          fmt::format("not an mnist_ddp checkpoint (no format attribute '{}')", kCheckpointFormat));
    }
    const std::int64_t version = read_i64(f, "format_version");
    if (version < kCheckpointOldestVersion || version > kCheckpointVersion) {
      throw UserError(
          fmt::format("checkpoint format version {}, this mnist_ddp reads versions {} to {}; "
                      "use the mnist_ddp that wrote it",
                      version, kCheckpointOldestVersion, kCheckpointVersion));
    }
    const std::string model = read_str(f, "model");
    if (model != kCheckpointModel) {
      throw UserError(fmt::format("checkpoint of model '{}', this program trains '{}'", model,
                                  kCheckpointModel));
    }
    if (!has_attr(f, "complete") || read_i64(f, "complete") != 1) {
      throw UserError("incomplete: the writer stopped before finishing this file");
    }
    if (has_attr(f, "contents") && read_str(f, "contents") == "weights") {
      throw UserError(
          "holds a model's weights only (no optimizer, no position; e.g. from "
          "tools/import_from_pytorch.py): train from it with --init-weights PATH, or evaluate it "
          "with --eval-only --resume PATH");
    }
    TrainingState s;
    s.step = read_i64(f, "step");
    s.epoch = read_i64(f, "epoch");
    s.sample_offset = read_i64(f, "sample_offset");
    s.world_size = read_i64(f, "world_size");
    s.seed = read_u64(f, "seed");
    s.program_version = read_str(f, "program_version");
    s.config_json = read_str(f, "config");
    if (has_attr(f, "run_id")) s.run_id = read_str(f, "run_id");
    const std::size_t np = layout.params.back().offset + layout.params.back().numel;
    const std::size_t nb = layout.buffers.back().offset + layout.buffers.back().numel;
    s.params.resize(np);
    s.buffers.resize(nb);
    s.momentum.resize(np);
    read_model_group(f, layout, s.params, s.buffers, s.num_batches_tracked);
    read_optimizer_group(f, layout, s);
    // Version 2 requires every member it expects (a renamed or lost one is damage, not a
    // default); version 1 files had optional ones.
    const bool strict = version >= 2;
    if (strict || H5Lexists(f, "rank", H5P_DEFAULT) > 0) read_rank_group(f, strict, s);
    if (strict || H5Lexists(f, "amp", H5P_DEFAULT) > 0) {
      H5Handle g(HDF5_CHECK(H5Gopen2(f, "amp", H5P_DEFAULT)), H5Gclose);
      s.loss_scale = read_f64(g.get(), "loss_scale");
      s.loss_scale_growth_tracker = read_i64(g.get(), "growth_tracker");
      // 0: trained without a scaler (version 2 always writes the group).
      if (!(std::isfinite(s.loss_scale) && (s.loss_scale > 0 || (strict && s.loss_scale == 0)))) {
        throw UserError(
            fmt::format("/amp loss_scale {} is not a positive finite number", s.loss_scale));
      }
    }
    s.format_version = version;
    if (version >= 2) {
      s.input = read_input_record(f);  // required from version 2 on
    }
    if (read_u64(f, "payload_crc32") != payload_crc(s)) {
      throw UserError("payload CRC32 mismatch: the file is corrupt");
    }
    if (const std::string bad = first_non_finite(s, layout); !bad.empty()) {
      throw UserError(bad + " holds NaN or infinity: a diverged model, not resumable");
    }
    return s;
  } catch (const Hdf5Error& e) {
    throw UserError(fmt::format("checkpoint {}: unreadable: {}", path, e.what()));
  } catch (const UserError& e) {
    throw UserError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

namespace {

// weights_crc32 of a weights-only file: every /model dataset's name and bytes, in name order,
// then the /data record (what tools/import_from_pytorch.py computes with zlib.crc32).
std::uint32_t weights_crc(const ModelWeights& w, const CheckpointLayout& layout) {
  std::vector<std::pair<std::string, std::pair<const void*, std::size_t>>> items;
  for (const auto& e : layout.params)
    items.push_back({e.name, {w.params.data() + e.offset, e.numel * sizeof(float)}});
  for (const auto& e : layout.buffers)
    items.push_back({e.name, {w.buffers.data() + e.offset, e.numel * sizeof(float)}});
  for (std::size_t i = 0; i < layout.num_batches_tracked.size(); ++i)
    items.push_back(
        {layout.num_batches_tracked[i], {w.num_batches_tracked.data() + i, sizeof(std::int64_t)}});
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  uLong c = crc32(0L, Z_NULL, 0);
  auto add = [&c](const void* p, std::size_t n) {
    c = crc32(c, static_cast<const Bytef*>(p), static_cast<uInt>(n));
  };
  for (const auto& [name, bytes] : items) {
    add(name.data(), name.size());
    add(bytes.first, bytes.second);
  }
  const double stats[] = {w.input.mean, w.input.std};
  add(stats, sizeof stats);
  const std::int64_t ints[] = {static_cast<std::int64_t>(w.input.labels_crc32),
                               w.input.train_count};
  add(ints, sizeof ints);
  add(w.input.name.data(), w.input.name.size());
  add(w.input.transform.data(), w.input.transform.size());
  return static_cast<std::uint32_t>(c);
}

bool is_weights_only(const std::string& path) {
  const hid_t fid = open_quietly(path);
  if (fid < 0) return false;
  H5Handle file(fid, H5Fclose);
  try {
    return has_attr(fid, "contents") && read_str(fid, "contents") == "weights";
  } catch (const Hdf5Error&) {
    return false;
  }
}

}  // namespace

ModelWeights load_model_weights(const std::string& path, const CheckpointLayout& layout) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw UserError(
        fmt::format("weights {}: no such file; pass an existing checkpoint (full or "
                    "weights-only) to --init-weights or --eval-only --resume",
                    path));
  }
  {
    try {
      verify_file_crc(path);  // before HDF5 parses a byte of it
    } catch (const UserError& e) {
      throw UserError(fmt::format("weights {}: {}", path, e.what()));
    }
  }
  if (!is_weights_only(path)) {
    // A full checkpoint: everything load_checkpoint validates.
    TrainingState s = load_checkpoint(path, layout);
    ModelWeights w;
    w.params = std::move(s.params);
    w.buffers = std::move(s.buffers);
    w.num_batches_tracked = std::move(s.num_batches_tracked);
    w.input = s.input;
    w.step = s.step;
    return w;
  }
  try {
    H5Handle file(HDF5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose);
    const hid_t f = file.get();
    if (!has_attr(f, "format") || read_str(f, "format") != kCheckpointFormat) {
      throw UserError(
          fmt::format("not an mnist_ddp checkpoint (no format attribute '{}')", kCheckpointFormat));
    }
    if (read_i64(f, "format_version") != kCheckpointVersion) {
      throw UserError(fmt::format("weights-only file of format version {}, this mnist_ddp reads {}",
                                  read_i64(f, "format_version"), kCheckpointVersion));
    }
    if (read_str(f, "model") != kCheckpointModel) {
      throw UserError(fmt::format("weights of model '{}', this program trains '{}'",
                                  read_str(f, "model"), kCheckpointModel));
    }
    if (!has_attr(f, "complete") || read_i64(f, "complete") != 1) {
      throw UserError("incomplete: the writer stopped before finishing this file");
    }
    ModelWeights w;
    w.weights_only = true;
    w.params.resize(layout.params.back().offset + layout.params.back().numel);
    w.buffers.resize(layout.buffers.back().offset + layout.buffers.back().numel);
    read_model_group(f, layout, w.params, w.buffers, w.num_batches_tracked);
    w.input = read_input_record(f);
    if (read_u64(f, "weights_crc32") != weights_crc(w, layout)) {
      throw UserError("weights CRC32 mismatch: the file is corrupt");
    }
    TrainingState as_state;  // the same refusal of non-finite values as a full checkpoint's
    as_state.params = w.params;
    as_state.buffers = w.buffers;
    if (const std::string bad = first_non_finite(as_state, layout); !bad.empty()) {
      throw UserError(bad + " holds NaN or infinity: not a usable model");
    }
    return w;
  } catch (const Hdf5Error& e) {
    throw UserError(fmt::format("weights {}: unreadable: {}", path, e.what()));
  } catch (const UserError& e) {
    throw UserError(fmt::format("weights {}: {}", path, e.what()));
  }
}

}  // namespace mnist_ddp
