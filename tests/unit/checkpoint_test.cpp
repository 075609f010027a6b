// checkpoint_test.cpp — HDF5 checkpoints: round trip of every dataset and attribute, and the
// validation that rejects truncated, bit-flipped, incomplete, wrong-version and wrong-model files;
// resume fallback to the previous file; retention; the writable-directory check.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <iterator>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "mnist_ddp/app/resume.hpp"
#include "mnist_ddp/base/rng.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/diagnostics/log.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnist_ddp_ckpt_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    prepare_checkpoint_dir(dir_.string());
    ops_ = make_cpu_ops();
    model_ = std::make_unique<ConvNet>(*ops_, 2);
    layout_ = checkpoint_layout(*model_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainingState state(std::int64_t step, std::uint64_t seed = 1,
                      const std::string& run_id = "00000000run00001") {
    TrainingState s;
    SplitMix64 r(seed + static_cast<std::uint64_t>(step));
    s.run_id = run_id;
    s.step = step;
    s.epoch = 3;
    s.sample_offset = 1234;
    s.world_size = 4;
    s.seed = 77;
    s.config_json = R"({"lr":0.01})";
    s.program_version = "test";
    s.params.resize(model_->params().size());
    s.momentum.resize(model_->params().size());
    s.buffers.resize(model_->buffers().size());
    for (auto& v : s.params) v = r.uniform(-1, 1);
    for (auto& v : s.momentum) v = r.uniform(-1, 1);
    for (auto& v : s.buffers) v = r.uniform(0, 2);
    s.num_batches_tracked = {step, step + 1};
    s.optimizer_steps = step;
    s.input.recorded = true;
    s.input.name = "fixture (test)";
    s.input.mean = 0.28604060411453247;  // a float's exact value, as training records it
    s.input.std = 0.3530242443084717;
    s.input.labels_crc32 = 0x2ed6b06aU;
    s.input.train_count = 60000;
    s.lr_schedule = "cosine";
    s.base_lr = 0.1;
    s.last_lr = 0.05;
    s.momentum_factor = 0.9;
    s.weight_decay = 1e-4;
    s.nesterov = true;
    return s;
  }

  template <class F>
  void expect_error(F&& f, const std::string& file, const std::string& what) {
    testing::expect_user_error(f, file, what);
  }

  // File offset of the raw (single-chunk) data of a dataset.
  haddr_t chunk_address(const std::string& path, const char* dataset) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
    const hid_t sp = H5Dget_space(d);
    hsize_t offset[2];
    unsigned mask = 0;
    haddr_t addr = 0;
    hsize_t size = 0;
    EXPECT_GE(H5Dget_chunk_info(d, sp, 0, offset, &mask, &addr, &size), 0);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    return addr;
  }

  void flip_byte(const std::string& path, std::uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
    f.close();
    refresh_file_crc(path);  // past the file CRC: the inner checks must catch it
  }

  fs::path dir_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<ConvNet> model_;
  CheckpointLayout layout_;
};

TEST_F(CheckpointTest, RoundTripEveryDatasetAndAttribute) {
  const TrainingState s = state(42);
  const std::string path = save_checkpoint(dir_.string(), s, layout_);
  EXPECT_EQ(fs::path(path).filename(), "ckpt-00000042.h5");
  const TrainingState t = load_checkpoint(path, layout_);
  EXPECT_EQ(t.params, s.params);
  EXPECT_EQ(t.momentum, s.momentum);
  EXPECT_EQ(t.buffers, s.buffers);
  EXPECT_EQ(t.num_batches_tracked, s.num_batches_tracked);
  EXPECT_EQ(t.step, 42);
  EXPECT_EQ(t.epoch, 3);
  EXPECT_EQ(t.sample_offset, 1234);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.seed, 77u);
  EXPECT_EQ(t.config_json, s.config_json);
  EXPECT_EQ(t.run_id, "00000000run00001");
  EXPECT_EQ(checkpoint_run_id(path), "00000000run00001");
  EXPECT_EQ(t.optimizer_steps, 42);
  EXPECT_EQ(t.lr_schedule, "cosine");
  EXPECT_EQ(t.base_lr, 0.1);
  EXPECT_EQ(t.last_lr, 0.05);
  EXPECT_TRUE(t.nesterov);
  // No temporaries are left next to it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

// h5dump of a file without its first line (it names the file), without the attributes that
// say when and by which program it was written, and without what a later format version changed:
// its number, the payload CRC over its members, and version 3's /progress group.
std::string dump_without_write_time(const std::string& path) {
  const std::string cmd = "h5dump '" + path + "' 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (::pclose(p) != 0) return "h5dump failed: " + out;
  out.erase(0, out.find('\n') + 1);
  if (const std::size_t g = out.find("   GROUP \"progress\" {\n"); g != std::string::npos) {
    const std::size_t e = out.find("\n   }\n", g);
    if (e == std::string::npos) return "unterminated group progress";
    out.erase(g, e + 6 - g);
  }
  for (const char* attr : {"created", "program_version", "format_version", "payload_crc32"}) {
    const std::string open = std::string("ATTRIBUTE \"") + attr + "\" {";
    const std::size_t a = out.find(open);
    if (a == std::string::npos) return std::string("no attribute ") + attr + " in " + path;
    // The attribute's block ends at the first line that closes at its own indentation.
    const std::size_t line = out.rfind('\n', a) + 1;
    const std::string close = "\n" + out.substr(line, a - line) + "}\n";
    const std::size_t b = out.find(close, a);
    if (b == std::string::npos) return std::string("unterminated attribute ") + attr;
    out.erase(line, b + close.size() - line);
  }
  return out;
}

