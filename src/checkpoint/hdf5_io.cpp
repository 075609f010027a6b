// hdf5_io.cpp — the HDF5 building blocks of the checkpoint files (hdf5_io.hpp).
#include "hdf5_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {

H5Handle::H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}

H5Handle::~H5Handle() {
  if (id_ >= 0) close_(id_);
}

H5Handle::H5Handle(H5Handle&& other) noexcept : id_(other.id_), close_(other.close_) {
  other.id_ = -1;
}

void H5Handle::close_checked() {
  const hid_t id = id_;
  id_ = -1;
  HDF5_CHECK(close_(id));
}

H5Handle create_group(hid_t parent, const char* name) {
  return H5Handle(HDF5_CHECK(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
                  H5Gclose);
}

H5Handle open_group(hid_t parent, const char* name) {
  return H5Handle(HDF5_CHECK(H5Gopen2(parent, name, H5P_DEFAULT)), H5Gclose);
}

bool has_link(hid_t parent, const char* name) {
  return H5Lexists(parent, name, H5P_DEFAULT) > 0;
}

namespace {

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

template <class T>
T read_attr(hid_t obj, const char* name) {
  H5Handle a(HDF5_CHECK(H5Aopen(obj, name, H5P_DEFAULT)), H5Aclose);
  T v{};
  HDF5_CHECK(H5Aread(a.get(), H5Types<T>::mem(), &v));
  return v;
}

}  // namespace

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

void write_i64_scalar(hid_t group, const std::string& name, std::int64_t v) {
  H5Handle space(HDF5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  H5Handle ds(HDF5_CHECK(H5Dcreate2(group, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT)),
              H5Dclose);
  HDF5_CHECK(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
}

namespace {

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

}  // namespace

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

hid_t open_quietly(const std::string& path) {
  const hid_t fid = H5Fis_hdf5(path.c_str()) > 0
                        ? H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)
                        : static_cast<hid_t>(-1);
  if (fid < 0) H5Eclear2(H5E_DEFAULT);
  return fid;
}

}  // namespace mnist_ddp
