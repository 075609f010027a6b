// powersgd.cpp — PowerSGD compression (powersgd.hpp).
#include "mnist_ddp/comm/powersgd.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mnist_ddp/comm/compress.hpp"
#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// Row-major products through BLAS (OpenBLAS, as the CPU backend).
// c[n][k] = a[n][m] b[m][k]
void matmul(const float* a, const float* b, float* c, std::size_t n, std::size_t m, std::size_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(k),
              static_cast<int>(m), 1.f, a, static_cast<int>(m), b, static_cast<int>(k), 0.f, c,
              static_cast<int>(k));
}
// c[m][k] = a[n][m]^T b[n][k]
void matmul_tn(const float* a, const float* b, float* c, std::size_t n, std::size_t m,
               std::size_t k) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(k),
              static_cast<int>(n), 1.f, a, static_cast<int>(m), b, static_cast<int>(k), 0.f, c,
              static_cast<int>(k));
}
// c[n][m] = a[n][k] b[m][k]^T
void matmul_nt(const float* a, const float* b, float* c, std::size_t n, std::size_t m,
               std::size_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(m),
              static_cast<int>(k), 1.f, a, static_cast<int>(k), b, static_cast<int>(k), 0.f, c,
              static_cast<int>(m));
}

std::size_t approx_rank(const BucketTensor& t, int rank) {
  return std::min({static_cast<std::size_t>(rank), t.rows, t.cols});
}

}  // namespace

void orthogonalize(float* m, std::size_t rows, std::size_t cols) {
  for (std::size_t i = 0; i < cols; ++i) {
    double norm = 0;
    for (std::size_t r = 0; r < rows; ++r)
      norm += static_cast<double>(m[r * cols + i]) * m[r * cols + i];
    const float n = static_cast<float>(std::sqrt(norm));
    if (n > 0.f)
      for (std::size_t r = 0; r < rows; ++r) m[r * cols + i] /= n;
    for (std::size_t j = i + 1; j < cols; ++j) {
      float dot = 0.f;
      for (std::size_t r = 0; r < rows; ++r) dot += m[r * cols + i] * m[r * cols + j];
      for (std::size_t r = 0; r < rows; ++r) m[r * cols + j] -= dot * m[r * cols + i];
    }
  }
}

bool should_compress(std::size_t rows, std::size_t cols, int rank, double min_compression_rate) {
  const double r = static_cast<double>(std::min({static_cast<std::size_t>(rank), rows, cols}));
  return static_cast<double>(rows * cols) >=
         static_cast<double>(rows + cols) * r * min_compression_rate;
}

std::size_t square_side(std::size_t numel) {
  auto s = static_cast<std::size_t>(std::sqrt(static_cast<double>(numel)));
  while (s * s < numel) ++s;
  while (s > 0 && (s - 1) * (s - 1) >= numel) --s;
  return s;
}

PowerSgd::PowerSgd(Comm& comm, const PowerSgdConfig& cfg,
                   std::vector<std::vector<BucketTensor>> buckets, std::vector<std::size_t> sizes)
    : comm_(comm),
      cfg_(cfg),
      buckets_(std::move(buckets)),
      sizes_(std::move(sizes)),
      rng_(cfg.seed),
      error_(sizes_.size()),
      q_(sizes_.size()) {
  MNIST_DDP_CHECK(cfg.rank >= 1, "PowerSGD rank >= 1");
  MNIST_DDP_CHECK(buckets_.size() == sizes_.size(), "one tensor list per bucket");
}

void PowerSgd::allreduce_sum(std::span<float> data) {
  if (cfg_.fp16) {
    wire16_.resize(data.size());
    encode16(data, wire16_, Compression::Fp16);
    // Collective: the 16-bit sum (user-defined MPI reduction over fp16).
    comm_.wait(comm_.start_allreduce_sum(std::span<std::uint16_t>(wire16_), DType::F16));
    decode16(wire16_, data, Compression::Fp16);
    last_payload_bytes_ += data.size() * sizeof(std::uint16_t);
  } else {
    // Collective: float32 sum.
    comm_.allreduce(data, ReduceOp::Sum);
    last_payload_bytes_ += data.size_bytes();
  }
}