// The format changed only by version 3's /progress: a checkpoint written by mnist_ddp 0.1.0
// (format version 2, before the checkpoint code was split into a schema;
// tests/fixtures/checkpoint-0.1.0, see its README.md) is read and written back by this version
// with every group, dataset, attribute, type, filter and value the same (h5dump of both; the write
// time, program version, format version and payload CRC aside), plus a /progress group that says
// "no totals, no best" (zeros, -1).
TEST_F(CheckpointTest, ACheckpointOfVersion010IsReadAndWrittenBackUnchanged) {
  const std::string old_file = "tests/fixtures/checkpoint-0.1.0/ckpt-00000003.h5";
  ASSERT_TRUE(fs::exists(old_file)) << "run from the repository root";
  const TrainingState s = load_checkpoint(old_file, layout_);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.world_size, 2);
  const std::string rewritten = save_checkpoint(dir_.string(), s, layout_);
  EXPECT_EQ(fs::path(rewritten).filename(), "ckpt-00000003.h5");
  const std::string before = dump_without_write_time(old_file);
  const std::string after = dump_without_write_time(rewritten);
  EXPECT_GT(before.size(), 100000u) << before.substr(0, 300);
  EXPECT_TRUE(before == after) << "the rewritten file differs from the 0.1.0 file (diff: h5diff -v "
                               << old_file << " " << rewritten << ")";
  // And it loads back to the same state.
  const TrainingState again = load_checkpoint(rewritten, layout_);
  EXPECT_EQ(again.params, s.params);
  EXPECT_EQ(again.momentum, s.momentum);
  EXPECT_EQ(again.config_json, s.config_json);
  EXPECT_EQ(payload_crc32(again), payload_crc32(s, kCheckpointVersion));
  EXPECT_EQ(s.format_version, 2);
  EXPECT_EQ(again.format_version, kCheckpointVersion);
  EXPECT_EQ(again.images_seen, 0);
  EXPECT_EQ(again.wall_s, 0.0);
  EXPECT_EQ(again.best_step, -1);
  EXPECT_EQ(again.best_top1, -1.0);
}

TEST_F(CheckpointTest, RejectsTruncatedFile) {
  const std::string path = save_checkpoint(dir_.string(), state(5), layout_);
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_error([&] { load_checkpoint(path, layout_); }, path, "");
}

TEST_F(CheckpointTest, RejectsBitFlipInWeights) {
  const std::string path = save_checkpoint(dir_.string(), state(5), layout_);
  flip_byte(path, chunk_address(path, "/model/fc.weight") + 1000);
  expect_error([&] { load_checkpoint(path, layout_); }, path, "fc.weight");
}

TEST_F(CheckpointTest, AmpLossScaleRoundTripsAndIsCoveredByTheCrc) {
  TrainingState s = state(9);
  s.loss_scale = 16384;
  s.loss_scale_growth_tracker = 123;
  const std::string path = save_checkpoint(dir_.string(), s, layout_);
  const TrainingState t = load_checkpoint(path, layout_);
  EXPECT_EQ(t.loss_scale, 16384.0);
  EXPECT_EQ(t.loss_scale_growth_tracker, 123);
  // Another scale written into /amp (a valid HDF5 edit) no longer matches the payload CRC.
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    // (Group, then attribute: HDF5 1.10 cannot write through H5Aopen_by_name.)
    const hid_t g = H5Gopen2(f, "amp", H5P_DEFAULT);
    ASSERT_GE(g, 0);
    const hid_t a = H5Aopen(g, "loss_scale", H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const double other = 32768;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_DOUBLE, &other), 0);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
    refresh_file_crc(path);  // an edit on purpose: a valid file again
  }
  expect_error([&] { load_checkpoint(path, layout_); }, path, "CRC32");
  // A non-finite scale (consistent CRC: written that way) is refused by name, not resumed from.
  TrainingState bad = state(11);
  bad.loss_scale = std::numeric_limits<double>::infinity();
  const std::string inf_path = save_checkpoint(dir_.string(), bad, layout_);
  expect_error([&] { load_checkpoint(inf_path, layout_); }, inf_path, "/amp loss_scale");
  // Trained without --amp fp16: /amp says so (loss_scale 0), and a load reports no scale; the
  // group is required, so losing it is damage, not "no scaler".
  const std::string plain = save_checkpoint(dir_.string(), state(10), layout_);
  EXPECT_EQ(load_checkpoint(plain, layout_).loss_scale, 0.0);
  const hid_t f = H5Fopen(plain.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GT(H5Lexists(f, "amp", H5P_DEFAULT), 0);
  ASSERT_GE(H5Ldelete(f, "amp", H5P_DEFAULT), 0);
  H5Fclose(f);
  refresh_file_crc(plain);  // an edit on purpose: a valid file again
  expect_error([&] { load_checkpoint(plain, layout_); }, plain, "amp");
}

