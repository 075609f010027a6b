// hdf5_io.hpp — the HDF5 calls the checkpoint files are made of: a handle closed at scope exit,
// scalar and string attributes, float32 datasets in one Fletcher32-checked chunk, int64 scalar
// datasets, and the storage checks that run before HDF5 reads a dataset. Every call goes through
// HDF5_CHECK (an Hdf5Error with HDF5's error stack); a dataset that is missing, mis-shaped or
// stored otherwise than these functions store it is a UserError naming it. Private to
// src/checkpoint/.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace mnist_ddp {

// Closes an HDF5 handle at scope exit (files, groups, datasets, dataspaces, property lists).
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t));
  ~H5Handle();
  H5Handle(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle& operator=(H5Handle&&) = delete;
  hid_t get() const { return id_; }
  // Closes now and reports failure (a close can be where buffered data hits a full disk).
  void close_checked();

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// A new group `name` under parent / an existing one (Hdf5Error when it is not there).
H5Handle create_group(hid_t parent, const char* name);
H5Handle open_group(hid_t parent, const char* name);
bool has_link(hid_t parent, const char* name);

// Scalar attributes in little-endian file types; strings fixed-length UTF-8 (an empty one is
// stored as " " and read back as "").
void attr_i64(hid_t obj, const char* name, std::int64_t v);
void attr_u64(hid_t obj, const char* name, std::uint64_t v);
void attr_f64(hid_t obj, const char* name, double v);
void attr_str(hid_t obj, const char* name, const std::string& v);
void attr_i64_array(hid_t obj, const char* name, std::initializer_list<std::int64_t> v);
bool has_attr(hid_t obj, const char* name);
std::int64_t read_i64(hid_t obj, const char* name);
std::uint64_t read_u64(hid_t obj, const char* name);
double read_f64(hid_t obj, const char* name);
std::string read_str(hid_t obj, const char* name);
std::vector<std::int64_t> read_i64_array(hid_t obj, const char* name);  // at most 16 values

// A float32 dataset of the given PyTorch shape, chunked as one chunk so Fletcher32 applies.
void write_f32(hid_t group, const std::string& name, const std::vector<int>& shape,
               const float* data);
// An int64 scalar dataset (PyTorch's 0-d num_batches_tracked). HDF5 cannot filter scalar
// datasets; the file-level payload CRC32 covers it.
void write_i64_scalar(hid_t group, const std::string& name, std::int64_t v);
// Their readers: `where` names the group in errors ("/model"). read_f32 checks the shape (an
// incompatible model) and the Fletcher32 checksum (a corrupt file).
void read_f32(hid_t group, const std::string& name, const std::vector<int>& shape, float* out,
              const std::string& where);
std::int64_t read_i64_scalar(hid_t group, const std::string& name, const std::string& where);

// The file opened read-only, or -1 (HDF5's error stack cleared) when it is not HDF5 or will not
// open. For the quiet questions asked of a file (who wrote it, what it holds).
hid_t open_quietly(const std::string& path);

}  // namespace mnist_ddp