void PowerSgd::new_q(std::span<float> q, std::size_t rows, std::size_t cols) {
  // The generator is seeded alike and advanced alike on every rank: the same Q everywhere.
  for (float& x : q) x = static_cast<float>(rng_.normal());
  orthogonalize(q.data(), rows, cols);
}

void PowerSgd::reduce(std::size_t b, std::span<float> grads) {
  MNIST_DDP_CHECK(b < sizes_.size() && grads.size() == sizes_[b], "PowerSGD bucket size");
  last_payload_bytes_ = 0;
  const float world = static_cast<float>(comm_.size());
  if (iter_ < cfg_.start_iter) {
    // Before --powersgd-start-iter: the plain average (with fp16: the fp16 hook, divide first).
    if (cfg_.fp16) {
      for (float& x : grads) x /= world;
      allreduce_sum(grads);
    } else {
      allreduce_sum(grads);
      for (float& x : grads) x /= world;
    }
    return;
  }
  if (cfg_.batched) {
    reduce_batched(b, grads);
  } else {
    reduce_per_tensor(b, grads);
  }
}

void PowerSgd::reduce_per_tensor(std::size_t b, std::span<float> input) {
  const float world = static_cast<float>(comm_.size());
  auto& err = error_[b];
  if (err.empty()) {
    err.assign(input.size(), 0.f);
  } else {
    for (std::size_t i = 0; i < input.size(); ++i) input[i] += err[i];
  }
  scratch_.assign(input.begin(), input.end());  // the input, for the new error
  std::vector<const BucketTensor*> comp, plain;
  std::size_t p_total = 0, q_total = 0, plain_total = 0;
  for (const auto& t : buckets_[b]) {
    if (t.rows > 0 && should_compress(t.rows, t.cols, cfg_.rank, cfg_.min_compression_rate)) {
      comp.push_back(&t);
      p_total += t.rows * approx_rank(t, cfg_.rank);
      q_total += t.cols * approx_rank(t, cfg_.rank);
    } else {
      plain.push_back(&t);
      plain_total += t.rows > 0 ? t.rows * t.cols : t.cols;
    }
  }
  auto numel = [](const BucketTensor& t) { return t.rows > 0 ? t.rows * t.cols : t.cols; };
  // The uncompressed tensors: one buffer, sum, divide.
  if (plain_total > 0) {
    std::vector<float> buf;
    buf.reserve(plain_total);
    for (const auto* t : plain)
      buf.insert(buf.end(), input.begin() + static_cast<std::ptrdiff_t>(t->offset),
                 input.begin() + static_cast<std::ptrdiff_t>(t->offset + numel(*t)));
    allreduce_sum(buf);
    std::size_t at = 0;
    for (const auto* t : plain)
      for (std::size_t i = 0; i < numel(*t); ++i) input[t->offset + i] = buf[at++] / world;
  }
  if (comp.empty()) {
    for (std::size_t i = 0; i < input.size(); ++i) err[i] = scratch_[i] - input[i];
    return;
  }
  auto& q = q_[b];
  const bool fresh = q.empty();
  if (fresh) q.resize(q_total);
  p_.resize(p_total);
  std::size_t po = 0, qo = 0;
  for (const auto* t : comp) {
    const std::size_t r = approx_rank(*t, cfg_.rank);
    float* qt = q.data() + qo;
    if (fresh) {
      new_q(std::span<float>(qt, t->cols * r), t->cols, r);
    } else {
      orthogonalize(qt, t->cols, r);  // warm start
    }
    matmul(input.data() + t->offset, qt, p_.data() + po, t->rows, t->cols, r);  // P = M Q
    po += t->rows * r;
    qo += t->cols * r;
  }
  allreduce_sum(p_);  // Collective (inside): the sum of every rank's P
  po = qo = 0;
  for (const auto* t : comp) {
    const std::size_t r = approx_rank(*t, cfg_.rank);
    orthogonalize(p_.data() + po, t->rows, r);
    matmul_tn(input.data() + t->offset, p_.data() + po, q.data() + qo, t->rows, t->cols,
              r);  // Q = M^T P
    po += t->rows * r;
    qo += t->cols * r;
  }
  allreduce_sum(q);  // Collective (inside): the sum of every rank's Q
  for (float& x : q) x /= world;
  po = qo = 0;
  for (const auto* t : comp) {
    const std::size_t r = approx_rank(*t, cfg_.rank);
    matmul_nt(p_.data() + po, q.data() + qo, input.data() + t->offset, t->rows, t->cols, r);
    po += t->rows * r;
    qo += t->cols * r;
  }
  for (std::size_t i = 0; i < input.size(); ++i) err[i] = scratch_[i] - input[i];
}