// /data: the input record round-trips exactly, is covered by the payload CRC, is required from
// version 2 on, and a version-1 file (no /data) still loads, saying it has none.
TEST_F(CheckpointTest, InputRecordRoundTripsIsCoveredByTheCrcAndVersionOneStillLoads) {
  const TrainingState s = state(12);
  const std::string path = save_checkpoint(dir_.string(), s, layout_);
  const TrainingState t = load_checkpoint(path, layout_);
  EXPECT_TRUE(t.input.recorded);
  EXPECT_EQ(t.format_version, kCheckpointVersion);
  EXPECT_EQ(t.input.name, s.input.name);
  EXPECT_EQ(t.input.mean, s.input.mean);  // bit-exact float64
  EXPECT_EQ(t.input.std, s.input.std);
  EXPECT_EQ(t.input.labels_crc32, s.input.labels_crc32);
  EXPECT_EQ(t.input.train_count, 60000);
  EXPECT_EQ(t.input.transform, kInputTransform);
  // Another mean (a valid HDF5 edit) no longer matches the payload CRC.
  const auto write_mean = [](const std::string& file, double v) {
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t g = H5Gopen2(f, "data", H5P_DEFAULT);
    ASSERT_GE(g, 0);
    const hid_t a = H5Aopen(g, "mean", H5P_DEFAULT);
    ASSERT_GE(a, 0);
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_DOUBLE, &v), 0);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
    refresh_file_crc(file);  // an edit on purpose: a valid file again
  };
  write_mean(path, 0.1307);
  expect_error([&] { load_checkpoint(path, layout_); }, path, "CRC32");
  // Version 2 without /data is damaged.
  const std::string p2 = save_checkpoint(dir_.string(), state(13), layout_);
  {
    const hid_t f = H5Fopen(p2.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "data", H5P_DEFAULT), 0);
    H5Fclose(f);
    refresh_file_crc(p2);  // an edit on purpose: a valid file again
  }
  expect_error([&] { load_checkpoint(p2, layout_); }, p2, "no /data group");
  // ... and the same file as version 1 (which never had /data, nor a CRC over it) loads.
  {
    TrainingState v1_state = state(13);
    v1_state.input.recorded = false;
    v1_state.format_version = 1;  // version 1's CRC: arrays and position only
    const std::uint64_t crc = payload_crc32(v1_state);
    const hid_t f = H5Fopen(p2.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "amp", H5P_DEFAULT), 0);  // version 1 wrote it only with a scaler
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const std::int64_t v1 = 1;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v1), 0);
    H5Aclose(a);
    const hid_t c = H5Aopen(f, "payload_crc32", H5P_DEFAULT);
    ASSERT_GE(H5Awrite(c, H5T_NATIVE_UINT64, &crc), 0);
    H5Aclose(c);
    H5Fclose(f);
    refresh_file_crc(p2);  // an edit on purpose: a valid file again
  }
  const TrainingState old = load_checkpoint(p2, layout_);
  EXPECT_FALSE(old.input.recorded);
  EXPECT_EQ(old.format_version, 1);
  EXPECT_EQ(old.params, state(13).params);
}

// A diverged model is never written (nothing on disk changes) and never resumed: both name the
// tensor, and the writer's refusal carries the divergence exit code.
TEST_F(CheckpointTest, NonFiniteStateIsNeverWrittenAndRefusedOnLoad) {
  const std::string good = save_checkpoint(dir_.string(), state(20), layout_);
  TrainingState bad = state(21);
  const ArenaEntry& fc_bias = layout_.params.back();
  ASSERT_EQ(fc_bias.name, "fc.bias");
  bad.params[fc_bias.offset + 3] = std::numeric_limits<float>::quiet_NaN();
  try {
    save_checkpoint(dir_.string(), bad, layout_);
    ADD_FAILURE() << "a NaN parameter was written";
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), kExitTrainingDiverged);
    EXPECT_NE(std::string(e.what()).find("/model/fc.bias (1 of 10 values non-finite)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(list_checkpoints(dir_.string()), std::vector<std::string>{good});
  for (const auto& f : fs::directory_iterator(dir_))
    EXPECT_EQ(f.path().string().find(".tmp-"), std::string::npos) << f.path();
  TrainingState inf_momentum = state(22);
  inf_momentum.momentum[0] = std::numeric_limits<float>::infinity();
  expect_error([&] { save_checkpoint(dir_.string(), inf_momentum, layout_); },
               "/optimizer/momentum_buffer/layer1.0.weight", "non-finite");
  // A file holding NaN (written behind mnist_ddp's back, consistent CRC): refused by name.
  {
    std::vector<float> bias(
        bad.params.begin() + static_cast<std::ptrdiff_t>(fc_bias.offset),
        bad.params.begin() + static_cast<std::ptrdiff_t>(fc_bias.offset + fc_bias.numel));
    TrainingState edited = state(20);
    std::copy(bias.begin(), bias.end(),
              edited.params.begin() + static_cast<std::ptrdiff_t>(fc_bias.offset));
    const std::uint64_t crc = payload_crc32(edited);
    const hid_t f = H5Fopen(good.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t d = H5Dopen2(f, "model/fc.bias", H5P_DEFAULT);
    ASSERT_GE(d, 0);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, bias.data()), 0);
    H5Dclose(d);
    const hid_t c = H5Aopen(f, "payload_crc32", H5P_DEFAULT);
    ASSERT_GE(H5Awrite(c, H5T_NATIVE_UINT64, &crc), 0);
    H5Aclose(c);
    H5Fclose(f);
    refresh_file_crc(good);  // an edit on purpose: a valid file again
  }
  expect_error([&] { load_checkpoint(good, layout_); }, good, "/model/fc.bias (1 of 10 values");
}

// Every value a load returns, compared exactly (floats by their bits).
bool same_state(const TrainingState& a, const TrainingState& b) {
  const auto bits = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof x[0]) == 0;
  };
  const auto d = [](double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  if (a.rank_arrays.size() != b.rank_arrays.size()) return false;
  for (std::size_t r = 0; r < a.rank_arrays.size(); ++r) {
    if (a.rank_arrays[r].size() != b.rank_arrays[r].size()) return false;
    for (std::size_t i = 0; i < a.rank_arrays[r].size(); ++i) {
      if (a.rank_arrays[r][i].first != b.rank_arrays[r][i].first ||
          !bits(a.rank_arrays[r][i].second, b.rank_arrays[r][i].second))
        return false;
    }
  }
  return a.step == b.step && a.epoch == b.epoch && a.sample_offset == b.sample_offset &&
         a.world_size == b.world_size && a.seed == b.seed && a.config_json == b.config_json &&
         a.program_version == b.program_version && bits(a.params, b.params) &&
         bits(a.buffers, b.buffers) && a.num_batches_tracked == b.num_batches_tracked &&
         bits(a.momentum, b.momentum) && a.optimizer_steps == b.optimizer_steps &&
         a.lr_schedule == b.lr_schedule && d(a.base_lr, b.base_lr) && d(a.last_lr, b.last_lr) &&
         d(a.momentum_factor, b.momentum_factor) && d(a.dampening, b.dampening) &&
         d(a.weight_decay, b.weight_decay) && a.nesterov == b.nesterov &&
         a.hook_iter == b.hook_iter && a.hook_rng == b.hook_rng && d(a.loss_scale, b.loss_scale) &&
         a.loss_scale_growth_tracker == b.loss_scale_growth_tracker &&
         a.format_version == b.format_version && a.input.recorded == b.input.recorded &&
         a.input.name == b.input.name && d(a.input.mean, b.input.mean) &&
         d(a.input.std, b.input.std) && a.input.labels_crc32 == b.input.labels_crc32 &&
         a.input.train_count == b.input.train_count && a.input.transform == b.input.transform;
}

// A damaged byte anywhere (as a disk would do it): every byte of the first 1.5 KiB and of the
// last 0.5 KiB (the file-CRC user block, superblock, object headers, attributes) and 1,000
// positions spread over the rest of a real checkpoint with every optional part present, each
// flipped alone. Each copy must either load to exactly the original state or be refused with an
// error naming the file: never a different state, a crash, a sanitizer report or a hang (each load
// runs in a child process, which reports each result on a pipe; exit codes apart from a
// sanitizer's 1).
TEST_F(CheckpointTest, EveryFlippedByteLoadsExactlyOrIsRefusedByName) {
  TrainingState s = state(30);
  s.world_size = 2;
  s.rank_arrays = {{{"powersgd_error_0", {1.f, 2.f, 3.f}}, {"powersgd_q_0", {0.5f}}},
                   {{"powersgd_error_0", {4.f, 5.f, 6.f}}, {"powersgd_q_0", {0.25f}}}};
  s.hook_iter = 7;
  s.hook_rng = 99;
  s.loss_scale = 1024;
  s.loss_scale_growth_tracker = 5;
  const std::string path = save_checkpoint(dir_.string(), s, layout_);
  const TrainingState original = load_checkpoint(path, layout_);
  ASSERT_TRUE(same_state(original, load_checkpoint(path, layout_)));
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::size_t n = bytes.size();
  ASSERT_GT(n, 4096u);
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < 1536; ++i) positions.push_back(i);
  for (std::size_t i = n - 512; i < n; ++i) positions.push_back(i);
  for (std::size_t k = 0; k < 1000; ++k) positions.push_back(1536 + k * (n - 2048) / 1000);
  const std::string copy = (dir_ / "flipped.h5").string();
  { std::ofstream(copy, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n)); }
  // set_byte(at, flipped): byte `at` of the copy flipped (every bit) or as written.
  const auto set_byte = [&](std::size_t at, bool flipped) {
    const char b = flipped ? static_cast<char>(bytes[at] ^ 0xFF) : bytes[at];
    std::fstream f(copy, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&b, 1);
  };
  // One child process loads the flipped copies in turn and reports each result as one byte on a
  // pipe (0 exact, 10 refused naming the file, 13/14/15 otherwise). A crash, a sanitizer report
  // or a hang (alarm) ends the child: the position it was on is reported bad and a new child
  // goes on from the next one. A child per position would cost a fork each (3,000 forks of this
  // process: 45 s of page-table copies on a 2-core machine).
  int exact = 0, refused = 0;
  std::vector<std::string> bad;
  std::size_t next = 0;
  while (next < positions.size()) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      for (std::size_t k = next; k < positions.size(); ++k) {
        alarm(20);  // a hang ends the child (SIGALRM): reported below
        set_byte(positions[k], true);
        unsigned char code = 0;
        try {
          code = same_state(load_checkpoint(copy, layout_), original) ? 0 : 13;
        } catch (const UserError& e) {
          code = std::string(e.what()).find(copy) != std::string::npos ? 10 : 14;
        } catch (...) {
          code = 15;
        }
        set_byte(positions[k], false);  // restored before the next position
        if (write(fds[1], &code, 1) != 1) _exit(16);
      }
      _exit(0);
    }
    close(fds[1]);
    unsigned char code = 0;
    while (read(fds[0], &code, 1) == 1) {
      if (code == 0) {
        ++exact;
      } else if (code == 10) {
        ++refused;
      } else if (bad.size() < 20) {
        bad.push_back(fmt::format("byte {}: exit {}", positions[next], code));
      }
      ++next;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (next < positions.size()) {  // the child died on positions[next]
      if (bad.size() < 20) {
        bad.push_back(fmt::format("byte {}: {}", positions[next],
                                  WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                                    : fmt::format("signal {}", WTERMSIG(status))));
      }
      set_byte(positions[next], false);  // the dead child left it flipped
      ++next;
    }
  }
  std::printf(
      "bit-flip sweep: %zu positions of %zu bytes: %d load exactly, %d refused naming the "
      "file, %zu otherwise\n",
      positions.size(), n, exact, refused, positions.size() - exact - refused);
  EXPECT_GE(positions.size(), 2000u);
  std::string first;
  for (const auto& b : bad) first += b + "; ";
  EXPECT_EQ(static_cast<std::size_t>(exact + refused), positions.size())
      << "exit 13: a different state loaded; 14: an error without the file; 15: another "
         "exception; any other exit or a signal: a crash, a sanitizer report or a hang. First: "
      << first;
}