void PowerSgd::reduce_batched(std::size_t b, std::span<float> input) {
  const float world = static_cast<float>(comm_.size());
  const std::size_t n = input.size(), side = square_side(n), padded = side * side;
  const std::size_t r = std::min(static_cast<std::size_t>(cfg_.rank), side);
  std::vector<float> m(padded, 0.f);  // the bucket, zero-padded, as m[side][side]
  std::copy(input.begin(), input.end(), m.begin());
  auto& err = error_[b];
  if (err.empty()) {
    err.assign(padded, 0.f);
  } else {
    for (std::size_t i = 0; i < padded; ++i) m[i] += err[i];
  }
  scratch_.assign(m.begin(), m.end());
  auto& q = q_[b];
  if (q.empty()) {
    q.resize(side * r);
    for (float& x : q) x = static_cast<float>(rng_.normal());
  }
  orthogonalize(q.data(), side, r);
  p_.resize(side * r);
  matmul(m.data(), q.data(), p_.data(), side, side, r);
  allreduce_sum(p_);  // Collective (inside): sum of P
  orthogonalize(p_.data(), side, r);
  matmul_tn(m.data(), p_.data(), q.data(), side, side, r);
  allreduce_sum(q);  // Collective (inside): sum of Q
  for (float& x : q) x /= world;
  matmul_nt(p_.data(), q.data(), m.data(), side, side, r);
  for (std::size_t i = 0; i < padded; ++i) err[i] = scratch_[i] - m[i];
  std::copy(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(n), input.begin());
}

std::size_t PowerSgd::error_elements(std::size_t b) const {
  return cfg_.batched ? square_side(sizes_[b]) * square_side(sizes_[b]) : sizes_[b];
}

std::size_t PowerSgd::q_elements(std::size_t b) const {
  if (cfg_.batched)
    return square_side(sizes_[b]) *
           std::min(static_cast<std::size_t>(cfg_.rank), square_side(sizes_[b]));
  std::size_t n = 0;
  for (const auto& t : buckets_[b]) {
    if (t.rows > 0 && should_compress(t.rows, t.cols, cfg_.rank, cfg_.min_compression_rate))
      n += t.cols * approx_rank(t, cfg_.rank);
  }
  return n;
}

std::vector<NamedArray> PowerSgd::state() const {
  std::vector<NamedArray> out;
  for (std::size_t b = 0; b < sizes_.size(); ++b) {
    if (!error_[b].empty()) out.emplace_back(fmt::format("powersgd_error_{}", b), error_[b]);
    if (!q_[b].empty()) out.emplace_back(fmt::format("powersgd_q_{}", b), q_[b]);
  }
  // Name order: the order the checkpoint reader lists them in (HDF5's name index).
  std::sort(out.begin(), out.end(),
            [](const NamedArray& a, const NamedArray& b) { return a.first < b.first; });
  return out;
}

void PowerSgd::restore(const std::vector<NamedArray>& arrays, std::int64_t iter,
                       std::int64_t rng_state) {
  iter_ = iter;
  rng_ = SplitMix64(static_cast<std::uint64_t>(rng_state));
  for (auto& e : error_) e.clear();
  for (auto& q : q_) q.clear();
  for (const auto& [name, data] : arrays) {
    std::size_t b = 0;
    if (std::sscanf(name.c_str(), "powersgd_error_%zu", &b) == 1 && b < error_.size() &&
        data.size() == error_elements(b)) {
      error_[b] = data;
    } else if (std::sscanf(name.c_str(), "powersgd_q_%zu", &b) == 1 && b < q_.size() &&
               data.size() == q_elements(b)) {
      q_[b] = data;
    } else {
      throw UserError(fmt::format(
          "checkpoint: per-rank array '{}' does not belong to this PowerSGD configuration "
          "(other --bucket-cap-kb or --compression?); resume with the settings that wrote it",
          name));
    }
  }
}

}  // namespace mnist_ddp