TEST_F(CheckpointTest, RejectsIncompleteWrongVersionAndWrongModel) {
  const std::string path = save_checkpoint(dir_.string(), state(5), layout_);
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f, "complete");
    H5Fclose(f);
    refresh_file_crc(path);  // an edit on purpose: a valid file again
  }
  expect_error([&] { load_checkpoint(path, layout_); }, path, "incomplete");
  const std::string p2 = save_checkpoint(dir_.string(), state(6), layout_);
  {
    const hid_t f = H5Fopen(p2.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    const std::int64_t v = 99;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
    refresh_file_crc(p2);  // an edit on purpose: a valid file again
  }
  expect_error([&] { load_checkpoint(p2, layout_); }, p2, "format version 99");
  const std::string p3 = save_checkpoint(dir_.string(), state(7), layout_);
  CheckpointLayout other = layout_;
  other.params.back().shape = {20};  // a model with 20 classes
  expect_error([&] { load_checkpoint(p3, other); }, p3, "incompatible model");
  const std::string junk = (dir_ / "ckpt-00000099.h5").string();
  std::ofstream(junk) << "not hdf5";
  expect_error([&] { load_checkpoint(junk, layout_); }, junk, "truncated or not a checkpoint");
  // A well-formed HDF5 file without mnist_ddp's file CRC line never reaches HDF5's parser.
  const std::string plain = (dir_ / "ckpt-00000098.h5").string();
  const hid_t f = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::vector<float> big(1000, 1.0f);
  const hsize_t n = big.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d =
      H5Dcreate2(f, "x", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, big.data());
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
  expect_error([&] { load_checkpoint(plain, layout_); }, plain, "no file CRC line at its start");
  expect_error([&] { load_model_weights(plain, layout_); }, plain, "no file CRC line at its start");
}

// A dataset stored other than the way mnist_ddp writes it is refused before HDF5 reads it, even
// with the right name, shape and values (so every CRC still matches): Debian's HDF5 1.10 reads
// past a crafted compact dataset's buffer (found by fuzz_checkpoint under ASan).
TEST_F(CheckpointTest, DatasetsStoredOtherwiseAreRefusedBeforeTheyAreRead) {
  // Rewrites `name` with the same type, shape and bytes but the given layout.
  const auto restore_as = [&](const std::string& path, const char* name, H5D_layout_t layout) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    const hid_t type = H5Dget_type(d);
    const hid_t space = H5Dget_space(d);
    std::vector<char> bytes(static_cast<std::size_t>(H5Dget_storage_size(d)) + 64);
    ASSERT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
    H5Dclose(d);
    ASSERT_GE(H5Ldelete(f, name, H5P_DEFAULT), 0);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_layout(dcpl, layout), 0);
    const hid_t again = H5Dcreate2(f, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(again, 0);
    ASSERT_GE(H5Dwrite(again, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
    H5Dclose(again);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(f);
    refresh_file_crc(path);  // past the file CRC: only the storage check is left to catch it
  };
  const std::string weights = save_checkpoint(dir_.string(), state(5), layout_);
  restore_as(weights, "/model/fc.bias", H5D_COMPACT);
  expect_error([&] { load_checkpoint(weights, layout_); }, weights,
               "/model/fc.bias is not stored as mnist_ddp writes it (float32, one "
               "Fletcher32-checked chunk)");
  const std::string counter = save_checkpoint(dir_.string(), state(6), layout_);
  restore_as(counter, "/model/layer1.1.num_batches_tracked", H5D_COMPACT);
  expect_error([&] { load_checkpoint(counter, layout_); }, counter,
               "/model/layer1.1.num_batches_tracked is not stored as mnist_ddp writes it (one "
               "contiguous int64)");
  // The unmodified file loads: the check refuses the layout, not the file.
  const std::string good = save_checkpoint(dir_.string(), state(7), layout_);
  EXPECT_EQ(load_checkpoint(good, layout_).step, 7);
}

TEST_F(CheckpointTest, ResumeFallsBackToThePreviousFile) {
  save_checkpoint(dir_.string(), state(10), layout_);
  const std::string newest = save_checkpoint(dir_.string(), state(20), layout_);
  flip_byte(newest, chunk_address(newest, "/optimizer/momentum_buffer/layer2.0.weight") + 4000);
  std::vector<std::string> warnings;
  const auto found = find_resume_checkpoint(dir_.string(), layout_, &warnings);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->second.step, 10);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(newest), std::string::npos) << warnings[0];
  // Nothing at all: start fresh.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  warnings.clear();
  EXPECT_FALSE(find_resume_checkpoint(dir_.string(), layout_, &warnings).has_value());
}

// The one resolver of --resume / --init-weights / --write-config --resume: auto (the newest that
// loads, a damaged one skipped with a warning; none: fresh), best (the --keep-best file, or an
// error naming the flag, the directory and the fix), a path (as given, loaded on request).
TEST_F(CheckpointTest, ResolverChoosesTheFileAndSaysWhy) {
  const std::string dir = dir_.string();
  ResolvedCheckpoint none = resolve_checkpoint("auto", dir, layout_, "--resume", true);
  EXPECT_TRUE(none.path.empty());
  EXPECT_FALSE(none.state.has_value());
  EXPECT_EQ(none.chosen, CheckpointChoice::Newest);
  const std::string c10 = save_checkpoint(dir, state(10), layout_);
  const std::string c20 = save_checkpoint(dir, state(20), layout_);
  flip_byte(c20, chunk_address(c20, "/optimizer/momentum_buffer/layer2.0.weight") + 4000);
  const ResolvedCheckpoint newest =
      resolve_checkpoint("auto", dir, layout_, "--init-weights", false);
  EXPECT_EQ(newest.path, c10);
  ASSERT_TRUE(newest.state.has_value());  // auto loads each candidate while choosing
  EXPECT_EQ(newest.state->step, 10);
  ASSERT_EQ(newest.warnings.size(), 1u);
  EXPECT_NE(newest.warnings[0].find("skipping damaged checkpoint: checkpoint " + c20),
            std::string::npos)
      << newest.warnings[0];
  expect_error([&] { resolve_checkpoint("best", dir, layout_, "--eval-only --resume", false); },
               "--eval-only --resume best: --checkpoint-dir " + dir,
               "has no best checkpoint (ckpt-best.h5");
  keep_as_best(dir, c10);
  const ResolvedCheckpoint best = resolve_checkpoint("best", dir, layout_, "--resume", true);
  EXPECT_EQ(best.path, best_checkpoint_path(dir));
  EXPECT_EQ(best.chosen, CheckpointChoice::Best);
  EXPECT_EQ(best.state->step, 10);
  const ResolvedCheckpoint given = resolve_checkpoint(c10, "/nowhere", layout_, "--resume", false);
  EXPECT_EQ(given.path, c10);
  EXPECT_EQ(given.chosen, CheckpointChoice::Given);
  EXPECT_FALSE(given.state.has_value());
  EXPECT_EQ(resolve_checkpoint(c10, "/nowhere", layout_, "--resume", true).state->step, 10);
  // Every file damaged: auto is an error naming the flag as the user typed it.
  flip_byte(c10, chunk_address(c10, "/optimizer/momentum_buffer/layer2.0.weight") + 4000);
  fs::remove(best_checkpoint_path(dir));
  expect_error([&] { resolve_checkpoint("auto", dir, layout_, "--init-weights", false); },
               "--init-weights auto: none of the 2 checkpoint(s) in " + dir, "can be loaded");
}

TEST_F(CheckpointTest, KeepsTheNewestKAndIgnoresTemporaries) {
  for (int s : {1, 2, 3, 4, 5}) save_checkpoint(dir_.string(), state(s), layout_);
  std::ofstream(dir_ / ".ckpt-00000006.h5.tmp-1") << "partial";
  const Retention r = prune_checkpoints(dir_.string(), 2, "00000000run00001");
  EXPECT_EQ(r.deleted.size(), 3u);
  EXPECT_TRUE(r.foreign.empty());
  const auto left = list_checkpoints(dir_.string());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "ckpt-00000005.h5");
  EXPECT_EQ(fs::path(left[1]).filename(), "ckpt-00000004.h5");
  prepare_checkpoint_dir(dir_.string());  // a new run removes the dead temporary
  EXPECT_FALSE(fs::exists(dir_ / ".ckpt-00000006.h5.tmp-1"));
}

// --keep counts and deletes only its own lineage: another run's files (another run id), an older
// version's (no run id) and an unreadable one are neither deleted nor counted.
TEST_F(CheckpointTest, RetentionNeverDeletesAnotherRunsCheckpoint) {
  const std::string mine = "aaaaaaaaaaaaaaaa", theirs = "bbbbbbbbbbbbbbbb";
  for (int s : {1, 2, 3}) save_checkpoint(dir_.string(), state(s, 1, theirs), layout_);
  save_checkpoint(dir_.string(), state(4, 1, ""), layout_);  // an older mnist_ddp: no run id
  for (int s : {5, 6, 7, 8}) save_checkpoint(dir_.string(), state(s, 1, mine), layout_);
  std::ofstream(dir_ / "ckpt-00000009.h5") << "not a checkpoint";  // owner unknown
  EXPECT_EQ(checkpoint_run_id((dir_ / "ckpt-00000002.h5").string()), theirs);
  EXPECT_EQ(checkpoint_run_id((dir_ / "ckpt-00000004.h5").string()), "");
  const Retention r = prune_checkpoints(dir_.string(), 1, mine);
  ASSERT_EQ(r.deleted.size(), 3u);  // 7, 6, 5: only this lineage's older ones
  EXPECT_EQ(fs::path(r.deleted[0]).filename(), "ckpt-00000007.h5");
  ASSERT_EQ(r.foreign.size(), 5u);  // 9 (unreadable), 4 (no run id), 3, 2, 1 (theirs)
  EXPECT_NE(r.foreign[0].find("(unreadable)"), std::string::npos) << r.foreign[0];
  EXPECT_NE(r.foreign[1].find("(no run id)"), std::string::npos) << r.foreign[1];
  std::vector<std::string> left;
  for (const auto& p : list_checkpoints(dir_.string())) left.push_back(fs::path(p).filename());
  EXPECT_EQ(left,
            (std::vector<std::string>{"ckpt-00000009.h5", "ckpt-00000008.h5", "ckpt-00000004.h5",
                                      "ckpt-00000003.h5", "ckpt-00000002.h5", "ckpt-00000001.h5"}));
  for (const char* f : {"ckpt-00000001.h5", "ckpt-00000002.h5", "ckpt-00000003.h5"})
    EXPECT_EQ(load_checkpoint((dir_ / f).string(), layout_).run_id, theirs) << f;
  // A run id nobody wrote deletes nothing.
  EXPECT_TRUE(prune_checkpoints(dir_.string(), 1, "cccccccccccccccc").deleted.empty());
}

// The names a run will write (later steps) must not be another run's: a fresh run (step 0) is in
// the way of every foreign file; a resumed run only of foreign files after its step.
TEST_F(CheckpointTest, CheckpointsInTheWayOfARunAreAnotherRunsLaterSteps) {
  const std::string mine = "aaaaaaaaaaaaaaaa", theirs = "bbbbbbbbbbbbbbbb";
  save_checkpoint(dir_.string(), state(10, 1, theirs), layout_);
  save_checkpoint(dir_.string(), state(20, 1, ""), layout_);
  save_checkpoint(dir_.string(), state(30, 1, mine), layout_);
  std::ofstream(dir_ / "ckpt-00000040.h5") << "damaged";  // nothing loads: not in the way
  EXPECT_EQ(checkpoints_in_the_way(dir_.string(), mine, 0),
            (std::vector<std::string>{"ckpt-00000010.h5 (run id bbbbbbbbbbbbbbbb)",
                                      "ckpt-00000020.h5 (no run id)"}));
  EXPECT_EQ(checkpoints_in_the_way(dir_.string(), mine, 15),
            (std::vector<std::string>{"ckpt-00000020.h5 (no run id)"}));
  EXPECT_TRUE(checkpoints_in_the_way(dir_.string(), mine, 20).empty());
  EXPECT_EQ(checkpoints_in_the_way(dir_.string(), theirs, 10).size(), 2u);  // 20 and mine at 30
  EXPECT_FALSE(checkpoint_owner((dir_ / "ckpt-00000040.h5").string()).readable);
  EXPECT_TRUE(checkpoint_owner((dir_ / "ckpt-00000020.h5").string()).readable);
}

TEST_F(CheckpointTest, PreemptionCheckpointRollsAndNeverDeletesAnythingElse) {
  setenv("SLURM_JOB_ID", "4242", 1);
  const std::string a = save_checkpoint(dir_.string(), state(3), layout_);
  const std::string b = save_checkpoint(dir_.string(), state(7), layout_);
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), a), "");  // the first one: nothing to roll
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), b), a);   // the second replaces it
  EXPECT_FALSE(fs::exists(a));
  EXPECT_TRUE(fs::exists(b));
  std::ifstream marker(dir_ / ".preempt-4242");
  std::string recorded;
  std::getline(marker, recorded);
  EXPECT_EQ(recorded, b);
  // A stale record naming a file that is not an older checkpoint of this directory is ignored.
  const fs::path outside = dir_.parent_path() / ("mnist_ddp_keep_" + std::to_string(getpid()));
  std::ofstream(outside) << "user data";
  std::ofstream(dir_ / ".preempt-4242", std::ios::trunc) << outside.string() << "\n";
  const std::string c = save_checkpoint(dir_.string(), state(9), layout_);
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), c), "");
  EXPECT_TRUE(fs::exists(outside));
  // Nor is a record naming a newer checkpoint than the one being written.
  const std::string d = save_checkpoint(dir_.string(), state(2), layout_);
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), c), "");  // marker now names c itself
  std::ofstream(dir_ / ".preempt-4242", std::ios::trunc) << c << "\n";
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), d), "");
  EXPECT_TRUE(fs::exists(c));
  // Nor one of another lineage (a directory shared by hand), even when the record names it.
  const std::string e = save_checkpoint(dir_.string(), state(11, 1, "bbbbbbbbbbbbbbbb"), layout_);
  const std::string f = save_checkpoint(dir_.string(), state(12), layout_);
  std::ofstream(dir_ / ".preempt-4242", std::ios::trunc) << e << "\n";
  EXPECT_EQ(roll_preemption_checkpoint(dir_.string(), f), "");
  EXPECT_TRUE(fs::exists(e));
  fs::remove(outside);
  unsetenv("SLURM_JOB_ID");
}

// Version 3's /progress: the run's totals and best evaluation round-trip, are covered by the
// payload CRC, and impossible values are refused by name.
TEST_F(CheckpointTest, ProgressRoundTripsIsCoveredByTheCrcAndImpossibleValuesAreRefused) {
  TrainingState s = state(30);
  s.wall_s = 123.25;
  s.train_s = 99.5;
  s.images_seen = 6000;
  s.best_top1 = 0.875;
  s.best_step = 20;
  const TrainingState t = load_checkpoint(save_checkpoint(dir_.string(), s, layout_), layout_);
  EXPECT_EQ(t.wall_s, 123.25);
  EXPECT_EQ(t.train_s, 99.5);
  EXPECT_EQ(t.images_seen, 6000);
  EXPECT_EQ(t.best_top1, 0.875);
  EXPECT_EQ(t.best_step, 20);
  const auto set_attr = [&](const std::string& path, const char* name, std::int64_t v) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, "progress", H5P_DEFAULT);
    const hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
    refresh_file_crc(path);  // past the file CRC: the payload CRC must catch it
  };
  const std::string path = dir_.string() + "/ckpt-00000030.h5";
  set_attr(path, "images_seen", 6001);
  expect_error([&] { load_checkpoint(path, layout_); }, path, "payload CRC32 mismatch");
  s.best_step = 31;  // after the checkpoint's own step
  expect_error([&] { save_checkpoint(dir_.string(), s, layout_), load_checkpoint(path, layout_); },
               path, "/progress holds impossible values");
}

// --keep-best: the best checkpoint is a second name, out of the rotation (retention, --resume
// auto) but verified, and another run's best is in the way of a run that keeps one.
TEST_F(CheckpointTest, BestCheckpointIsOutOfTheRotationAndAnotherRunsIsInTheWay) {
  const std::string c10 = save_checkpoint(dir_.string(), state(10), layout_);
  const std::string c20 = save_checkpoint(dir_.string(), state(20), layout_);
  const std::string best = keep_as_best(dir_.string(), c10);
  EXPECT_EQ(best, best_checkpoint_path(dir_.string()));
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::string>{c20, c10}));
  prune_checkpoints(dir_.string(), 1, "00000000run00001");
  EXPECT_FALSE(fs::exists(c10));
  EXPECT_EQ(load_checkpoint(best, layout_).step, 10);  // the file outlives its rotated name
  std::vector<std::string> warnings;
  EXPECT_EQ(find_resume_checkpoint(dir_.string(), layout_, &warnings)->first, c20);
  const auto verdicts = verify_checkpoints(dir_.string(), layout_);
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_EQ(verdicts[1].path, best);
  EXPECT_EQ(verdicts[1].step, 10);
  keep_as_best(dir_.string(), c20);  // a better one replaces it
  EXPECT_EQ(load_checkpoint(best, layout_).step, 20);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  // Another lineage's best is in the way only of a run that keeps one; its own never is.
  EXPECT_EQ(checkpoints_in_the_way(dir_.string(), "00000000run00002", 100, true),
            std::vector<std::string>{"ckpt-best.h5 (run id 00000000run00001)"});
  EXPECT_TRUE(checkpoints_in_the_way(dir_.string(), "00000000run00002", 100, false).empty());
  EXPECT_TRUE(checkpoints_in_the_way(dir_.string(), "00000000run00001", 100, true).empty());
}

// Resuming with --keep-best: a better best of the run in the directory stays the one to beat, and
// a checkpoint recorded as the best but never linked is linked; another run's best is left alone.
TEST_F(CheckpointTest, ResumeReconcilesTheRunsBestWithTheDirectory) {
  const std::string dir = dir_.string();
  TrainingState b20 = state(20);
  b20.best_top1 = 0.9;
  b20.best_step = 20;
  keep_as_best(dir_.string(), save_checkpoint(dir_.string(), b20, layout_));
  // Resumed from an older branch that knew a worse best: the directory's 0.9 is the one to beat.
  TrainingState s = state(10);
  s.best_top1 = 0.8;
  s.best_step = 10;
  EXPECT_TRUE(reconcile_best(dir, dir + "/ckpt-00000010.h5", layout_, s, true).linked.empty());
  EXPECT_EQ(s.best_top1, 0.9);
  EXPECT_EQ(s.best_step, 20);
  EXPECT_EQ(load_checkpoint(best_checkpoint_path(dir_.string()), layout_).step, 20);
  // Recorded as the best at its own step, never linked: linked now (not by a dry run).
  TrainingState b30 = state(30);
  b30.best_top1 = 0.95;
  b30.best_step = 30;
  const std::string p30 = save_checkpoint(dir_.string(), b30, layout_);
  EXPECT_TRUE(reconcile_best(dir, p30, layout_, b30, false).linked.empty());  // a dry run's
  EXPECT_EQ(load_checkpoint(best_checkpoint_path(dir_.string()), layout_).step, 20);
  const BestReconciled linked = reconcile_best(dir, p30, layout_, b30, true);
  EXPECT_NE(linked.linked.find("kept as " + best_checkpoint_path(dir)), std::string::npos)
      << linked.linked;
  EXPECT_EQ(load_checkpoint(best_checkpoint_path(dir_.string()), layout_).step, 30);
  EXPECT_EQ(b30.best_top1, 0.95);
  // Another run's best: neither adopted nor replaced.
  TrainingState other = state(40, 1, "00000000run00002");
  other.best_top1 = 0.97;
  other.best_step = 40;
  const std::string p40 = save_checkpoint(dir_.string(), other, layout_);
  EXPECT_TRUE(reconcile_best(dir, p40, layout_, other, true).linked.empty());
  EXPECT_EQ(load_checkpoint(best_checkpoint_path(dir_.string()), layout_).step, 30);
}

// --dry-run's directory check creates and writes nothing.
TEST_F(CheckpointTest, DryRunDirectoryCheckWritesNothing) {
  const fs::path later = dir_ / "a" / "b";
  EXPECT_TRUE(check_checkpoint_dir(later.string()));  // a run would create it
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  EXPECT_FALSE(check_checkpoint_dir(dir_.string()));
  std::ofstream(dir_ / "file") << "x";
  expect_error([&] { check_checkpoint_dir((dir_ / "file" / "sub").string()); }, "file",
               "is not a directory");
}

TEST_F(CheckpointTest, UnwritableDirectoryIsNamed) {
  std::ofstream(dir_ / "file") << "x";
  const std::string bad = (dir_ / "file" / "ckpt").string();
  expect_error([&] { prepare_checkpoint_dir(bad); }, bad, "--checkpoint-dir");
}

}  // namespace
}  // namespace mnist_ddp
